/** Contract of the Emails area: received mail, its raw MIME and attachments. */
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { allErrors, DateTimeFilter, DateTimeString, IdPath, Ok, OkList, strict, Uuid } from "../contract/Envelope.js"
import { Wire } from "../contract/Errors.js"
import { Authentication } from "../contract/Security.js"
import { TrustSchema } from "../mail/Trust.js"

export const EventTypeName = Schema.String.annotations({
  description: "email.received, email.bounced, email.tls_report, email.dmarc_report or email.dmarc_failure"
})

export const AuthSummary = Schema.Struct({ spf: Schema.String, dkim: Schema.String, dmarc: Schema.String })

export const EmailAttachment = Schema.Struct({
  filename: Schema.NullOr(Schema.String),
  content_type: Schema.String,
  size_bytes: Schema.Int,
  download_url: Schema.String.annotations({ description: "signed, valid 24 hours; bearer auth works without the token" })
}).annotations({ identifier: "EmailAttachment" })

/** Labels are a small set of tags a caller or agent keeps on an email (Gmail-like, lowercase). */
export const MAX_LABELS = 20
export const LABEL_PATTERN = /^[a-z0-9_:-]{1,64}$/

export const Label = Schema.String.pipe(
  Schema.pattern(LABEL_PATTERN, { message: () => "each label must be 1-64 characters of a-z, 0-9, _, : and -" })
).annotations({ description: "1-64 characters of a-z, 0-9, `_`, `:` and `-`" })

/** What the organization keeps on a received email besides the message: its labels and read state. */
const stateFields = {
  labels: Schema.Array(Schema.String).annotations({ description: "the email's labels, sorted (PATCH /emails/{id} sets them)" }),
  read: Schema.Boolean.annotations({ description: "false until marked read (PATCH /emails/{id} {read: true})" })
}

const summaryFields = {
  id: Uuid,
  thread_id: Uuid.annotations({ description: "the conversation this email belongs to (GET /threads/{id})" }),
  message_id: Schema.NullOr(Schema.String),
  event_type: EventTypeName,
  status: Schema.Literal("accepted", "rejected", "quarantined").annotations({
    description: "rejected: spam score above the threshold at ingestion (stored, never delivered); quarantined: held back by " +
      "a quarantine filter or the attachment policy (stored, delivered only when released with POST /emails/{id}/release; " +
      "deleted after 30 days)"
  }),
  rejection_reason: Schema.NullOr(Schema.String),
  from: Schema.NullOr(Schema.String),
  from_name: Schema.NullOr(Schema.String),
  envelope_from: Schema.NullOr(Schema.String),
  to: Schema.Array(Schema.String),
  cc: Schema.Array(Schema.String),
  recipient: Schema.String,
  domain_id: Schema.NullOr(Uuid),
  inbox_id: Schema.NullOr(Uuid).annotations({ description: "the inbox (GET /inboxes) it reached; null for a domain address" }),
  subject: Schema.NullOr(Schema.String),
  date: Schema.NullOr(DateTimeString),
  size_bytes: Schema.Int,
  spam_score: Schema.NullOr(Schema.Number),
  auth: AuthSummary,
  auto_submitted: Schema.Boolean.annotations({
    description: "the message says an automaton sent it (Auto-Submitted other than `no`, or Precedence bulk, junk or list): " +
      "automations should not answer it"
  }),
  trust: TrustSchema,
  attachment_count: Schema.Int,
  content_discarded: Schema.Boolean,
  ...stateFields,
  received_at: DateTimeString
}

export const EmailSummary = Schema.Struct(summaryFields).annotations({ identifier: "EmailSummary" })
export type EmailSummary = typeof EmailSummary.Type

/**
 * Header name → value, passed through as it is. Effect's `Schema.Record` rebuilds the object by
 * assignment, which drops a header named `__proto__`; every header a message carried is kept.
 */
export const HeaderMap = Schema.declare(
  (u: unknown): u is { readonly [name: string]: string } =>
    typeof u === "object" && u !== null && !Array.isArray(u) && Object.values(u).every((v) => typeof v === "string"),
  {
    description: "lower-cased header name → unfolded value; repeated headers joined with a newline",
    jsonSchema: { type: "object", additionalProperties: { type: "string" } }
  }
)

export const Email = Schema.Struct({
  ...summaryFields,
  in_reply_to: Schema.NullOr(Schema.String),
  references: Schema.Array(Schema.String),
  headers: HeaderMap,
  text: Schema.NullOr(Schema.String),
  html: Schema.NullOr(Schema.String),
  extracted_text: Schema.NullOr(Schema.String).annotations({
    description: "the new text of the message without quoted history or signature (from the text part, else the HTML); " +
      "null when it has no body or its content was discarded"
  }),
  attachments: Schema.Array(EmailAttachment),
  raw_url: Schema.String,
  attachments_url: Schema.String
}).annotations({ identifier: "Email" })
export type Email = typeof Email.Type

/**
 * `include=wake` lists wake firings too. A wake's firing is stored like received mail (event type
 * `wake.command`, to the function's `fn-<id>@` address); default lists leave it out so the mailbox
 * shows mail from people and systems, not the organization's own timers.
 */
export const IncludeWake = Schema.Literal("wake").annotations({
  description: "`wake`: also list wake firings (mail of event type wake.command), which default lists leave out"
})

/** The event type a wake firing is stored with. */
export const WAKE_EVENT_TYPE = "wake.command"

const Limit = Schema.NumberFromString.pipe(Schema.int(), Schema.between(1, 100))

export const EmailListParams = allErrors(Schema.Struct({
  limit: Schema.optionalWith(Limit, { exact: true }),
  cursor: Schema.optionalWith(Schema.String.pipe(Schema.maxLength(512)), { exact: true }),
  recipient: Schema.optionalWith(Schema.String.pipe(Schema.maxLength(320)), { exact: true }),
  sender: Schema.optionalWith(Schema.String.pipe(Schema.maxLength(320)), { exact: true }),
  event_type: Schema.optionalWith(Schema.String.pipe(Schema.maxLength(64)), { exact: true }),
  status: Schema.optionalWith(Schema.Literal("accepted", "rejected", "quarantined"), { exact: true }),
  date_from: Schema.optionalWith(DateTimeFilter, { exact: true }),
  date_to: Schema.optionalWith(DateTimeFilter, { exact: true }),
  include: Schema.optionalWith(IncludeWake, { exact: true }),
    inbox_id: Schema.optionalWith(Uuid, { exact: true }).annotations({ description: "only mail that reached this inbox" }),
    label: Schema.optionalWith(Label, { exact: true }).annotations({ description: "only emails with this label" }),
    unread: Schema.optionalWith(Schema.BooleanFromString, { exact: true }).annotations({
      description: "`true`: only unread emails; `false`: only read ones"
    })
}))

export const UpdateEmail = strict(Schema.Struct({
  labels: Schema.optionalWith(
    Schema.Array(Label).pipe(Schema.maxItems(MAX_LABELS, { message: () => `at most ${MAX_LABELS} labels` })),
    { exact: true }
  ).annotations({ description: `the new set of labels (replaces the old one; duplicates collapse), at most ${MAX_LABELS}` }),
  read: Schema.optionalWith(Schema.Boolean, { exact: true }).annotations({ description: "mark the email read or unread" })
})).pipe(
  Schema.filter((b) => Object.keys(b).length > 0 || "at least one property is required (labels or read)"),
  Schema.annotations({ identifier: "UpdateEmail" })
)
export type UpdateEmail = typeof UpdateEmail.Type

export const DownloadParams = allErrors(Schema.Struct({
  token: Schema.optionalWith(Schema.String.pipe(Schema.maxLength(1024)), { exact: true })
}))

export class EmailsApi extends HttpApiGroup.make("emails")
  .add(
    HttpApiEndpoint.get("list", "/emails")
      .setUrlParams(EmailListParams)
      .addSuccess(OkList(EmailSummary, "EmailSummary"))
      .annotate(OpenApi.Summary, "Received emails, newest first, with cursor pagination and filters")
      .annotate(
        OpenApi.Description,
        "Wake firings (event type wake.command) are left out unless `include=wake` is given or `event_type=wake.command` asks for them."
      )
  )
  .add(
    HttpApiEndpoint.get("get", "/emails/:id")
      .setPath(IdPath)
      .addSuccess(Ok(Email, "Email"))
      .addError(Wire.NotFound)
      .annotate(OpenApi.Summary, "One received email with its content and download links")
  )
  .add(
    HttpApiEndpoint.patch("update", "/emails/:id")
      .setPath(IdPath)
      .setPayload(UpdateEmail)
      .addSuccess(Ok(Email, "Email"))
      .addError(Wire.NotFound)
      .annotate(OpenApi.Summary, "Set an email's labels or read state")
      .annotate(
        OpenApi.Description,
        "`labels` replaces the email's set of labels (`[]` clears it); `read` marks it read or unread. Answers the email."
      )
  )
  .add(
    HttpApiEndpoint.del("delete", "/emails/:id")
      .setPath(IdPath)
      .addSuccess(Ok(EmailSummary, "DeletedEmail"))
      .addError(Wire.NotFound)
      .annotate(OpenApi.Summary, "Delete a received email and its stored content")
  )
  .middleware(Authentication)
  .annotate(OpenApi.Description, "Received mail")
{}

/**
 * Downloads accept either the signed `token` of a download URL or bearer auth, so they sit outside
 * the authenticated group and check credentials themselves.
 */
export class DownloadsApi extends HttpApiGroup.make("downloads")
  .add(
    HttpApiEndpoint.get("raw", "/emails/:id/raw")
      .setPath(IdPath)
      .setUrlParams(DownloadParams)
      .addSuccess(HttpApiSchema.Uint8Array({ contentType: "message/rfc822" }))
      .addError(Wire.Unauthorized)
      .addError(Wire.DownloadTokenExpired)
      .addError(Wire.DownloadTokenInvalid)
      .addError(Wire.NotFound)
      .annotate(OpenApi.Summary, "The raw MIME message (signed `token` or bearer auth)")
  )
  .add(
    HttpApiEndpoint.get("attachments", "/emails/:id/attachments.tar.gz")
      .setPath(IdPath)
      .setUrlParams(DownloadParams)
      .addSuccess(HttpApiSchema.Uint8Array({ contentType: "application/gzip" }))
      .addError(Wire.Unauthorized)
      .addError(Wire.DownloadTokenExpired)
      .addError(Wire.DownloadTokenInvalid)
      .addError(Wire.NotFound)
      .annotate(OpenApi.Summary, "Every attachment as a gzipped tar archive (signed `token` or bearer auth)")
  )
  .add(
    HttpApiEndpoint.get("attachment", "/emails/:id/attachments/:index")
      .setPath(allErrors(Schema.Struct({ id: Uuid, index: Schema.NumberFromString.pipe(Schema.int(), Schema.between(0, 9999)) })))
      .setUrlParams(DownloadParams)
      .addSuccess(HttpApiSchema.Uint8Array({ contentType: "application/octet-stream" }))
      .addError(Wire.Unauthorized)
      .addError(Wire.DownloadTokenExpired)
      .addError(Wire.DownloadTokenInvalid)
      .addError(Wire.NotFound)
      .annotate(OpenApi.Summary, "One attachment by index (signed `token` or bearer auth)")
  )
  .annotate(
    OpenApi.Description,
    "Downloads: pass the signed `token` of a download URL (24 h), or `Authorization: Bearer` without a token (never expires)"
  )
{}
