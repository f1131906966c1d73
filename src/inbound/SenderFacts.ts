/**
 * The facts about a sender that trust records as mail arrives, read in one query for a message and
 * all its organizations: taken before the message is stored, so `sender_known` means known before it.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"
import { STILL_SENDABLE } from "../registries/Directory.js"
import { allRows } from "../platform/Rows.js"

/** The organizations that knew the sender (a `json` array, parsed by the driver or still text) and the registry fact. */
const FactsRow = Schema.Struct({
  org_id: Schema.Union(Schema.Array(Schema.String), Schema.parseJson(Schema.Array(Schema.String))),
  registry: Schema.Boolean
})

/**
 * Whether each organization already knew `from`, and whether `authenticated` is a published
 * registry entry: one query for a message and all its organizations.
 */
export const senderFacts = (orgIds: ReadonlyArray<string>, from: string | null, authenticated: string | null) =>
  Effect.gen(function*() {
    const known = new Set<string>()
    if (from === null || orgIds.length === 0) return { known, registry: false }
    const sql = yield* SqlClient.SqlClient
    const rows = yield* sql`
      SELECT (SELECT coalesce(json_agg(k.org_id), '[]'::json) FROM known_addresses k
                WHERE k.address = ${from.toLowerCase()}
                  AND k.org_id IN (SELECT value::uuid FROM json_array_elements_text(${JSON.stringify(orgIds)}::json))) AS org_id,
             EXISTS (SELECT 1 FROM registry_entries e WHERE e.address = ${(authenticated ?? "").toLowerCase()}
                       AND e.status = 'published' AND ${sql.literal(STILL_SENDABLE)}) AS registry`.pipe(allRows(FactsRow, "sender facts"))
    const row = rows[0]
    for (const id of row?.org_id ?? []) known.add(id)
    return { known, registry: authenticated !== null && row?.registry === true }
  })
