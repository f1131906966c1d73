/**
 * Sliding-window rate limiting stored in PostgreSQL, shared by every process.
 *
 * A window is one row holding the timestamps of accepted requests still inside it. `consume` is a
 * single upsert: the row lock taken by ON CONFLICT serializes concurrent requests for one key, so
 * exactly `limit` requests are accepted per window however many processes race. Rejected requests
 * are not recorded, so hammering does not extend the wait.
 */
import { HttpApp, HttpServerResponse } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Layer } from "effect"
import { RateLimitExceeded } from "../contract/Errors.js"

export interface Decision {
  readonly allowed: boolean
  readonly limit: number
  readonly remaining: number
  /** Unix seconds when the oldest counted request leaves the window. */
  readonly reset: number
  /** Seconds to wait before a retry can succeed (0 when allowed). */
  readonly retryAfter: number
  readonly windowSeconds: number
}

export interface Policy {
  readonly limit: number
  readonly windowSeconds: number
}

const decide = (policy: Policy, now: number, allowed: boolean, count: number, oldestEpoch: number | null): Decision => {
  const resetMs = oldestEpoch === null ? now + policy.windowSeconds * 1000 : oldestEpoch * 1000 + policy.windowSeconds * 1000
  return {
    allowed,
    limit: policy.limit,
    remaining: Math.max(0, policy.limit - count),
    reset: Math.ceil(resetMs / 1000),
    retryAfter: allowed ? 0 : Math.max(1, Math.ceil((resetMs - now) / 1000)),
    windowSeconds: policy.windowSeconds
  }
}

export class RateLimiter extends Effect.Service<RateLimiter>()("mailroom/RateLimiter", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    /** Counts one request against `key` if the window has room; answers the decision either way. */
    const consume = (key: string, policy: Policy) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const at = new Date(now)
        const cut = new Date(now - policy.windowSeconds * 1000)
        const rows = yield* sql<{ allowed: boolean; count: number; oldest: number | null }>`
          INSERT INTO rate_limit_windows AS w (key, hits, allowed, updated_at)
          VALUES (${key}, ARRAY[${at}::timestamptz], ${policy.limit > 0}, ${at})
          ON CONFLICT (key) DO UPDATE SET
            allowed = (SELECT count(*) < ${policy.limit} FROM unnest(w.hits) h WHERE h > ${cut}),
            hits = (SELECT CASE WHEN count(*) < ${policy.limit}
                      THEN coalesce(array_agg(h ORDER BY h), '{}') || ${at}::timestamptz
                      ELSE coalesce(array_agg(h ORDER BY h), '{}') END
                    FROM unnest(w.hits) h WHERE h > ${cut}),
            updated_at = ${at}
          RETURNING allowed, cardinality(hits)::int AS count,
            (SELECT extract(epoch FROM min(h))::float8 FROM unnest(hits) h) AS oldest`
        const row = rows[0]!
        return decide(policy, now, row.allowed, row.count, row.oldest)
      }).pipe(Effect.orDie, Effect.withSpan("RateLimiter.consume"))

    /** The decision `consume` would make, without counting anything. */
    const peek = (key: string, policy: Policy) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const cut = new Date(now - policy.windowSeconds * 1000)
        const rows = yield* sql<{ count: number; oldest: number | null }>`
          SELECT count(h)::int AS count, extract(epoch FROM min(h))::float8 AS oldest
          FROM rate_limit_windows w, unnest(w.hits) h WHERE w.key = ${key} AND h > ${cut}`
        const row = rows[0] ?? { count: 0, oldest: null }
        return decide(policy, now, row.count < policy.limit, row.count, row.oldest)
      }).pipe(Effect.orDie)

    /** Records a request without a limit (for limiters that count only some outcomes). */
    const record = (key: string, policy: Policy) =>
      Effect.asVoid(consume(key, { limit: 1_000_000, windowSeconds: policy.windowSeconds }))

    /**
     * A per-resource limiter for handlers: 429 `rate_limit_exceeded` with `Retry-After` and the
     * limiter's own `ratelimit-*` values when the window is full.
     */
    const enforce = (key: string, policy: Policy, what: string) =>
      Effect.flatMap(consume(key, policy), (d) =>
        d.allowed ? Effect.succeed(d) : Effect.zipRight(
          setLimitHeaders(d, true),
          Effect.fail(
            new RateLimitExceeded({
              message: `${what}: limit of ${policy.limit} per ${formatWindow(policy.windowSeconds)} reached; retry in ${d.retryAfter} s`,
              details: { limit: policy.limit, window_seconds: policy.windowSeconds, retry_after: d.retryAfter }
            })
          )
        )
      )

    /** Deletes windows whose every hit has aged out (kept small by a periodic sweep). */
    const sweep = (olderThanSeconds: number) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) =>
        sql`DELETE FROM rate_limit_windows WHERE updated_at < ${new Date(now - olderThanSeconds * 1000)}`
      ).pipe(Effect.asVoid, Effect.orDie)

    return { consume, peek, record, enforce, sweep } as const
  })
}) {}

const formatWindow = (s: number) => s % 3600 === 0 ? `${s / 3600} h` : s % 60 === 0 ? `${s / 60} min` : `${s} s`

export const rateLimitHeaders = (d: Decision, withRetryAfter: boolean): Record<string, string> => ({
  "ratelimit-limit": String(d.limit),
  "ratelimit-remaining": String(d.remaining),
  "ratelimit-reset": String(d.reset),
  "ratelimit-policy": `${d.limit};w=${d.windowSeconds}`,
  ...(withRetryAfter ? { "retry-after": String(d.retryAfter) } : {})
})

/** Puts the decision's headers on whatever response this request ends with (errors included). */
export const setLimitHeaders = (d: Decision, withRetryAfter: boolean) =>
  HttpApp.appendPreResponseHandler((_req, res) =>
    Effect.succeed(HttpServerResponse.setHeaders(res, rateLimitHeaders(d, withRetryAfter)))
  )

export const RateLimiterLive: Layer.Layer<RateLimiter, never, SqlClient.SqlClient> = RateLimiter.Default
