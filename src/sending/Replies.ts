/**
 * Replies and forwards of received mail, turned into ordinary sends (same checks, quotas, relay).
 *
 * A reply goes to the original's Reply-To, else its From; `reply_all` adds its To and Cc minus the
 * organization's own addresses. The subject gets one `Re:`; In-Reply-To is the original's
 * Message-ID and References its References plus that id. `from` defaults to the address the
 * original was received at. A forward attaches the original's raw MIME as `message/rfc822`.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import addressparser from "nodemailer/lib/addressparser"
import { InboundNotRepliable, NotFound } from "../contract/Errors.js"
import { type OrgScope, orgOf, scoped } from "../platform/InboxLimit.js"
import { Enum, firstRow, JsonColumn, TextArray } from "../platform/Rows.js"
import { canSendFrom, sendableAddresses } from "../registries/Senders.js"
import type { ForwardMail, ReplyMail } from "./Api.js"
import { asList } from "../mail/Addresses.js"
import type { SendInput } from "./Sender.js"

/** What a reply or forward reads of the original; the lists and headers are `jsonb`. */
const OriginalRow = Schema.Struct({
  id: Schema.String,
  status: Enum("accepted", "rejected", "quarantined"),
  recipient: Schema.String,
  from_address: Schema.NullOr(Schema.String),
  to_addresses: JsonColumn(TextArray),
  cc_addresses: JsonColumn(TextArray),
  subject: Schema.NullOr(Schema.String),
  message_id: Schema.NullOr(Schema.String),
  references: JsonColumn(TextArray),
  headers: JsonColumn(Schema.Record({ key: Schema.String, value: Schema.String })),
  discarded: Schema.Boolean
})

const RawRow = Schema.Struct({ raw: Schema.NullOr(Schema.Uint8ArrayFromSelf) })

export type NotRepliableReason = "rejected" | "content_discarded" | "no_message_id" | "no_recipient"

const notRepliable = (id: string, reason: NotRepliableReason, what: string) =>
  new InboundNotRepliable({
    message: `email ${id} cannot be ${what}: ${
      {
        rejected: "it was rejected at ingestion",
        content_discarded: "its content was discarded",
        no_message_id: "it has no Message-ID to thread a reply to",
        no_recipient: "it names no Reply-To or From address to answer"
      }[reason]
    }`,
    details: { reason }
  })

const addresses = (header: string | undefined): ReadonlyArray<string> =>
  header === undefined ? [] : addressparser(header, { flatten: true }).map((a) => a.address.toLowerCase()).filter((a) => a.includes("@"))

/** `Re: subject`, without stacking prefixes. */
export const replySubject = (subject: string | null) => {
  const s = (subject ?? "").trim()
  return /^re\s*:/i.test(s) ? s : `Re: ${s}`.trim()
}

export const forwardSubject = (subject: string | null) => {
  const s = (subject ?? "").trim()
  return /^(fwd?|fw)\s*:/i.test(s) ? s : `Fwd: ${s}`.trim()
}

export const loadOriginal = (scope: OrgScope, id: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const row = yield* sql`
      SELECT id, status, recipient, from_address, to_addresses, cc_addresses, subject, message_id, "references", headers,
             content_discarded_at IS NOT NULL AS discarded
      FROM emails WHERE id = ${id} AND ${scoped(sql, scope)}`.pipe(firstRow(OriginalRow, "original of reply"), Effect.orDie)
    if (Option.isNone(row)) return yield* new NotFound({ message: `no email ${id}` })
    return row.value
  })

export const replyInput = (scope: OrgScope, id: string, body: ReplyMail) =>
  Effect.gen(function*() {
    const o = yield* loadOriginal(scope, id)
    if (o.status === "rejected") return yield* notRepliable(id, "rejected", "replied to")
    if (o.discarded) return yield* notRepliable(id, "content_discarded", "replied to")
    if (o.message_id === null || o.message_id.trim() === "") return yield* notRepliable(id, "no_message_id", "replied to")
    const replyTo = addresses(o.headers["reply-to"])
    const primary = replyTo.length > 0 ? replyTo : o.from_address !== null ? [o.from_address.toLowerCase()] : []
    if (primary.length === 0) return yield* notRepliable(id, "no_recipient", "replied to")
    let cc: Array<string> = []
    if (body.reply_all === true) {
      const own = yield* sendableAddresses(orgOf(scope))
      const mine = (a: string) => a === o.recipient.toLowerCase() || canSendFrom(own, a)
      cc = [...new Set([...o.to_addresses, ...o.cc_addresses].flatMap((a) => addresses(a)))]
        .filter((a) => !mine(a) && !primary.includes(a))
    }
    const references = [...o.references, o.message_id]
    return {
      kind: "reply",
      sourceEmailId: o.id,
      from: body.from ?? o.recipient,
      to: primary,
      cc,
      bcc: [],
      replyTo: null,
      subject: replySubject(o.subject),
      text: body.text ?? null,
      html: body.html ?? null,
      headers: {},
      attachments: body.attachments ?? [],
      sendAt: body.send_at ?? null,
      discardContent: false,
      inReplyTo: o.message_id,
      references
    } satisfies SendInput
  })

export const forwardInput = (scope: OrgScope, id: string, body: ForwardMail) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const o = yield* loadOriginal(scope, id)
    if (o.discarded) return yield* notRepliable(id, "content_discarded", "forwarded")
    const raw = yield* sql`SELECT raw FROM email_contents WHERE email_id = ${id}`.pipe(
      firstRow(RawRow, "raw of forwarded email"),
      Effect.orDie
    )
    const bytes = Option.getOrUndefined(raw)?.raw
    if (bytes === undefined || bytes === null) return yield* notRepliable(id, "content_discarded", "forwarded")
    return {
      kind: "forward",
      sourceEmailId: o.id,
      from: body.from ?? o.recipient,
      to: asList(body.to),
      cc: [],
      bcc: [],
      replyTo: null,
      subject: forwardSubject(o.subject),
      text: body.text ?? `Forwarded message${o.from_address !== null ? ` from ${o.from_address}` : ""} attached.`,
      html: null,
      headers: {},
      attachments: [{ filename: "forwarded-message.eml", content_type: "message/rfc822", content_base64: Buffer.from(bytes).toString("base64") }],
      sendAt: null,
      discardContent: false,
      inReplyTo: null,
      references: o.message_id === null ? [] : [o.message_id]
    } satisfies SendInput
  })
