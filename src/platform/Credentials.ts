/**
 * Resolves a bearer credential to its principal: organization, role and credential id.
 * API keys always act as `member`; an OAuth access token acts with its user's current role,
 * read on every request (so a demotion or removal takes effect at once).
 */
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Option } from "effect"
import type { Principal, Role } from "../contract/Security.js"
import { PREFIX, sha256Hex } from "./Secrets.js"

export class Credentials extends Effect.Service<Credentials>()("mailroom/Credentials", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const resolve = (token: string): Effect.Effect<Option.Option<Principal>> =>
      Effect.gen(function*() {
        if (token.length < 10 || token.length > 200) return Option.none()
        const hash = sha256Hex(token)
        if (token.startsWith(PREFIX.apiKey)) {
          const rows = yield* sql<{ id: string; org_id: string }>`
            SELECT id, org_id FROM api_keys WHERE key_hash = ${hash} AND revoked_at IS NULL`
          const row = rows[0]
          if (!row) return Option.none()
          return Option.some<Principal>({
            orgId: row.org_id,
            role: "member",
            userId: null,
            credential: { kind: "api_key", id: row.id }
          })
        }
        if (token.startsWith(PREFIX.accessToken)) {
          const now = new Date(yield* Clock.currentTimeMillis)
          const rows = yield* sql<{ id: string; org_id: string; user_id: string; client_id: string; role: Role }>`
            SELECT g.id, g.org_id, g.user_id, g.client_id, m.role
            FROM oauth_grants g
            JOIN memberships m ON m.org_id = g.org_id AND m.user_id = g.user_id
            WHERE g.access_token_hash = ${hash} AND g.revoked_at IS NULL AND g.access_expires_at > ${now}`
          const row = rows[0]
          if (!row) return Option.none()
          return Option.some<Principal>({
            orgId: row.org_id,
            role: row.role,
            userId: row.user_id,
            credential: { kind: "oauth", id: row.id, clientId: row.client_id }
          })
        }
        return Option.none()
      }).pipe(Effect.orDie, Effect.withSpan("Credentials.resolve"))

    return { resolve } as const
  })
}) {}
