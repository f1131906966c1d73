/**
 * SQL of API keys. Scopes and inbox ids are read as space-joined text (one spelling for both
 * drivers' array parsing) and rows are decoded, so a renamed column fails loudly. Only the hash and
 * display prefix of a secret are stored.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"
import { findAll, findOne, NullableTimestamp, orDieRows, single, Timestamp } from "../platform/Rows.js"

const KeyRow = Schema.Struct({
  id: Schema.String,
  name: Schema.NullOr(Schema.String),
  scopes: Schema.String,
  inbox_ids: Schema.NullOr(Schema.String),
  created_at: Timestamp,
  last_used_at: NullableTimestamp
})
export type KeyRow = typeof KeyRow.Type

const COLUMNS = "id, name, array_to_string(scopes, ' ') AS scopes, array_to_string(inbox_ids::text[], ' ') AS inbox_ids, created_at, last_used_at"

export interface NewKey {
  readonly orgId: string
  readonly createdBy: string | null
  readonly name: string | null
  readonly keyHash: string
  readonly keyPrefix: string
  readonly scopes: ReadonlyArray<string>
  readonly inboxIds: ReadonlyArray<string> | null
}

/** Rows of "api key inboxes". */
const ApiKeyInboxesRow = Schema.Struct({ id: Schema.String })

export class ApiKeysRepo extends Effect.Service<ApiKeysRepo>()("mailroom/ApiKeysRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const columns = sql.unsafe(COLUMNS)

    /** Which of `ids` are inboxes of the organization. */
    const existingInboxes = (orgId: string, ids: ReadonlyArray<string>) =>
      findAll({
        Request: Schema.Void,
        Result: ApiKeyInboxesRow,
        execute: () => sql`SELECT id FROM inboxes WHERE org_id = ${orgId} AND id IN ${sql.in(ids)}`
      })().pipe(Effect.map((rows) => rows.map((r) => r.id)), orDieRows("api key inboxes"))

    const insert = (k: NewKey) =>
      single({
        Request: Schema.Void,
        Result: KeyRow,
        execute: () =>
          sql`INSERT INTO api_keys (org_id, created_by, name, key_hash, key_prefix, scopes, inbox_ids)
              VALUES (${k.orgId}, ${k.createdBy}, ${k.name}, ${k.keyHash}, ${k.keyPrefix},
                      string_to_array(${k.scopes.join(" ")}, ' '),
                      string_to_array(${k.inboxIds === null ? null : k.inboxIds.join(" ")}::text, ' ')::uuid[])
              RETURNING ${columns}`
      })().pipe(orDieRows("api key insert"))

    const listActive = (orgId: string) =>
      findAll({
        Request: Schema.Void,
        Result: KeyRow,
        execute: () =>
          sql`SELECT ${columns} FROM api_keys WHERE org_id = ${orgId} AND revoked_at IS NULL
              ORDER BY created_at DESC, id DESC`
      })().pipe(orDieRows("api key list"))

    /** Revokes a live key; none when there is no such live key of the organization. */
    const revoke = (orgId: string, id: string) =>
      findOne({
        Request: Schema.Void,
        Result: KeyRow,
        execute: () =>
          sql`UPDATE api_keys SET revoked_at = now()
              WHERE id = ${id} AND org_id = ${orgId} AND revoked_at IS NULL
              RETURNING ${columns}`
      })().pipe(orDieRows("api key revoke"))

    return { existingInboxes, insert, listActive, revoke } as const
  })
}) {}
