/**
 * Durable storage of an inbound SMTP transaction: one `emails` row (+ raw content) per recipient,
 * all in one transaction, so the SMTP `250` is only sent once every copy is committed. Hooks let the
 * delivery pipeline enqueue its work inside the same transaction (no accepted mail without its
 * deliveries, no deliveries without their mail).
 */
import { SqlClient } from "@effect/sql"
import { Context, Effect } from "effect"
import type { AuthResults } from "./Authenticity.js"
import type { EventType } from "./Classify.js"
import type { ParsedEmail } from "./Parse.js"
import type { Recipient } from "./Recipients.js"
import type { SpamVerdict } from "./SpamScore.js"

export interface InboundMessage {
  readonly raw: Buffer
  readonly envelopeFrom: string | null
  readonly clientAddress: string | null
  readonly helo: string | null
  readonly parsed: ParsedEmail
  readonly parseError: string | null
  readonly auth: AuthResults
  readonly spam: SpamVerdict
  readonly event: EventType
}

export interface StoredEmail {
  readonly id: string
  readonly orgId: string
  readonly recipient: Recipient
  readonly status: "accepted" | "rejected"
}

/** Work to do in the storing transaction for each accepted email (e.g. enqueue deliveries). */
export class OnEmailStored extends Context.Reference<OnEmailStored>()("mailroom/OnEmailStored", {
  defaultValue: () => (_email: StoredEmail, _message: InboundMessage): Effect.Effect<void, never, SqlClient.SqlClient> => Effect.void
}) {}

export const isRejected = (spam: SpamVerdict, threshold: number | null) => threshold !== null && spam.score > threshold

export class InboundStore extends Effect.Service<InboundStore>()("mailroom/InboundStore", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const store = (message: InboundMessage, recipients: ReadonlyArray<Recipient>) =>
      Effect.gen(function*() {
        const onStored = yield* OnEmailStored
        const p = message.parsed
        const stored: Array<StoredEmail> = []
        for (const r of recipients) {
          const rejected = isRejected(message.spam, r.spamThreshold)
          // The email and its raw content in one statement: one round trip per recipient copy.
          const rows = yield* sql<{ id: string }>`
            WITH email AS (
              INSERT INTO emails (org_id, domain_id, recipient, envelope_from, from_address, from_name, to_addresses,
                cc_addresses, subject, message_id, in_reply_to, "references", sent_at, headers, attachments, size_bytes,
                spam_score, auth, event_type, status, rejection_reason, parse_error, client_address, helo)
              VALUES (${r.orgId}, ${r.domainId}, ${r.address}, ${message.envelopeFrom}, ${p.from?.address ?? null},
                ${p.from?.name ?? null}, ${JSON.stringify(p.to)}::jsonb, ${JSON.stringify(p.cc)}::jsonb, ${p.subject},
                ${p.messageId}, ${p.inReplyTo}, ${JSON.stringify(p.references)}::jsonb, ${p.date},
                ${JSON.stringify(p.headers)}::jsonb, ${JSON.stringify(p.attachments)}::jsonb, ${message.raw.length},
                ${message.spam.score}, ${JSON.stringify(message.auth)}::jsonb, ${message.event},
                ${rejected ? "rejected" : "accepted"},
                ${rejected ? `spam score ${message.spam.score} above threshold ${r.spamThreshold} (${message.spam.rules.join(", ")})` : null},
                ${message.parseError}, ${message.clientAddress}, ${message.helo})
              RETURNING id),
            content AS (
              INSERT INTO email_contents (email_id, raw, text_body, html_body)
              SELECT id, ${message.raw}, ${p.text}, ${p.html} FROM email)
            SELECT id FROM email`
          const id = rows[0]!.id
          const email: StoredEmail = { id, orgId: r.orgId, recipient: r, status: rejected ? "rejected" : "accepted" }
          if (!rejected) yield* onStored(email, message).pipe(Effect.provideService(SqlClient.SqlClient, sql))
          stored.push(email)
        }
        return stored
      }).pipe(sql.withTransaction, Effect.withSpan("InboundStore.store"))

    return { store } as const
  })
}) {}
