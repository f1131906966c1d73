/**
 * The built-in embedding model as the service uses it: in a process of its own (ModelProcess.ts),
 * run by this process, or, in a worker of `WORKERS`, by the primary for all workers (ModelRelay.ts).
 */
import { Effect, Runtime } from "effect"
import { workerRole } from "../platform/Workers.js"
import { EmbedderFailed } from "./EmbedderFailed.js"
import { type ModelHost, type Priority, startModelHost } from "./ModelProcess.js"
import { modelThroughPrimary } from "./ModelRelay.js"

export const LOCAL_MODEL_NAME = "universal-sentence-encoder-lite-en-512"

/** Log lines of the model's supervisor through this runtime's logger. */
export const hostLog = (runtime: Runtime.Runtime<never>) => (level: "info" | "warning", message: string) =>
  void Runtime.runFork(runtime)(level === "info" ? Effect.logInfo(message) : Effect.logWarning(message))

/** The model process, run by this process and stopped with the scope. */
export const ownModelHost = Effect.flatMap(Effect.runtime<never>(), (runtime) =>
  Effect.acquireRelease(
    Effect.sync(() => startModelHost({ log: hostLog(runtime) })),
    (host) => Effect.promise(() => host.close())
  ))

export const makeLocalModel = Effect.gen(function*() {
  const host: Pick<ModelHost, "embed"> = workerRole() !== undefined ? modelThroughPrimary() : yield* ownModelHost

  const embed = (texts: ReadonlyArray<string>, options?: { readonly priority?: Priority }): Effect.Effect<ReadonlyArray<Float32Array>, EmbedderFailed> =>
    texts.length === 0 ? Effect.succeed([]) : Effect.async<ReadonlyArray<Float32Array>, EmbedderFailed>((resume) => {
      const pending = host.embed(texts, options?.priority ?? "query")
      pending.promise.then(
        (v) => resume(Effect.succeed(v)),
        (e: Error) => resume(Effect.fail(new EmbedderFailed({ message: e.message })))
      )
      // A search that gives up leaves its request: dropped if not started, its answer ignored if it was.
      return Effect.sync(pending.cancel)
    })

  return { embed } as const
})
