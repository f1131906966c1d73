/**
 * A sent email as stored (`SentRow`, its content `ContentRow`) and as the API shows it
 * (`toSentEmail`, `toSentEmailDetail`). Rows are decoded, so a renamed or retyped column fails loudly.
 */
import { Option, Schema } from "effect"
import { extractReplyText } from "../mail/ReplyText.js"
import { Enum, JsonColumn, NullableTimestamp, TextArray, Timestamp } from "../platform/Rows.js"
import { type SentEmail, type SentEmailDetail, SentStatus } from "./Api.js"

/** A sent email as stored; the address lists, references, attachments and bounce are `jsonb`. */
export const SentRow = Schema.Struct({
  id: Schema.String,
  org_id: Schema.String,
  status: SentStatus,
  kind: Enum("send", "reply", "forward"),
  source_email_id: Schema.NullOr(Schema.String),
  from_header: Schema.String,
  from_address: Schema.String,
  to_addresses: JsonColumn(TextArray),
  cc_addresses: JsonColumn(TextArray),
  bcc_addresses: JsonColumn(TextArray),
  reply_to: Schema.NullOr(Schema.String),
  subject: Schema.String,
  message_id: Schema.String,
  thread_id: Schema.NullOr(Schema.String),
  /** Set by the database (migrations/0150) from the from address. */
  inbox_id: Schema.optional(Schema.NullOr(Schema.String)),
  in_reply_to: Schema.NullOr(Schema.String),
  references: JsonColumn(TextArray),
  send_at: NullableTimestamp,
  sent_at: NullableTimestamp,
  due_at: NullableTimestamp,
  attempt_count: Schema.Number,
  lease_token: Schema.NullOr(Schema.String),
  lease_until: NullableTimestamp,
  quota_at: NullableTimestamp,
  error_code: Schema.NullOr(Schema.String),
  error_message: Schema.NullOr(Schema.String),
  relay_response: Schema.NullOr(Schema.String),
  discard_content: Schema.Boolean,
  content_discarded: Schema.Boolean,
  /** Sent by an automation (a function's MAILROOM binding): it counts on the loop guard's budgets. */
  automated: Schema.Boolean,
  attachments: JsonColumn(Schema.Array(Schema.Struct({ filename: Schema.String, content_type: Schema.String, size_bytes: Schema.Number }))),
  created_at: Timestamp,
  /** The latest bounce or complaint (src/bounces), null before one. */
  bounce: JsonColumn(Schema.NullOr(Schema.Struct({
    type: Enum("hard", "soft", "complaint"),
    status: Schema.NullOr(Schema.String),
    diagnostic: Schema.NullOr(Schema.String),
    received_at: Schema.String,
    recipient: Schema.optionalWith(Schema.NullOr(Schema.String), { default: () => null })
  })))
})
export type SentRow = typeof SentRow.Type

export const StoredAttachment = Schema.Struct({ filename: Schema.String, content_type: Schema.String, content_base64: Schema.String })
export type StoredAttachment = typeof StoredAttachment.Type

export const ContentRow = Schema.Struct({
  text_body: Schema.NullOr(Schema.String),
  html_body: Schema.NullOr(Schema.String),
  /** The reply text (src/mail/ReplyText.ts), computed when the row is written; absent on a new row's content. */
  extracted_text: Schema.optional(Schema.NullOr(Schema.String)),
  headers: JsonColumn(Schema.Record({ key: Schema.String, value: Schema.String })),
  attachments: JsonColumn(Schema.Array(StoredAttachment))
})
export type ContentRow = typeof ContentRow.Type


export const toSentEmail = (r: SentRow): SentEmail => ({
  id: r.id,
  status: r.status,
  from: r.from_header,
  to: r.to_addresses,
  cc: r.cc_addresses,
  bcc: r.bcc_addresses,
  reply_to: r.reply_to,
  subject: r.subject,
  message_id: r.message_id,
  thread_id: r.thread_id,
  inbox_id: r.inbox_id ?? null,
  in_reply_to: r.in_reply_to,
  send_at: r.send_at,
  sent_at: r.sent_at,
  created_at: r.created_at,
  error: r.error_code === null ? null : { code: r.error_code, message: r.error_message ?? "" },
  relay_response: r.relay_response,
  content_discarded: r.content_discarded,
  bounce: r.bounce === null || r.bounce === undefined ? null : { ...r.bounce, received_at: new Date(r.bounce.received_at) }
})

export const toSentEmailDetail = (r: SentRow, c: Option.Option<ContentRow>): SentEmailDetail => ({
  ...toSentEmail(r),
  text: Option.match(c, { onNone: () => null, onSome: (x) => x.text_body }),
  html: Option.match(c, { onNone: () => null, onSome: (x) => x.html_body }),
  extracted_text: Option.match(c, {
    onNone: () => null,
    onSome: (x) => x.extracted_text ?? (x.text_body !== null || x.html_body !== null ? extractReplyText(x.text_body, x.html_body) : null)
  }),
  attachments: r.attachments
})

/** Attachment metadata kept on the row (it outlives discarded content). */
export const attachmentMeta = (list: ReadonlyArray<StoredAttachment>) =>
  list.map((a) => ({ filename: a.filename, content_type: a.content_type, size_bytes: Buffer.from(a.content_base64, "base64").length }))
