/**
 * The facts about a sender that trust records as mail arrives: taken before the message is stored,
 * so `sender_known` means known before it. The query is read together with the message's threads
 * (src/inbound/ArrivalLookups.ts), one statement for every message arriving at once.
 */
import type { Statement } from "@effect/sql"
import { STILL_SENDABLE } from "../registries/Directory.js"

export interface SenderFactsInput {
  readonly orgIds: ReadonlyArray<string>
  /** The message's From address; null: nothing to look up. */
  readonly from: string | null
  /** The From as authenticated (DMARC or aligned DKIM), when it is. */
  readonly authenticated: string | null
}

export interface SenderFactsOf {
  /** Organizations that already knew the sender. */
  readonly known: ReadonlySet<string>
  /** The authenticated From is a published registry entry still sendable. */
  readonly registry: boolean
}

/** Facts of a message without a From or without organizations: nothing is known. */
export const NO_FACTS: SenderFactsOf = { known: new Set(), registry: false }

/** The inputs that need the database, each with its index among `inputs`. */
export const askedOf = (inputs: ReadonlyArray<SenderFactsInput>) =>
  inputs.flatMap((m, ord) =>
    m.from === null || m.orgIds.length === 0
      ? []
      : [{ ord, from: m.from.toLowerCase(), authenticated: (m.authenticated ?? "").toLowerCase(), orgs: m.orgIds }]
  )

/**
 * Rows `(ord, org_id, registry)` for the asked inputs: the organizations (a JSON array) among the
 * input's that already knew the From, and whether the authenticated From is a published entry.
 */
export const senderFactsQuery = (sql: Statement.Constructor, asked: ReturnType<typeof askedOf>) =>
  sql`
    SELECT i.ord,
           (SELECT coalesce(json_agg(k.org_id), '[]'::json) FROM known_addresses k
             WHERE k.address = i."from"
               AND k.org_id IN (SELECT value::uuid FROM jsonb_array_elements_text(i.orgs))) AS org_id,
           EXISTS (SELECT 1 FROM registry_entries e WHERE e.address = i.authenticated
                     AND e.status = 'published' AND ${sql.literal(STILL_SENDABLE)}) AS registry
      FROM jsonb_to_recordset(${JSON.stringify(asked)}::jsonb) AS i(ord int, "from" text, authenticated text, orgs jsonb)`

/** The facts of `input` from its row (none when it was not asked or nothing matched). */
export const factsOf = (
  input: SenderFactsInput,
  row: { readonly org_id: ReadonlyArray<string> | null; readonly registry: boolean | null } | undefined
): SenderFactsOf => ({
  known: new Set(row?.org_id ?? []),
  registry: input.authenticated !== null && row?.registry === true
})
