/** Housekeeping of functions and memories: spent invocation credentials and expired memories. */
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Layer, Schedule } from "effect"

export const sweepFunctions = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const now = new Date(yield* Clock.currentTimeMillis)
  yield* sql`DELETE FROM function_tokens WHERE revoked_at IS NOT NULL OR expires_at < ${now}`
  // Reads already ignore expired items; this only gives their space back.
  yield* sql`DELETE FROM memories WHERE expires_at IS NOT NULL AND expires_at <= ${now}`
})

export const FunctionsMaintenanceLive = Layer.scopedDiscard(
  sweepFunctions.pipe(
    Effect.catchAllCause((cause) => Effect.logWarning("functions sweep failed", cause)),
    Effect.repeat(Schedule.spaced("5 minutes")),
    Effect.delay("45 seconds"),
    Effect.forkScoped
  )
)
