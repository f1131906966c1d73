/** Contract of Sending: send-mail, replies and forwards, sent emails, scheduled sends, outbound status. */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Draft } from "../drafts/Api.js"
import { Schema } from "effect"
import { allErrors, DateTimeFilter, DateTimeString, IdempotencyHeaders, IdPath, Ok, OkList, strict, Uuid } from "../contract/Envelope.js"
import { Wire } from "../contract/Errors.js"
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

export const SentStatus = Schema.Literal("scheduled", "sending", "sent", "failed", "canceled").annotations({
  description: "`sending`: an immediate send being relayed (never `scheduled`, which only a send with `send_at` is)"
})
export type SentStatus = typeof SentStatus.Type

export const SentError = Schema.Struct({ code: Schema.String, message: Schema.String }).annotations({ identifier: "SentEmailError" })

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
  in_reply_to: Schema.NullOr(Schema.String),
  send_at: Schema.NullOr(DateTimeString),
  sent_at: Schema.NullOr(DateTimeString),
  created_at: DateTimeString,
  error: Schema.NullOr(SentError).annotations({ description: "why the send failed (the API error code it answered or would answer)" }),
  relay_response: Schema.NullOr(Schema.String).annotations({ description: "the relay's final reply" }),
  content_discarded: Schema.Boolean
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
  date_to: Schema.optionalWith(DateTimeFilter, { exact: true }).annotations({ description: "created at or before" })
}))
export type SentListQuery = typeof SentListQuery.Type

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
      .addError(Wire.CannotSendFromDomain)
      .addError(Wire.RecipientNotAllowed)
      .addError(Wire.LoopDetected)
      .addError(Wire.DiscardNotEnabled)
      .addError(Wire.Conflict)
      .addError(Wire.OutboundCapacityExhausted)
      .addError(Wire.OutboundUnreachable)
      .addError(Wire.OutboundRelayTimeout)
      .addError(Wire.OutboundRelayFailed)
      .addError(Wire.OutboundResponseMalformed)
      .addError(Wire.OutboundKeyInvalid)
      .annotate(
        OpenApi.Summary,
        "Send an email now (relayed inside the request) or at `send_at`; the result, success or relay failure, " +
          "is recorded on the sent email and replayed for the same Idempotency-Key"
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
      .addError(Wire.DiscardNotEnabled)
      .addError(Wire.CannotSendFromDomain)
      .addError(Wire.RecipientNotAllowed)
      .addError(Wire.LoopDetected)
      .addError(Wire.OutboundCapacityExhausted)
      .addError(Wire.OutboundUnreachable)
      .addError(Wire.OutboundRelayTimeout)
      .addError(Wire.OutboundRelayFailed)
      .addError(Wire.OutboundResponseMalformed)
      .addError(Wire.OutboundKeyInvalid)
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
      .addError(Wire.DiscardNotEnabled)
      .addError(Wire.CannotSendFromDomain)
      .addError(Wire.RecipientNotAllowed)
      .addError(Wire.LoopDetected)
      .addError(Wire.OutboundCapacityExhausted)
      .addError(Wire.OutboundUnreachable)
      .addError(Wire.OutboundRelayTimeout)
      .addError(Wire.OutboundRelayFailed)
      .addError(Wire.OutboundResponseMalformed)
      .addError(Wire.OutboundKeyInvalid)
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
