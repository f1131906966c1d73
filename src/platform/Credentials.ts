/**
 * Resolves a bearer credential to its principal: organization, role and credential id.
 * API keys always act as `member`; an OAuth access token acts with its user's current role,
 * read on every request (so a demotion or removal takes effect at once).
 */
import { type Statement, SqlClient } from "@effect/sql"
import { Clock, Effect, Option } from "effect"
import type { Principal, Role } from "../contract/Security.js"
import { PREFIX, sha256Hex } from "./Secrets.js"

export interface PrincipalRow {
  readonly id: string
  readonly org_id: string
  readonly role: Role
  readonly user_id: string | null
  readonly client_id: string | null
}

export interface PrincipalLookup {
  readonly kind: "api_key" | "oauth"
  /** A SELECT of `PrincipalRow` columns: one row for a live credential, none otherwise. */
  readonly select: Statement.Fragment
}

/**
 * The lookup for a token, or undefined when the token cannot be a credential. A fragment, so the
 * request pipeline can run it inside the statement that also counts the request (Admission).
 */
export const principalLookup = (sql: SqlClient.SqlClient, token: string, now: Date): PrincipalLookup | undefined => {
  if (token.length < 10 || token.length > 200) return undefined
  const hash = sha256Hex(token)
  if (token.startsWith(PREFIX.apiKey)) {
    return {
      kind: "api_key",
      select: sql`SELECT id, org_id, 'member'::text AS role, NULL::uuid AS user_id, NULL::text AS client_id
                  FROM api_keys WHERE key_hash = ${hash} AND revoked_at IS NULL`
    }
  }
  if (token.startsWith(PREFIX.accessToken)) {
    return {
      kind: "oauth",
      select: sql`SELECT g.id, g.org_id, m.role, g.user_id, g.client_id
                  FROM oauth_grants g
                  JOIN memberships m ON m.org_id = g.org_id AND m.user_id = g.user_id
                  WHERE g.access_token_hash = ${hash} AND g.revoked_at IS NULL AND g.access_expires_at > ${now}`
    }
  }
  return undefined
}

export const toPrincipal = (kind: PrincipalLookup["kind"], row: PrincipalRow): Principal =>
  kind === "api_key"
    ? { orgId: row.org_id, role: "member", userId: null, credential: { kind: "api_key", id: row.id } }
    : { orgId: row.org_id, role: row.role, userId: row.user_id, credential: { kind: "oauth", id: row.id, clientId: row.client_id ?? "" } }

export class Credentials extends Effect.Service<Credentials>()("mailroom/Credentials", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const resolve = (token: string): Effect.Effect<Option.Option<Principal>> =>
      Effect.gen(function*() {
        const lookup = principalLookup(sql, token, new Date(yield* Clock.currentTimeMillis))
        if (lookup === undefined) return Option.none()
        const rows = yield* sql<PrincipalRow>`${lookup.select}`
        return Option.map(Option.fromNullable(rows[0]), (row) => toPrincipal(lookup.kind, row))
      }).pipe(Effect.orDie)

    return { resolve } as const
  })
}) {}
