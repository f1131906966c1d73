/**
 * Per-email lockout of code verification, across every code, session and flow (sign-up, claim,
 * /device sign-in): at most 10 wrong codes per email in 24 h, whatever address they come from;
 * then every verification for that email answers 429 until the oldest failure leaves the window.
 * The per-session cap (5 wrong codes) alone lets new codes be requested and guessed without end.
 *
 * Attempts for one email are serialized by a transaction-scoped advisory lock, so concurrent
 * guesses cannot all pass the count before any is recorded. Failures are kept in their own table
 * (not in the rate-limit windows, which are swept after an hour of inactivity).
 */
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Schema } from "effect"
import { RateLimitExceeded } from "../contract/Errors.js"
import { setLimitHeaders } from "../platform/RateLimiter.js"
import { allRows, Count } from "../platform/Rows.js"

export const VERIFY_FAILURES_PER_EMAIL = { limit: 10, windowSeconds: 24 * 3600 } as const

/** Rows of "verification failures". */
const VerificationFailuresRow = Schema.Struct({ n: Count, oldest: Schema.NullOr(Schema.Number) })

export class Lockout extends Effect.Service<Lockout>()("mailroom/Lockout", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    /**
     * Runs `check` (which must not fail: it reports a wrong code as a value) for `email` unless
     * the email is locked; records a failure when `failed` says the outcome is one.
     */
    const attempt = <A>(email: string, check: Effect.Effect<A>, failed: (a: A) => boolean) =>
      Effect.gen(function*() {
        const policy = VERIFY_FAILURES_PER_EMAIL
        const outcome = yield* sql.withTransaction(Effect.gen(function*() {
          yield* sql`SELECT pg_advisory_xact_lock(hashtext(${`verify-lockout:${email}`}))`
          const now = yield* Clock.currentTimeMillis
          const rows = yield* sql`
            SELECT count(*)::int AS n, extract(epoch FROM min(failed_at))::float8 AS oldest
            FROM verification_failures WHERE email = ${email} AND failed_at > ${new Date(now - policy.windowSeconds * 1000)}`.pipe(
            allRows(VerificationFailuresRow, "verification failures")
          )
          const { n, oldest } = rows[0] ?? { n: 0, oldest: null }
          if (n >= policy.limit) {
            const resetMs = (oldest ?? now / 1000) * 1000 + policy.windowSeconds * 1000
            return { _tag: "Locked", now, resetMs } as const
          }
          const value = yield* check
          if (failed(value)) yield* sql`INSERT INTO verification_failures (email, failed_at) VALUES (${email}, ${new Date(now)})`
          return { _tag: "Checked", value } as const
        })).pipe(Effect.orDie)
        if (outcome._tag === "Checked") return outcome.value
        const retryAfter = Math.max(1, Math.ceil((outcome.resetMs - outcome.now) / 1000))
        return yield* Effect.zipRight(
          setLimitHeaders({
            allowed: false,
            limit: policy.limit,
            remaining: 0,
            reset: Math.ceil(outcome.resetMs / 1000),
            retryAfter,
            windowSeconds: policy.windowSeconds
          }, true),
          Effect.fail(
            new RateLimitExceeded({
              message: `too many wrong codes for this email: verification is locked; retry in ${retryAfter} s`,
              details: { limit: policy.limit, window_seconds: policy.windowSeconds, retry_after: retryAfter }
            })
          )
        )
      })

    return { attempt } as const
  })
}) {}
