/**
 * Admission of an API request in ONE database round trip: resolve the bearer credential and count
 * the request against the organization's window (or the client address's, without a valid
 * credential). Every API request pays this, so it is one statement instead of two, and its commit
 * does not wait for a WAL flush (see ASYNC_COMMIT: the window is bookkeeping).
 */
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Exit, Option } from "effect"
import type { Principal } from "../contract/Security.js"
import { Credentials, principalLookup, type PrincipalRow, toPrincipal } from "./Credentials.js"
import { makeBatcher } from "./Batching.js"
import { sqlState } from "./SqlErrors.js"
import { ASYNC_COMMIT, type Decision, decide, type Policy, windowUpsert, windowUpsertMany, type WindowRow } from "./RateLimiter.js"

export interface Admitted {
  /** None: no token presented; Some(None): presented but unknown, revoked or expired. */
  readonly principal: Option.Option<Option.Option<Principal>>
  readonly decision: Decision
}

type Row = WindowRow & { readonly [K in keyof PrincipalRow]: PrincipalRow[K] | null }

export class Admission extends Effect.Service<Admission>()("mailroom/Admission", {
  // The one Credentials of the process (layers are shared by reference): its cache is the one
  // that revocations empty.
  dependencies: [Credentials.Default],
  scoped: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const credentials = yield* Credentials

    /**
     * Counting for requests whose credential is cached: the requests that arrive while a count is
     * in flight are counted together, one statement per batch (per distinct key: a key seen twice
     * in a batch waits for the next statement, so each hit is judged against the window as the
     * previous one left it). Under load this is one round trip for many requests.
     */
    const count = yield* makeBatcher<{ readonly key: string; readonly policy: Policy }, Decision, never>({
      workers: 2,
      maxBatch: 128,
      run: (items) =>
        Effect.gen(function*() {
          const out: Array<Exit.Exit<Decision>> = new Array(items.length)
          let pending = items.map((item, index) => ({ ...item, index }))
          while (pending.length > 0) {
            const round = new Map<string, (typeof pending)[number]>()
            const later: typeof pending = []
            // The policy of this round's first item: one statement counts under one policy.
            let first: Policy | undefined
            for (const p of pending) {
              const k = `${p.policy.limit}/${p.policy.windowSeconds}/${p.key}`
              if (round.has(k) || (first !== undefined && first !== p.policy)) later.push(p)
              else {
                round.set(k, p)
                first ??= p.policy
              }
            }
            const batch = [...round.values()]
            const policy = batch[0]!.policy
            const now = yield* Clock.currentTimeMillis
            const rows = yield* windowUpsertMany(sql, batch.map((b) => b.key), policy, now).pipe(
              // Locks are taken in key order; should another writer still deadlock with this
              // statement, PostgreSQL aborts one side and counting again is safe (nothing was kept).
              Effect.retry({ times: 3, while: (e) => sqlState(e) === "40P01" })
            )
            const byKey = new Map(rows.map((r) => [r.key, r]))
            for (const b of batch) {
              const row = byKey.get(b.key)
              out[b.index] = row === undefined
                ? Exit.die(new Error(`rate-limit window ${b.key} not returned`))
                : Exit.succeed(decide(policy, now, row.allowed, row.count, row.oldest))
            }
            pending = later
          }
          return out
        }).pipe(Effect.orDie)
    })

    const none = sql`SELECT NULL::uuid AS id, NULL::uuid AS org_id, NULL::text AS role, NULL::uuid AS user_id,
                            NULL::text AS client_id, NULL::timestamptz AS expires_at, NULL::text AS scopes,
                            NULL::text AS inbox_ids WHERE false`

    /**
     * `orgKeyPrefix` + organization id is the window of a valid credential, `anonymousKey` the
     * window otherwise. Must run outside any transaction (it commits asynchronously).
     */
    const admit = (
      token: Option.Option<string>,
      orgKeyPrefix: string,
      anonymousKey: string,
      policy: Policy,
      /** The token's principal if the caller already took it from the cache (`cachedPrincipal`). */
      resolved: Option.Option<Principal> = Option.none()
    ) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        // A credential resolved moments ago: only the window is counted.
        const known = Option.isSome(resolved) ? resolved : Option.isSome(token) ? credentials.cached(token.value, now) : Option.none()
        if (Option.isSome(known)) {
          return {
            principal: Option.some(known),
            decision: yield* count({ key: orgKeyPrefix + known.value.orgId, policy })
          } satisfies Admitted
        }
        const lookup = Option.isSome(token) ? principalLookup(sql, token.value, new Date(now)) : undefined
        const key = sql`coalesce(${orgKeyPrefix}::text || (SELECT org_id::text FROM principal), ${anonymousKey}::text)`
        const rows = yield* sql<Row>`
          WITH ${sql.unsafe(ASYNC_COMMIT)},
            principal AS (${lookup?.select ?? none} LIMIT 1),
            win AS (${windowUpsert(sql, key, policy, now, true)})
          SELECT win.allowed, win.count, win.oldest, p.id, p.org_id, p.role, p.user_id, p.client_id, p.expires_at,
                 p.scopes, p.inbox_ids
          FROM win LEFT JOIN principal p ON true`
        const row = rows[0]!
        const found = lookup !== undefined && row.id !== null && row.org_id !== null
          ? Option.some(toPrincipal(lookup.kind, {
            id: row.id,
            org_id: row.org_id,
            role: row.role ?? "member",
            user_id: row.user_id,
            client_id: row.client_id,
            expires_at: row.expires_at,
            scopes: row.scopes,
            inbox_ids: row.inbox_ids
          }))
          : Option.none()
        if (Option.isSome(token) && Option.isSome(found)) credentials.remember(token.value, found.value, row.expires_at, now)
        return {
          principal: Option.isSome(token) ? Option.some(found) : Option.none(),
          decision: decide(policy, now, row.allowed, row.count, row.oldest)
        } satisfies Admitted
      }).pipe(Effect.orDie)

    /** The principal of a token resolved moments ago, without a round trip (None otherwise). */
    const cachedPrincipal = (token: string) => Effect.map(Clock.currentTimeMillis, (now) => credentials.cached(token, now))

    return { admit, cachedPrincipal } as const
  })
}) {}
