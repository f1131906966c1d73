/**
 * Admission of an API request in ONE database round trip: resolve the bearer credential and count
 * the request against the organization's window (or the client address's, without a valid
 * credential). Every API request pays this, so it is one statement instead of two, and its commit
 * does not wait for a WAL flush (see ASYNC_COMMIT: the window is bookkeeping).
 */
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Option } from "effect"
import type { Principal } from "../contract/Security.js"
import { principalLookup, type PrincipalRow, toPrincipal } from "./Credentials.js"
import { ASYNC_COMMIT, type Decision, decide, type Policy, windowUpsert, type WindowRow } from "./RateLimiter.js"

export interface Admitted {
  /** None: no token presented; Some(None): presented but unknown, revoked or expired. */
  readonly principal: Option.Option<Option.Option<Principal>>
  readonly decision: Decision
}

type Row = WindowRow & { readonly [K in keyof PrincipalRow]: PrincipalRow[K] | null }

export class Admission extends Effect.Service<Admission>()("mailroom/Admission", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const none = sql`SELECT NULL::uuid AS id, NULL::uuid AS org_id, NULL::text AS role, NULL::uuid AS user_id,
                            NULL::text AS client_id WHERE false`

    /**
     * `orgKeyPrefix` + organization id is the window of a valid credential, `anonymousKey` the
     * window otherwise. Must run outside any transaction (it commits asynchronously).
     */
    const admit = (token: Option.Option<string>, orgKeyPrefix: string, anonymousKey: string, policy: Policy) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const lookup = Option.isSome(token) ? principalLookup(sql, token.value, new Date(now)) : undefined
        const key = sql`coalesce(${orgKeyPrefix}::text || (SELECT org_id::text FROM principal), ${anonymousKey}::text)`
        const rows = yield* sql<Row>`
          WITH ${sql.unsafe(ASYNC_COMMIT)},
            principal AS (${lookup?.select ?? none} LIMIT 1),
            win AS (${windowUpsert(sql, key, policy, now, true)})
          SELECT win.allowed, win.count, win.oldest, p.id, p.org_id, p.role, p.user_id, p.client_id
          FROM win LEFT JOIN principal p ON true`
        const row = rows[0]!
        const found = lookup !== undefined && row.id !== null && row.org_id !== null
          ? Option.some(toPrincipal(lookup.kind, {
            id: row.id,
            org_id: row.org_id,
            role: row.role ?? "member",
            user_id: row.user_id,
            client_id: row.client_id
          }))
          : Option.none()
        return {
          principal: Option.isSome(token) ? Option.some(found) : Option.none(),
          decision: decide(policy, now, row.allowed, row.count, row.oldest)
        } satisfies Admitted
      }).pipe(Effect.orDie)

    return { admit } as const
  })
}) {}
