/**
 * Sliding-window rate limiting stored in PostgreSQL, shared by every process.
 *
 * A window is one row holding the timestamps of accepted requests still inside it. `consume` is a
 * single upsert: the row lock taken by ON CONFLICT serializes concurrent requests for one key, so
 * exactly `limit` requests are accepted per window however many processes race. Rejected requests
 * are not recorded, so hammering does not extend the wait.
 */
import { HttpApp, HttpServerResponse } from "@effect/platform"
import { SqlClient, type Statement } from "@effect/sql"
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

export const decide = (policy: Policy, now: number, allowed: boolean, count: number, oldestEpoch: number | null): Decision => {
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

export interface WindowRow {
  readonly allowed: boolean
  readonly count: number
  readonly oldest: number | null
}

/**
 * The upsert that counts one request against the window named by `key` (an SQL expression) when it
 * has room, RETURNING a `WindowRow`. With `asyncCommit` the statement must also define the
 * `async_commit` CTE (ASYNC_COMMIT).
 */
export const windowUpsert = (sql: SqlClient.SqlClient, key: Statement.Fragment, policy: Policy, now: number, asyncCommit: boolean) => {
  const at = new Date(now)
  const cut = new Date(now - policy.windowSeconds * 1000)
  return sql<WindowRow>`
    INSERT INTO rate_limit_windows AS w (key, hits, allowed, updated_at)
    SELECT ${key}, ARRAY[${at}::timestamptz], ${policy.limit > 0}::boolean, ${at}::timestamptz
    ${asyncCommit ? sql`FROM async_commit` : sql``}
    ON CONFLICT (key) DO UPDATE SET
      allowed = (SELECT count(*) < ${policy.limit} FROM unnest(w.hits) h WHERE h > ${cut}),
      hits = (SELECT CASE WHEN count(*) < ${policy.limit}
                THEN coalesce(array_agg(h ORDER BY h), '{}') || ${at}::timestamptz
                ELSE coalesce(array_agg(h ORDER BY h), '{}') END
              FROM unnest(w.hits) h WHERE h > ${cut}),
      updated_at = ${at}
    RETURNING allowed, cardinality(hits)::int AS count,
      (SELECT extract(epoch FROM min(h))::float8 FROM unnest(hits) h) AS oldest`
}

/**
 * `windowUpsert` for several distinct keys in one statement (they must be distinct: one statement
 * cannot update a row twice), RETURNING a `WindowRow` and its `key` per key. Always commits
 * asynchronously (defines its own `async_commit`), so it must run outside any transaction.
 */
export const windowUpsertMany = (sql: SqlClient.SqlClient, keys: ReadonlyArray<string>, policy: Policy, now: number) => {
  const at = new Date(now)
  const cut = new Date(now - policy.windowSeconds * 1000)
  return sql<WindowRow & { readonly key: string }>`
    WITH ${sql.unsafe(ASYNC_COMMIT)}
    INSERT INTO rate_limit_windows AS w (key, hits, allowed, updated_at)
    SELECT u.k, ARRAY[${at}::timestamptz], ${policy.limit > 0}::boolean, ${at}::timestamptz
    FROM async_commit, unnest(${keys}::text[]) AS u(k)
    -- Rows are locked in key order, so two processes counting overlapping batches at once wait for
    -- each other instead of deadlocking.
    ORDER BY u.k COLLATE "C"
    ON CONFLICT (key) DO UPDATE SET
      allowed = (SELECT count(*) < ${policy.limit} FROM unnest(w.hits) h WHERE h > ${cut}),
      hits = (SELECT CASE WHEN count(*) < ${policy.limit}
                THEN coalesce(array_agg(h ORDER BY h), '{}') || ${at}::timestamptz
                ELSE coalesce(array_agg(h ORDER BY h), '{}') END
              FROM unnest(w.hits) h WHERE h > ${cut}),
      updated_at = ${at}
    RETURNING key, allowed, cardinality(hits)::int AS count,
      (SELECT extract(epoch FROM min(h))::float8 FROM unnest(hits) h) AS oldest`
}

export class RateLimiter extends Effect.Service<RateLimiter>()("mailroom/RateLimiter", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    /** Counts one request against `key` if the window has room; answers the decision either way. */
    const consume = (key: string, policy: Policy) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        // Synchronous commit: a handler may call this inside its own transaction (see ASYNC_COMMIT).
        const rows = yield* windowUpsert(sql, sql`${key}::text`, policy, now, false)
        const row = rows[0]!
        return decide(policy, now, row.allowed, row.count, row.oldest)
      }).pipe(Effect.orDie)

    /**
     * `consume` for an attempt whose outcome decides whether it counts: the slot is taken
     * atomically before the attempt (so concurrent attempts never overshoot the limit), and
     * `release` gives it back when the outcome does not count.
     */
    const reserve = (key: string, policy: Policy) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const at = new Date(now)
        const rows = yield* windowUpsert(sql, sql`${key}::text`, policy, now, false)
        const row = rows[0]!
        const decision = decide(policy, now, row.allowed, row.count, row.oldest)
        // Removes this reservation's hit only (another one of the same millisecond stays).
        const release = sql`
          UPDATE rate_limit_windows
             SET hits = hits[1:array_position(hits, ${at}::timestamptz) - 1] || hits[array_position(hits, ${at}::timestamptz) + 1:]
           WHERE key = ${key} AND array_position(hits, ${at}::timestamptz) IS NOT NULL`.pipe(Effect.asVoid, Effect.orDie)
        return { decision, release: decision.allowed ? release : Effect.void }
      }).pipe(Effect.orDie)

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

    return { consume, reserve, peek, record, enforce, sweep } as const
  })
}) {}

/**
 * A CTE that turns off the commit's WAL flush for the statement's own (implicit) transaction:
 * `set_config(…, true)` lasts until that transaction ends and PostgreSQL reads the setting at
 * commit. Every API request writes its rate-limit window; waiting for an fsync there cost 1-4 ms
 * per request on an idle disk and far more under I/O load, for a row whose loss in a database
 * crash only forgets the last few hundred milliseconds of hits. Records that matter (a handler's
 * writes) still commit synchronously, and flushing them flushes every earlier WAL record too.
 * Reference it in the statement (`FROM async_commit`) so the CTE runs. Only for statements that
 * run outside any transaction: inside one, it would make the whole transaction's commit asynchronous.
 */
export const ASYNC_COMMIT = "async_commit AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true))"

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
