/** Background housekeeping of shared platform tables; runs in every process, idempotently. */
import { Effect, Layer, Schedule } from "effect"
import { Idempotency } from "./Idempotency.js"
import { RateLimiter } from "./RateLimiter.js"

export const MaintenanceLive = Layer.scopedDiscard(
  Effect.gen(function*() {
    const idempotency = yield* Idempotency
    const limiter = yield* RateLimiter
    yield* Effect.all([idempotency.sweep, limiter.sweep(3600)], { discard: true }).pipe(
      Effect.catchAllCause((cause) => Effect.logWarning("maintenance sweep failed", cause)),
      Effect.repeat(Schedule.spaced("1 minute")),
      Effect.delay("5 seconds"),
      Effect.forkScoped
    )
  })
)
