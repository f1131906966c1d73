/** Handlers of API keys. Only an admin-scoped credential reaches them (src/policy/Policy.ts). */
import { HttpApiBuilder } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { Effect, Option } from "effect"
import { MailroomApi } from "../Api.js"
import { Forbidden, NotFound, ValidationError } from "../contract/Errors.js"
import { CurrentPrincipal, hasScope, type Scope } from "../contract/Security.js"
import { Credentials } from "../platform/Credentials.js"
import { noStore } from "../platform/HttpHeaders.js"
import { displayPrefix, newApiKey, sha256Hex } from "../platform/Secrets.js"
import type { ApiKey } from "./Api.js"

interface KeyRow {
  readonly id: string
  readonly name: string | null
  readonly scopes: string
  readonly inbox_ids: string | null
  readonly created_at: Date
  readonly last_used_at: Date | null
}

const COLUMNS = "id, name, array_to_string(scopes, ' ') AS scopes, array_to_string(inbox_ids::text[], ' ') AS inbox_ids, created_at, last_used_at"

const toApiKey = (r: KeyRow): ApiKey => ({
  id: r.id,
  name: r.name,
  scopes: r.scopes.split(" ").filter((s) => s !== "") as Array<Scope>,
  inbox_ids: r.inbox_ids === null ? null : r.inbox_ids.split(" ").filter((s) => s !== ""),
  created_at: r.created_at,
  last_used_at: r.last_used_at
})

export const ApiKeysHttpLive = HttpApiBuilder.group(MailroomApi, "apiKeys", (handlers) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const credentials = yield* Credentials
    const columns = sql.unsafe(COLUMNS)

    return handlers
      .handle("create", ({ payload }) =>
        Effect.gen(function*() {
          const principal = yield* CurrentPrincipal
          // A key never widens its maker's reach (kept here too, should the table open key management).
          const wider = payload.scopes.filter((s) => !hasScope(principal, s))
          if (wider.length > 0) {
            return yield* new Forbidden({
              message: `a key cannot be given scopes its maker lacks: ${wider.join(", ")}`,
              details: { missing_scope: wider[0]!, scopes: principal.scopes ?? ["admin"] }
            })
          }
          // The organization's one inbox (the managed inbox) has no id yet: no id can name an
          // inbox of this organization until inboxes are resources of their own.
          if (payload.inbox_ids !== undefined && payload.inbox_ids.length > 0) {
            const reason = `no inbox of this organization has the id ${payload.inbox_ids[0]}`
            return yield* new ValidationError({ message: `inbox_ids: ${reason}`, details: { issues: [{ field: "inbox_ids", reason }] } })
          }
          const scopes = [...new Set(payload.scopes)]
          const secret = newApiKey()
          const rows = yield* sql<KeyRow>`
            INSERT INTO api_keys (org_id, created_by, name, key_hash, key_prefix, scopes, inbox_ids)
            VALUES (${principal.orgId}, ${principal.userId}, ${payload.name}, ${sha256Hex(secret)}, ${displayPrefix(secret)},
                    string_to_array(${scopes.join(" ")}, ' '), NULL)
            RETURNING ${columns}`.pipe(Effect.orDie)
          // A credential: never cached, never replayed under a derived idempotency key.
          yield* noStore
          return { ...toApiKey(rows[0]!), api_key: secret }
        }))
      .handle("list", () =>
        Effect.gen(function*() {
          const principal = yield* CurrentPrincipal
          const rows = yield* sql<KeyRow>`
            SELECT ${columns} FROM api_keys WHERE org_id = ${principal.orgId} AND revoked_at IS NULL
            ORDER BY created_at DESC, id DESC`.pipe(Effect.orDie)
          return rows.map(toApiKey)
        }))
      .handle("revoke", ({ path }) =>
        Effect.gen(function*() {
          const principal = yield* CurrentPrincipal
          const rows = yield* sql<KeyRow>`
            UPDATE api_keys SET revoked_at = now()
            WHERE id = ${path.id} AND org_id = ${principal.orgId} AND revoked_at IS NULL
            RETURNING ${columns}`.pipe(Effect.orDie)
          const row = Option.fromNullable(rows[0])
          if (Option.isNone(row)) return yield* new NotFound({ message: `no API key ${path.id}` })
          yield* credentials.forgetApiKey(path.id)
          return toApiKey(row.value)
        }))
  }))
