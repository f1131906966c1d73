/**
 * A draft: a send held for a person's approval (account setting `send_approval`). In the floor
 * because two areas answer with it: the drafts themselves and send-mail's batch (a held message).
 */
import { Schema } from "effect"
import { DateTimeString, Uuid } from "./Envelope.js"

export const DraftStatus = Schema.Literal("pending_approval", "approved", "rejected", "expired", "sent", "failed").annotations({
  description: "pending_approval → sent (approved and relayed) or failed (approved, the send refused); rejected; expired after 7 days"
})

export const Draft = Schema.Struct({
  id: Uuid,
  status: DraftStatus,
  kind: Schema.Literal("send", "reply", "forward"),
  reason: Schema.Literal("all", "new_recipients").annotations({ description: "why it waits: the account's send_approval" }),
  new_recipients: Schema.Array(Schema.String).annotations({ description: "recipients this organization never sent to or received from" }),
  from: Schema.String,
  to: Schema.Array(Schema.String),
  cc: Schema.Array(Schema.String),
  bcc: Schema.Array(Schema.String),
  subject: Schema.String,
  created_at: DateTimeString,
  expires_at: DateTimeString,
  decided_at: Schema.NullOr(DateTimeString),
  sent_email_id: Schema.NullOr(Uuid).annotations({ description: "the sent email once approved (GET /sent-emails/{id})" }),
  error: Schema.NullOr(Schema.Struct({ code: Schema.String, message: Schema.String })).annotations({
    description: "failed: why the approved send was refused"
  })
}).annotations({ identifier: "Draft" })
export type Draft = typeof Draft.Type
