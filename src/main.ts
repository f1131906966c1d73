/** `npm start`: the whole Mailroom service in one process. */
import { NodeRuntime } from "@effect/platform-node"
import { ConfigError, Effect, Layer } from "effect"
import { AppConfigLive } from "./platform/Config.js"
import { ServiceLive } from "./platform/Server.js"

Layer.launch(ServiceLive.pipe(Layer.provide(AppConfigLive))).pipe(
  Effect.catchAll((e) =>
    ConfigError.isConfigError(e)
      ? Effect.sync(() => {
        process.stderr.write(`mailroom: invalid configuration: ${String(e)}\n`)
        process.exit(78)
      })
      : Effect.fail(e)
  ),
  NodeRuntime.runMain
)
