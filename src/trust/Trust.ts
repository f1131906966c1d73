/**
 * The trust annotation every stored email carries (API and payloads): who is proven to have sent
 * it and what its content raises. Facts about the sender are taken as the mail arrives: `sender_known`
 * says the organization knew the address before this message, not after it.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"
import { STILL_SENDABLE } from "../registries/Directory.js"
import { SIGNALS } from "./Signals.js"

export const SignalName = Schema.Literal(...SIGNALS).annotations({
  description: "ai_instructions: text telling an AI reader what to do; hidden_text: HTML text a reader cannot see; " +
    "invisible_unicode: tag characters, bidi overrides or zero-width runs; link_mismatch: a link's text names another " +
    "site than it opens; executable_attachment / archive_attachment: judged from the content's bytes and the name; " +
    "reply_to_mismatch: Reply-To on another domain than From"
})

export const TrustSchema = Schema.Struct({
  sender_authenticated: Schema.Boolean.annotations({ description: "the From address passed DMARC or carries an aligned DKIM signature" }),
  sender_known: Schema.Boolean.annotations({ description: "the organization knew the From address before (it had written in authenticated)" }),
  registry_verified: Schema.Boolean.annotations({ description: "the authenticated From is a published registry entry" }),
  auto_submitted: Schema.Boolean.annotations({ description: "an automaton sent it (Auto-Submitted, Precedence bulk/junk/list)" }),
  signals: Schema.Array(Schema.String).annotations({
    description: "content signals, from deterministic rules; each one of: " + SIGNALS.join(", ")
  })
}).annotations({ identifier: "Trust", description: "how far the email can be trusted, as judged when it arrived" })
export type Trust = typeof TrustSchema.Type

/** Mail stored before trust was recorded: nothing proven, nothing raised. */
export const UNKNOWN_TRUST: Trust = { sender_authenticated: false, sender_known: false, registry_verified: false, auto_submitted: false, signals: [] }

/**
 * Whether each organization already knew `from`, and whether `authenticated` is a published
 * registry entry: one query for a message and all its organizations.
 */
export const senderFacts = (orgIds: ReadonlyArray<string>, from: string | null, authenticated: string | null) =>
  Effect.gen(function*() {
    const known = new Set<string>()
    if (from === null || orgIds.length === 0) return { known, registry: false }
    const sql = yield* SqlClient.SqlClient
    const rows = yield* sql<{ org_id: string | null; registry: boolean }>`
      SELECT (SELECT coalesce(json_agg(k.org_id), '[]'::json) FROM known_addresses k
                WHERE k.address = ${from.toLowerCase()}
                  AND k.org_id IN (SELECT value::uuid FROM json_array_elements_text(${JSON.stringify(orgIds)}::json))) AS org_id,
             EXISTS (SELECT 1 FROM registry_entries e WHERE e.address = ${(authenticated ?? "").toLowerCase()}
                       AND e.status = 'published' AND ${sql.literal(STILL_SENDABLE)}) AS registry`
    const row = rows[0]
    const ids: unknown = row?.org_id ?? []
    for (const id of (typeof ids === "string" ? JSON.parse(ids) : ids) as ReadonlyArray<string>) known.add(id)
    return { known, registry: authenticated !== null && row?.registry === true }
  })
