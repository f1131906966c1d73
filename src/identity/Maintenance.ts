/** Housekeeping of identity rows nobody can use any more (expired a day ago or longer). */
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Layer, Schedule } from "effect"

export const sweepIdentity = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const cut = new Date((yield* Clock.currentTimeMillis) - 24 * 3600 * 1000)
  yield* sql`DELETE FROM signup_sessions WHERE expires_at < ${cut}`
  yield* sql`DELETE FROM device_logins WHERE expires_at < ${cut}`
  yield* sql`DELETE FROM device_web_sessions WHERE expires_at < ${cut}`
  yield* sql`DELETE FROM claim_sessions WHERE expires_at < ${cut}`
  yield* sql`DELETE FROM claim_links WHERE expires_at < ${cut}`
  // Failures count for the lockout's 24 h window only.
  yield* sql`DELETE FROM verification_failures WHERE failed_at < ${cut}`
  yield* sql`DELETE FROM oauth_rotated_refresh_tokens r USING oauth_grants g
             WHERE g.id = r.grant_id AND (g.refresh_expires_at < ${cut} OR g.revoked_at < ${cut})`
})

export const IdentityMaintenanceLive = Layer.scopedDiscard(
  sweepIdentity.pipe(
    Effect.catchAllCause((cause) => Effect.logWarning("identity sweep failed", cause)),
    Effect.repeat(Schedule.spaced("10 minutes")),
    Effect.delay("30 seconds"),
    Effect.forkScoped
  )
)
