/**
 * `npm start`: the whole Mailroom service, in `WORKERS` processes on PostgreSQL (a supervising
 * primary and its workers, platform/Workers.ts) or in one process (`WORKERS=1`, or the embedded
 * database). This module is all three: a lone process, the primary, a worker.
 *
 * Stopping (a lone process, each worker): SIGTERM or SIGINT interrupts the service, whose layers close in reverse order: the HTTP
 * and SMTP listeners stop accepting, delivery attempts in flight drain (Dispatcher), then the
 * database closes; the exit code is 0. `SHUTDOWN_TIMEOUT` bounds it: past that the process exits
 * with code 1. A second signal kills at once.
 */
import { NodeRuntime } from "@effect/platform-node"
import { ConfigError, Duration, Effect, Layer, ManagedRuntime, Option } from "effect"
import { setFlagsFromString } from "node:v8"
import { AppConfig, AppConfigLive, type AppConfigShape } from "./platform/Config.js"
import { asPortInUse, ensurePortsFree, PORT_IN_USE_EXIT, PortInUse } from "./platform/Ports.js"
import { DRAIN_MESSAGE, supervise, workerCount, workerRole } from "./platform/Workers.js"
import { loggerLayer } from "./platform/Logging.js"
import { startModelHost } from "./search/ModelProcess.js"
import { serveModelToWorkers } from "./search/ModelRelay.js"
import { serviceLive } from "./Server.js"

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

/** Whether a stop signal was received (a worker asked to drain then has nothing more to do). */
let stopping = false

/** Past the shutdown bound, exit whatever is still closing. */
const boundShutdown = (timeout: Duration.Duration) =>
  Effect.sync(() => {
    const onSignal = () => {
      stopping = true
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

/** A worker stops on the primary's request exactly as on SIGTERM. */
const drainOnRequest = Effect.sync(() => {
  process.on("message", (message) => {
    if (message === DRAIN_MESSAGE && !stopping) process.kill(process.pid, "SIGTERM")
  })
})

/** The service until stopped; `first`: the lone process or worker 1 (see Workers.ts). */
const serve = (config: AppConfigShape, first: boolean) =>
  Layer.launch(serviceLive({ embeddingBacklog: first })).pipe(
    // The HTTP listener's own bind failure, should the port be taken after the check.
    Effect.catchTag("ServeError", (e) => Effect.fail<PortInUse | typeof e>(asPortInUse(config.port, "PORT")(e.cause) ?? e)),
    Effect.provideService(AppConfig, config)
  )

/**
 * Log lines of this module, at LOG_LEVEL in the service's format, from a runtime of their own: the
 * service provides its logger itself, and providing it here as well would print its lines twice.
 */
const logger = (config: AppConfigShape) => {
  const runtime = ManagedRuntime.make(loggerLayer.pipe(Layer.provide(Layer.succeed(AppConfig, config))))
  return (level: "info" | "warning" | "error", message: string) =>
    runtime.runSync(level === "info" ? Effect.logInfo(message) : level === "warning" ? Effect.logWarning(message) : Effect.logError(message))
}

/**
 * The primary: workers started and supervised until they have all stopped, then its exit. It also
 * runs the built-in embedding model's process for all workers (started on a worker's first request).
 */
const primary = (config: AppConfigShape, count: number) => {
  const log = logger(config)
  return Effect.acquireUseRelease(
    Effect.sync(() => {
      const host = startModelHost({ log })
      return { host, stopServing: serveModelToWorkers(host) }
    }),
    () => supervise({ count, shutdownTimeout: config.shutdownTimeout, log }),
    ({ host, stopServing }) => Effect.promise(() => (stopServing(), host.close()))
  ).pipe(
    Effect.flatMap((code) => Effect.sync(() => process.exit(code))),
    Effect.uninterruptible
  )
}

const program = Effect.gen(function*() {
  const config = yield* AppConfig
  const role = workerRole()
  if (role !== undefined) {
    // The primary checked the ports and follows npm; each worker has its own stats file.
    yield* boundShutdown(config.shutdownTimeout)
    yield* drainOnRequest
    const statsFile = Option.map(config.statsFile, (f) => (role.slot === 1 ? f : `${f}.${role.slot}`))
    return yield* serve({ ...config, statsFile }, role.slot === 1).pipe(Effect.annotateLogs("worker", role.slot))
  }
  yield* ensurePortsFree(config.host, [
    { port: config.port, variable: "PORT" },
    { port: config.smtpPort, variable: "SMTP_PORT" }
  ])
  const { count, note } = workerCount(config)
  if (note !== undefined) logger(config)("info", note)
  if (count > 1) {
    yield* followNpm
    return yield* primary(config, count)
  }
  yield* boundShutdown(config.shutdownTimeout)
  yield* followNpm
  return yield* serve(config, true)
})

program.pipe(
  Effect.provide(AppConfigLive),
  Effect.catchIf(ConfigError.isConfigError, (e) => fatal(`invalid configuration: ${String(e)}`, CONFIG_EXIT)),
  Effect.catchTag("PortInUse", (e) => fatal(e.message, PORT_IN_USE_EXIT)),
  NodeRuntime.runMain
)
