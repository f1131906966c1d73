/**
 * `npm start`: the whole Mailroom service in one process.
 *
 * Stopping: SIGTERM or SIGINT interrupts the service, whose layers close in reverse order: the HTTP
 * and SMTP listeners stop accepting, delivery attempts in flight drain (Dispatcher), then the
 * database closes; the exit code is 0. `SHUTDOWN_TIMEOUT` bounds it: past that the process exits
 * with code 1. A second signal kills at once.
 */
import { NodeRuntime } from "@effect/platform-node"
import { ConfigError, Duration, Effect, Layer } from "effect"
import { setFlagsFromString } from "node:v8"
import { AppConfig, AppConfigLive } from "./platform/Config.js"
import { asPortInUse, ensurePortsFree, PORT_IN_USE_EXIT, PortInUse } from "./platform/Ports.js"
import { ServiceLive } from "./Server.js"

// The spool's young-generation collections during long streams (inbound/Spool.ts) use `gc`, exposed
// to a separate context only. Set before the first message arrives; flags belong to the entry point.
setFlagsFromString("--expose-gc")

const CONFIG_EXIT = 78
const SHUTDOWN_OVERRUN_EXIT = 1

const fatal = (line: string, code: number) =>
  Effect.sync(() => {
    process.stderr.write(`mailroom: ${line}\n`)
    process.exit(code)
  })

/** Past the shutdown bound, exit whatever is still closing. */
const boundShutdown = (timeout: Duration.Duration) =>
  Effect.sync(() => {
    const onSignal = () => {
      process.off("SIGTERM", onSignal)
      process.off("SIGINT", onSignal)
      const ms = Duration.toMillis(timeout)
      setTimeout(() => {
        process.stderr.write(`mailroom: stopping took longer than SHUTDOWN_TIMEOUT (${ms} ms); exiting\n`)
        process.exit(SHUTDOWN_OVERRUN_EXIT)
      }, ms).unref()
    }
    process.on("SIGTERM", onSignal)
    process.on("SIGINT", onSignal)
  })

/**
 * Started by `npm start`, the service follows npm: npm forwards SIGTERM and SIGINT to it, and if
 * npm itself is killed outright (SIGKILL) the server notices its new parent and stops the same way.
 */
const followNpm = Effect.sync(() => {
  // Only under `npm start` itself (npx and other npm commands set the variable too).
  if (process.env.npm_lifecycle_event !== "start") return
  const parent = process.ppid
  setInterval(() => {
    if (process.ppid !== parent) process.kill(process.pid, "SIGTERM")
  }, 1000).unref()
})

const program = Effect.gen(function*() {
  const config = yield* AppConfig
  yield* ensurePortsFree(config.host, [
    { port: config.port, variable: "PORT" },
    { port: config.smtpPort, variable: "SMTP_PORT" }
  ])
  yield* boundShutdown(config.shutdownTimeout)
  yield* followNpm
  return yield* Layer.launch(ServiceLive).pipe(
    // The HTTP listener's own bind failure, should the port be taken after the check.
    Effect.catchTag("ServeError", (e) => Effect.fail<PortInUse | typeof e>(asPortInUse(config.port, "PORT")(e.cause) ?? e))
  )
})

program.pipe(
  Effect.provide(AppConfigLive),
  Effect.catchIf(ConfigError.isConfigError, (e) => fatal(`invalid configuration: ${String(e)}`, CONFIG_EXIT)),
  Effect.catchTag("PortInUse", (e) => fatal(e.message, PORT_IN_USE_EXIT)),
  NodeRuntime.runMain
)
