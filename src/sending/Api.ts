/** Contract of Sending: send-mail, replies and forwards, sent emails, scheduled sends, outbound status. */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { Draft } from "../contract/Drafts.js"
import { allErrors, DateTimeFilter, DateTimeString, IdempotencyHeaders, IdPath, Ok, OkList, strict, Uuid } from "../contract/Envelope.js"
import { ErrorDetails, Gate, Wire } from "../contract/Errors.js"
import { withOutboundErrors } from "../contract/Outbound.js"
import { ListQuery } from "../contract/Paging.js"
import { Authentication } from "../contract/Security.js"

export const MAX_RECIPIENTS = 50
export const SUBJECT_MAX_LENGTH = 998
export const ATTACHMENTS_MAX_BYTES = 10 * 1024 * 1024
export const SCHEDULE_MAX_DAYS = 30
export const BODY_MAX_LENGTH = 5 * 1024 * 1024

const AddressText = Schema.String.pipe(Schema.minLength(1), Schema.maxLength(320))

export const Recipients = Schema.Union(AddressText, Schema.Array(AddressText)).annotations({
  description: "one address or a list: `addr`, `Name <addr>` or `registry:<name>/<handle>` (a published registry entry); " +
    `${MAX_RECIPIENTS} recipients at most across to, cc and bcc`
})

export const OutgoingAttachment = strict(Schema.Struct({
  filename: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(255)),
  content_type: Schema.optionalWith(Schema.String.pipe(Schema.minLength(1), Schema.maxLength(255)), { exact: true })
    .annotations({ description: "default: guessed from the filename" }),
  content_base64: Schema.String.annotations({ description: "the content, base64; all attachments together at most 10 MiB decoded" })
})).annotations({ identifier: "OutgoingAttachment" })

const Text = Schema.String.pipe(Schema.maxLength(BODY_MAX_LENGTH))

const Headers = Schema.Record({ key: Schema.String.pipe(Schema.maxLength(200)), value: Schema.String.pipe(Schema.maxLength(2000)) })
  .annotations({ description: "extra headers; only names starting with `X-` or `List-`" })

const SendAt = DateTimeFilter.annotations({ description: `a future time at most ${SCHEDULE_MAX_DAYS} days ahead: the message is scheduled` })

export const SendMail = strict(Schema.Struct({
  from: Schema.optionalWith(AddressText, { exact: true }).annotations({
    description: "`addr` or `Name <addr>`: the organization's managed inbox address (or a +tag form) or an address at a " +
      "verified domain. Default: the organization's only address (its managed inbox, when it has no verified domain); " +
      "with several to choose from, 400 `validation_error` listing `details.valid_senders`"
  }),
  to: Recipients,
  cc: Schema.optionalWith(Recipients, { exact: true }),
  bcc: Schema.optionalWith(Recipients, { exact: true }),
  reply_to: Schema.optionalWith(AddressText, { exact: true }),
  subject: Schema.String.pipe(Schema.maxLength(SUBJECT_MAX_LENGTH)).annotations({ description: "1-998 characters" }),
  text: Schema.optionalWith(Text, { exact: true }),
  html: Schema.optionalWith(Text, { exact: true }),
  headers: Schema.optionalWith(Headers, { exact: true }),
  attachments: Schema.optionalWith(Schema.Array(OutgoingAttachment).pipe(Schema.maxItems(100)), { exact: true }),
  send_at: Schema.optionalWith(SendAt, { exact: true }),
  discard_content: Schema.optionalWith(Schema.Boolean, { exact: true }).annotations({
    description: "drop the body once relayed (metadata kept); needs the account's discard_content_on_webhook_confirmed"
  })
})).annotations({ identifier: "SendMail", description: "At least one of `text` and `html`." })
export type SendMail = typeof SendMail.Type

export const BATCH_MAX_MESSAGES = 100

export const SendBatch = strict(Schema.Struct({
  messages: Schema.Array(
    Schema.Record({ key: Schema.String, value: Schema.Unknown }).annotations({
      identifier: "BatchMessage",
      description: "a `POST /send-mail` body (SendMail); each message is validated on its own and a bad one fails alone"
    })
  ).pipe(Schema.minItems(1), Schema.maxItems(BATCH_MAX_MESSAGES)).annotations({ description: `1-${BATCH_MAX_MESSAGES} messages` })
})).annotations({ identifier: "SendBatch" })
export type SendBatch = typeof SendBatch.Type

/** The `error` object of the error envelope, for one message of a batch. */
export const BatchError = Schema.Struct({
  code: Schema.String,
  message: Schema.String,
  details: Schema.optional(ErrorDetails),
  gates: Schema.optional(Schema.Array(Gate))
}).annotations({ identifier: "BatchError", description: "what `POST /send-mail` would have answered as `error` for this message" })

export const ReplyMail = strict(Schema.Struct({
  text: Schema.optionalWith(Text, { exact: true }),
  html: Schema.optionalWith(Text, { exact: true }),
  reply_all: Schema.optionalWith(Schema.Boolean, { exact: true }).annotations({
    description: "also to the original's To and Cc, minus the organization's own addresses"
  }),
  from: Schema.optionalWith(AddressText, { exact: true }).annotations({ description: "default: the address the original was received at" }),
  attachments: Schema.optionalWith(Schema.Array(OutgoingAttachment).pipe(Schema.maxItems(100)), { exact: true }),
  send_at: Schema.optionalWith(SendAt, { exact: true })
})).annotations({ identifier: "ReplyMail", description: "At least one of `text` and `html`." })
export type ReplyMail = typeof ReplyMail.Type

export const ForwardMail = strict(Schema.Struct({
  to: Recipients,
  text: Schema.optionalWith(Text, { exact: true }).annotations({ description: "a note above the forwarded message" }),
  from: Schema.optionalWith(AddressText, { exact: true }).annotations({ description: "default: the address the original was received at" })
})).annotations({ identifier: "ForwardMail" })
export type ForwardMail = typeof ForwardMail.Type

export const Reschedule = strict(Schema.Struct({ send_at: SendAt })).annotations({ identifier: "RescheduleSentEmail" })

export const SentStatus = Schema.Literal("scheduled", "sending", "sent", "failed", "canceled", "bounced", "complained").annotations({
  description: "`sending`: an immediate send being relayed (never `scheduled`, which only a send with `send_at` is); " +
    "`bounced`: a DSN with Action: failed came back to its return path; `complained`: an ARF abuse report did (see `bounce`)"
})
export type SentStatus = typeof SentStatus.Type

export const SentError = Schema.Struct({ code: Schema.String, message: Schema.String }).annotations({ identifier: "SentEmailError" })

export const SentBounce = Schema.Struct({
  type: Schema.Literal("hard", "soft", "complaint"),
  status: Schema.NullOr(Schema.String).annotations({ description: "the DSN's enhanced status code (5.1.1); for a complaint the ARF Feedback-Type (abuse)" }),
  diagnostic: Schema.NullOr(Schema.String).annotations({ description: "the DSN's Diagnostic-Code; for a complaint the reporter's User-Agent" }),
  received_at: DateTimeString,
  recipient: Schema.NullOr(Schema.String).annotations({ description: "the recipient the report is about, when it names one of the message's" })
}).annotations({ identifier: "SentEmailBounce" })

const sentFields = {
  id: Uuid,
  status: SentStatus,
  from: Schema.String,
  to: Schema.Array(Schema.String),
  cc: Schema.Array(Schema.String),
  bcc: Schema.Array(Schema.String),
  reply_to: Schema.NullOr(Schema.String),
  subject: Schema.String,
  message_id: Schema.String,
  thread_id: Schema.NullOr(Uuid),
  inbox_id: Schema.NullOr(Uuid).annotations({ description: "the inbox (GET /inboxes) it was sent from; null for a domain address" }),
  in_reply_to: Schema.NullOr(Schema.String),
  send_at: Schema.NullOr(DateTimeString),
  sent_at: Schema.NullOr(DateTimeString),
  created_at: DateTimeString,
  error: Schema.NullOr(SentError).annotations({ description: "why the send failed (the API error code it answered or would answer)" }),
  relay_response: Schema.NullOr(Schema.String).annotations({ description: "the relay's final reply" }),
  content_discarded: Schema.Boolean,
  bounce: Schema.NullOr(SentBounce).annotations({ description: "the latest bounce or complaint received for it (null before one)" })
}

export const SentEmail = Schema.Struct(sentFields).annotations({ identifier: "SentEmail" })
export type SentEmail = typeof SentEmail.Type

export const SentAttachment = Schema.Struct({
  filename: Schema.String,
  content_type: Schema.String,
  size_bytes: Schema.Int
}).annotations({ identifier: "SentAttachment" })

export const SentEmailDetail = Schema.Struct({
  ...sentFields,
  text: Schema.NullOr(Schema.String),
  html: Schema.NullOr(Schema.String),
  extracted_text: Schema.NullOr(Schema.String).annotations({
    description: "the new text of the message without quoted history or signature; null without a body or once discarded"
  }),
  attachments: Schema.Array(SentAttachment)
}).annotations({ identifier: "SentEmailDetail" })
export type SentEmailDetail = typeof SentEmailDetail.Type

export const SentListQuery = allErrors(Schema.Struct({
  ...ListQuery.fields,
  status: Schema.optionalWith(SentStatus, { exact: true }),
  to: Schema.optionalWith(Schema.String.pipe(Schema.minLength(1), Schema.maxLength(320)), { exact: true }).annotations({
    description: "only messages with this recipient (to, cc or bcc; case is ignored)"
  }),
  date_from: Schema.optionalWith(DateTimeFilter, { exact: true }).annotations({ description: "created at or after" }),
  date_to: Schema.optionalWith(DateTimeFilter, { exact: true }).annotations({ description: "created at or before" }),
  inbox_id: Schema.optionalWith(Uuid, { exact: true }).annotations({ description: "only mail sent from this inbox" })
}))
export type SentListQuery = typeof SentListQuery.Type

export const BatchResult = Schema.Struct({
  results: Schema.Array(Schema.Union(
    Schema.Struct({ index: Schema.Int, email: SentEmail }),
    Schema.Struct({ index: Schema.Int, draft: Draft }),
    Schema.Struct({ index: Schema.Int, error: BatchError })
  )).annotations({
    description: "one entry per message, in the order given: `{index, email}` when sent (or scheduled), `{index, draft}` " +
      "when the account's send_approval holds it for approval, `{index, error}` when not sent"
  })
}).annotations({ identifier: "SendBatchResult" })
export type BatchResult = typeof BatchResult.Type

export const OutboundStatus = Schema.Struct({
  relay: Schema.Literal("smtp", "outbox"),
  reachable: Schema.Boolean,
  checked_at: DateTimeString,
  limits: Schema.Struct({ send_per_hour: Schema.Number, send_per_day: Schema.Number }),
  usage: Schema.Struct({
    last_hour: Schema.Int,
    today: Schema.Int.annotations({ description: "messages in the last 24 hours (the day quota is a sliding 24-hour window)" })
  }),
  remaining: Schema.Struct({ hour: Schema.Int, day: Schema.Int }),
  scheduled: Schema.Int.annotations({ description: "messages waiting for their send_at" })
}).annotations({ identifier: "OutboundStatus" })
export type OutboundStatus = typeof OutboundStatus.Type

export class SendingApi extends HttpApiGroup.make("sending")
  .add(
    HttpApiEndpoint.post("send", "/send-mail")
      .setPayload(SendMail)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Ok(SentEmail, "SentEmail"), { status: 201 })
      .addSuccess(Ok(Draft, "Draft"), { status: 202 })
      .addError(Wire.Forbidden)
      // Named here too only to keep their place in the document's 403 list (a repeat adds nothing).
      .addError(Wire.CannotSendFromDomain)
      .addError(Wire.RecipientNotAllowed)
      .addError(Wire.LoopDetected)
      .addError(Wire.Conflict)
      .pipe(withOutboundErrors)
      .annotate(
        OpenApi.Summary,
        "Send an email now (relayed inside the request) or at `send_at`; the result, success or relay failure, " +
          "is recorded on the sent email and replayed for the same Idempotency-Key"
      )
  )
  .add(
    HttpApiEndpoint.post("sendBatch", "/send-mail/batch")
      .setPayload(SendBatch)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Ok(BatchResult, "SendBatchResult"))
      .annotate(
        OpenApi.Summary,
        `Send up to ${BATCH_MAX_MESSAGES} emails in one request: each is validated, checked and counted as one send, and one ` +
          "failing does not stop the others (200 with a result per message; 400 only when `messages` is empty, too long or not a list)"
      )
  )
  .add(
    HttpApiEndpoint.post("reply", "/emails/:id/reply")
      .setPath(IdPath)
      .setPayload(ReplyMail)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Ok(SentEmail, "SentEmail"), { status: 201 })
      .addSuccess(Ok(Draft, "Draft"), { status: 202 })
      .addError(Wire.NotFound)
      .addError(Wire.Forbidden)
      .addError(Wire.InboundNotRepliable)
      .addError(Wire.LoopDetected)
      .pipe(withOutboundErrors)
      .annotate(
        OpenApi.Summary,
        "Reply to a received email: to its Reply-To or From (`reply_all`: also its To and Cc), `Re:` subject, threaded"
      )
  )
  .add(
    HttpApiEndpoint.post("forward", "/emails/:id/forward")
      .setPath(IdPath)
      .setPayload(ForwardMail)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Ok(SentEmail, "SentEmail"), { status: 201 })
      .addSuccess(Ok(Draft, "Draft"), { status: 202 })
      .addError(Wire.NotFound)
      .addError(Wire.Forbidden)
      .addError(Wire.InboundNotRepliable)
      .addError(Wire.LoopDetected)
      .pipe(withOutboundErrors)
      .annotate(OpenApi.Summary, "Forward a received email, attached as message/rfc822")
  )
  .add(
    HttpApiEndpoint.get("list", "/sent-emails")
      .setUrlParams(SentListQuery)
      .addSuccess(OkList(SentEmail, "SentEmail"))
      .annotate(OpenApi.Summary, "Sent and scheduled emails, newest first")
  )
  .add(
    HttpApiEndpoint.get("get", "/sent-emails/:id")
      .setPath(IdPath)
      .addSuccess(Ok(SentEmailDetail, "SentEmailDetail"))
      .addError(Wire.NotFound)
      .annotate(OpenApi.Summary, "A sent email with its content (null once discarded)")
  )
  .add(
    HttpApiEndpoint.patch("reschedule", "/sent-emails/:id")
      .setPath(IdPath)
      .setPayload(Reschedule)
      .addSuccess(Ok(SentEmail, "SentEmail"))
      .addError(Wire.NotFound)
      .addError(Wire.NotScheduled)
      .annotate(OpenApi.Summary, "Move a scheduled send (409 not_scheduled once it is sent, failed or canceled)")
  )
  .add(
    HttpApiEndpoint.post("cancel", "/sent-emails/:id/cancel")
      .setPath(IdPath)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Ok(SentEmail, "SentEmail"))
      .addError(Wire.NotFound)
      .addError(Wire.NotScheduled)
      .annotate(OpenApi.Summary, "Cancel a scheduled send (409 not_scheduled once it is sent, failed or canceled)")
  )
  .add(
    HttpApiEndpoint.get("outboundStatus", "/outbound/status")
      .addSuccess(Ok(OutboundStatus, "OutboundStatus"))
      .annotate(OpenApi.Summary, "The outbound relay, the send quotas and their use, and the scheduled sends")
  )
  .middleware(Authentication)
  .annotate(
    OpenApi.Description,
    "Sending: `POST /send-mail`, replies and forwards. `from` must be the organization's managed inbox address " +
      "(or a +tag form) or an address at a verified domain (403 `cannot_send_from_domain`, `details.valid_senders`), " +
      "and its display name may not show any other address (403 `cannot_send_from_domain`, `details.display_name_address`). " +
      "Accounts with `send_to_known_addresses` (emailless agents) may only write to addresses that sent them " +
      "accepted mail (403 `recipient_not_allowed` with one `gates[]` entry per refused recipient). Quotas: the " +
      "plan's `send_per_hour` and `send_per_day` (sliding windows; 429 `rate_limited` with that window's headers). " +
      "A function's sends (its MAILROOM binding) carry `Auto-Submitted` and meet the loop guard: at most 10 automated " +
      "sends per thread and hour, and 5 in a row to one counterpart without a person's message in between " +
      "(429 `loop_detected`, `details {thread_id, rule, limit, window_seconds, retry_after}`). " +
      "Mail carries Message-ID, Date and a DKIM signature. Relay failures answer the outbound codes and are " +
      "recorded on the sent email as `failed`; a retry with the same Idempotency-Key replays them."
  )
{}
