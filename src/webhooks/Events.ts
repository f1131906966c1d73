/**
 * The schemas of every event payload: the sender encodes each payload with its event's schema
 * (`serializeEvent`, `OrgEvents.emit`), and the OpenAPI document's `webhooks` section and the event
 * stream's documentation are generated from these same schemas.
 */
import { JSONSchema, Schema, SchemaAST } from "effect"
import { TrustSchema } from "../mail/Trust.js"

const jsonId = (id: string) => ({ [SchemaAST.JSONIdentifierAnnotationId]: id })

/** Header name → value, kept as received (`Schema.Record` would drop a header named `__proto__`). */
const Headers = Schema.declare(
  (u: unknown): u is { readonly [name: string]: string } =>
    typeof u === "object" && u !== null && !Array.isArray(u) && Object.values(u).every((v) => typeof v === "string"),
  {
    description: "lower-cased header name → unfolded value; repeated headers joined with a newline",
    jsonSchema: { type: "object", additionalProperties: { type: "string" } }
  }
)

const DateTime = Schema.String.annotations({ description: "ISO 8601 date-time" })

export const RegistrySenderSchema = Schema.Struct({
  registry: Schema.String,
  handle: Schema.String,
  verified: Schema.Literal(true)
}).annotations({ ...jsonId("EventRegistrySender"), description: "a published registry entry the From address is verified as" })

export const EmailPayloadSchema = Schema.Struct({
  id: Schema.String.annotations({ description: "the email's id (GET /v1/emails/{id})" }),
  thread_id: Schema.String.annotations({ description: "the conversation it belongs to (GET /v1/threads/{id})" }),
  inbox_id: Schema.NullOr(Schema.String).annotations({ description: "the inbox (GET /v1/inboxes/{id}) it reached; null for a domain address" }),
  message_id: Schema.NullOr(Schema.String),
  from: Schema.String.annotations({ description: "`Name <address>` or the address" }),
  sender: Schema.optionalWith(Schema.Union(RegistrySenderSchema, Schema.Array(RegistrySenderSchema)), { exact: true }).annotations({
    description: "present only when the From address is verified as published registry entries: one object, or a list for several"
  }),
  to: Schema.Array(Schema.String),
  recipient: Schema.String.annotations({ description: "the address this copy was received at" }),
  subject: Schema.String,
  date: Schema.NullOr(DateTime),
  in_reply_to: Schema.NullOr(Schema.String),
  references: Schema.Array(Schema.String),
  text: Schema.NullOr(Schema.String).annotations({ description: "up to 256 KiB (then cut, `content_truncated` true)" }),
  html: Schema.NullOr(Schema.String).annotations({ description: "up to 256 KiB (then cut, `content_truncated` true)" }),
  extracted_text: Schema.NullOr(Schema.String).annotations({
    description: "the new text of the message without quoted history or signature (from the text part, else the HTML); null without a body"
  }),
  headers: Headers,
  size_bytes: Schema.Int,
  spam_score: Schema.NullOr(Schema.Number),
  auth: Schema.Struct({ spf: Schema.String, dkim: Schema.String, dmarc: Schema.String }),
  auto_submitted: Schema.Boolean.annotations({
    description: "the message says an automaton sent it (Auto-Submitted other than `no`, or Precedence bulk, junk or list): do not answer it"
  }),
  trust: TrustSchema,
  attachments: Schema.Array(Schema.Struct({
    filename: Schema.NullOr(Schema.String),
    content_type: Schema.String,
    size_bytes: Schema.Int,
    download_url: Schema.String.annotations({ description: "signed, valid 24 hours" })
  })),
  raw_url: Schema.String.annotations({ description: "the raw MIME message; signed, valid 24 hours" }),
  attachments_url: Schema.String.annotations({ description: "every attachment as a .tar.gz; signed, valid 24 hours" }),
  content_truncated: Schema.Boolean
}).annotations({ ...jsonId("EventEmail"), description: "the email an event reports" })

export const WakePayloadSchema = Schema.Struct({
  id: Schema.NullOr(Schema.String).annotations({ description: "the wake that fired; null for a command mailed by an allowed sender, or unsigned" }),
  type: Schema.String,
  payload: Schema.Unknown,
  scheduled_for: Schema.NullOr(DateTime),
  fired_at: DateTime,
  thread_id: Schema.NullOr(Schema.String).annotations({ description: "a thread watch's firing: the thread that stayed silent" }),
  sender: Schema.String.annotations({ description: "who is proven to have sent it: the authenticated From, else the envelope sender" }),
  verified: Schema.Boolean.annotations({
    description: "true only when Mailroom-Wake-Signature verifies with the account's webhook secret over a command naming this function"
  })
}).annotations({ ...jsonId("EventWake"), description: "the command of a wake.command" })

const base = {
  id: Schema.String.annotations({ description: "the event id (`evt_…`), stable across retries and replays; the SSE `id:`" }),
  event: Schema.String.annotations({ description: "the event type" }),
  created_at: DateTime
}

export const EmailEventSchema = Schema.Struct({
  ...base,
  email: EmailPayloadSchema,
  wake: Schema.optionalWith(WakePayloadSchema, { exact: true }).annotations({ description: "`wake.command` only" })
}).annotations({ ...jsonId("EmailEvent"), description: "an event about one stored email" })

export const PaymentEventSchema = Schema.Struct({
  ...base,
  payment: Schema.Struct({
    id: Schema.String,
    challenge_id: Schema.String,
    direction: Schema.Literal("in", "out").annotations({ description: "in: this organization was paid; out: it paid" }),
    rail: Schema.Literal("http", "email"),
    status: Schema.Literal("settling", "settled", "failed"),
    amount: Schema.String.annotations({ description: "decimal string, in the asset's units (USDC)" }),
    asset: Schema.String,
    network: Schema.String.annotations({ description: "CAIP-2, e.g. eip155:84532" }),
    payer_address: Schema.NullOr(Schema.String),
    pay_to: Schema.String,
    transaction: Schema.optionalWith(Schema.NullOr(Schema.String), { exact: true }).annotations({ description: "settled only" }),
    settled_at: Schema.optionalWith(Schema.NullOr(DateTime), { exact: true }).annotations({ description: "settled only" }),
    failure_category: Schema.optionalWith(Schema.NullOr(Schema.Literal("declined", "cap", "verification", "settlement")), { exact: true })
      .annotations({ description: "failed only" }),
    reasons: Schema.optionalWith(Schema.Array(Schema.String), { exact: true }).annotations({ description: "failed only: every failing subreason" }),
    code: Schema.optionalWith(Schema.NullOr(Schema.String), { exact: true }).annotations({ description: "failed only: the error code the payer got" }),
    message: Schema.optionalWith(Schema.NullOr(Schema.String), { exact: true }).annotations({ description: "failed only" }),
    retryable: Schema.optionalWith(Schema.Boolean, { exact: true }).annotations({ description: "payment.failed only: a retry may succeed" })
  }).annotations(jsonId("EventPayment"))
}).annotations({ ...jsonId("PaymentEvent"), description: "an x402 payment's outcome" })

export const LoopEventSchema = Schema.Struct({
  ...base,
  loop: Schema.Struct({
    rule: Schema.Literal("thread_hourly", "counterpart_in_a_row").annotations({
      description: "thread_hourly: more than `limit` automated sends to the thread in an hour; counterpart_in_a_row: more than " +
        "`limit` in a row to `counterpart` without a message from a person in between"
    }),
    thread_id: Schema.String,
    function_id: Schema.String.annotations({ description: "the function whose send was refused" }),
    limit: Schema.Int,
    window_seconds: Schema.NullOr(Schema.Int).annotations({ description: "thread_hourly: 3600; null for counterpart_in_a_row" }),
    retry_after: Schema.NullOr(Schema.Int).annotations({
      description: "seconds until the thread's hourly budget has room; null for counterpart_in_a_row (a person's message lifts it)"
    }),
    counterpart: Schema.NullOr(Schema.String).annotations({ description: "counterpart_in_a_row: the address written to in a row" }),
    from: Schema.String,
    to: Schema.Array(Schema.String).annotations({ description: "every recipient of the refused send (to, cc, bcc)" }),
    subject: Schema.String
  }).annotations(jsonId("EventLoop"))
}).annotations({ ...jsonId("LoopEvent"), description: "an automated send the loop guard refused" })

export const SentEmailSummarySchema = Schema.Struct({
  id: Schema.String.annotations({ description: "the sent email's id (GET /v1/sent-emails/{id})" }),
  status: Schema.String.annotations({ description: "its status after this event: sent, bounced, complained, scheduled, …" }),
  from: Schema.String,
  to: Schema.Array(Schema.String),
  cc: Schema.Array(Schema.String),
  bcc: Schema.Array(Schema.String),
  subject: Schema.String,
  message_id: Schema.String,
  thread_id: Schema.NullOr(Schema.String),
  sent_at: Schema.NullOr(DateTime)
}).annotations({ ...jsonId("EventSentEmail"), description: "the sent email an outbound event reports" })

export const BounceSchema = Schema.Struct({
  type: Schema.Literal("hard", "soft", "complaint").annotations({
    description: "hard: a permanent failure (Action: failed with a 5.x.x status), the address is suppressed; soft: " +
      "Action: failed with a 4.x.x status; complaint: an ARF abuse report, the address is suppressed"
  }),
  status: Schema.NullOr(Schema.String).annotations({ description: "the DSN's enhanced status code (5.1.1); an ARF report's Feedback-Type (abuse)" }),
  diagnostic: Schema.NullOr(Schema.String).annotations({ description: "the DSN's Diagnostic-Code; an ARF report's User-Agent" }),
  received_at: DateTime
}).annotations({ ...jsonId("EventBounce"), description: "what came back to the send's return path" })

export const DelaySchema = Schema.Struct({
  source: Schema.Literal("relay", "dsn").annotations({
    description: "relay: the outbound relay answered a temporary failure and the send is retried at `retry_at`; dsn: a DSN with Action: delayed"
  }),
  status: Schema.NullOr(Schema.String).annotations({ description: "the SMTP reply code (relay) or enhanced status code (dsn)" }),
  diagnostic: Schema.NullOr(Schema.String),
  retry_at: Schema.NullOr(DateTime).annotations({ description: "relay only: when the send is tried again" })
}).annotations({ ...jsonId("EventDelay"), description: "why a sent email is not delivered yet" })

export const SentEmailEventSchema = Schema.Struct({
  ...base,
  sent_email: SentEmailSummarySchema,
  recipient: Schema.NullOr(Schema.String).annotations({ description: "the recipient the report is about (null for email.sent and when the report names none)" }),
  relay_response: Schema.optionalWith(Schema.NullOr(Schema.String), { exact: true }).annotations({ description: "email.sent only: the relay's final reply" }),
  bounce: Schema.optionalWith(BounceSchema, { exact: true }).annotations({ description: "email.bounced and email.complained" }),
  delay: Schema.optionalWith(DelaySchema, { exact: true }).annotations({ description: "email.delivery_delayed only" })
}).annotations({ ...jsonId("SentEmailEvent"), description: "an event about one sent email: accepted by the relay, delayed, bounced or complained about" })

/** email.bounced: a DSN matched to a sent email by its return path, or (with `email`) a bounce mailed to one of the organization's addresses. */
export const BounceEventSchema = Schema.Union(SentEmailEventSchema, EmailEventSchema).annotations({
  ...jsonId("BounceEvent"),
  description: "with `sent_email`: a DSN received at a sent email's return path; with `email`: a bounce received at one of the organization's addresses"
})
export const DraftEventSchema = Schema.Struct({
  ...base,
  draft: Schema.Struct({
    id: Schema.String.annotations({ description: "GET /v1/drafts/{id}; approve with POST /v1/drafts/{id}/approve" }),
    status: Schema.Literal("pending_approval"),
    kind: Schema.Literal("send", "reply", "forward"),
    reason: Schema.Literal("all", "new_recipients"),
    new_recipients: Schema.Array(Schema.String),
    from: Schema.String,
    to: Schema.Array(Schema.String),
    cc: Schema.Array(Schema.String),
    bcc: Schema.Array(Schema.String),
    subject: Schema.String,
    created_at: DateTime,
    expires_at: DateTime
  }).annotations(jsonId("EventDraft"))
}).annotations({ ...jsonId("DraftEvent"), description: "a send held for approval" })

export interface EventDoc {
  readonly type: string
  readonly schema: Schema.Schema<any, any>
  readonly summary: string
  readonly description: string
}

const OUTBOUND_NOTE = " Sent to endpoints that list the type in `event_types` and the organization-wide endpoint (and to the organization's event stream)."
const EMAIL_NOTE = " Sent to the endpoint the mail is routed to (and to the organization's event stream)."

/** Every event the service emits, with the schema its payload is encoded with. */
export const EVENTS: ReadonlyArray<EventDoc> = [
  { type: "email.received", schema: EmailEventSchema, summary: "An email was received", description: "Mail accepted for one of the organization's addresses (one event per distinct recipient)." + EMAIL_NOTE },
  { type: "email.bounced", schema: BounceEventSchema, summary: "A bounce (delivery status notification) was received", description: "A DSN (RFC 3464, Action: failed) received at a sent email's VERP return path, with `sent_email`, `recipient` and `bounce`: the sent email becomes `bounced` and a hard bounce (5.x.x) suppresses the recipient. Or, with `email`, a DSN or failure notice mailed to one of the organization's own addresses (RFC 3464 and the common non-standard forms)." + EMAIL_NOTE },
  { type: "email.complained", schema: SentEmailEventSchema, summary: "A recipient reported a sent email as abuse", description: "An ARF report (RFC 5965) received at a sent email's VERP return path: the sent email becomes `complained` and the recipient is suppressed." + OUTBOUND_NOTE },
  { type: "email.sent", schema: SentEmailEventSchema, summary: "The outbound relay accepted a sent email", description: "The relay (or the dev outbox) took the message; `relay_response` is its reply." + OUTBOUND_NOTE },
  { type: "email.delivery_delayed", schema: SentEmailEventSchema, summary: "A sent email is delayed", description: "The relay answered a temporary failure for a scheduled send that is tried again (`delay.source: relay`), or a DSN with Action: delayed came back (`delay.source: dsn`)." + OUTBOUND_NOTE },
  { type: "email.tls_report", schema: EmailEventSchema, summary: "An SMTP TLS report was received", description: "An RFC 8460 TLS-RPT report mailed to the organization." + EMAIL_NOTE },
  { type: "email.dmarc_report", schema: EmailEventSchema, summary: "A DMARC aggregate report was received", description: "An RFC 7489 aggregate (rua) report." + EMAIL_NOTE },
  { type: "email.dmarc_failure", schema: EmailEventSchema, summary: "A DMARC failure report was received", description: "An RFC 6591 failure (ruf) report." + EMAIL_NOTE },
  { type: "wake.command", schema: EmailEventSchema, summary: "A wake fired, or an allowed sender mailed a command", description: "Delivered to the function the wake targets, with `wake` set; the email is the wake message." },
  { type: "send.loop_detected", schema: LoopEventSchema, summary: "An automated send was refused as a likely mail loop", description: "A function's send (through its MAILROOM binding) was answered 429 `loop_detected`: more than 10 automated sends to one thread in an hour, or more than 5 in a row to one counterpart without a message from a person in between. Sent to endpoints that list the type in `event_types` and the organization-wide endpoint (never to a function's route)." },
  { type: "draft.created", schema: DraftEventSchema, summary: "A send is waiting for approval", description: "The account's send_approval held a send (POST /send-mail, reply or forward answered 202 with this draft); a person approves or rejects it within 7 days." },
  { type: "payment.failed", schema: PaymentEventSchema, summary: "A payment failed", description: "Sent to the payer (HTTP rail) or the payee (email rail) organization's endpoints that receive it: every failure (declined by policy, cap, verification, settlement) with `failure_category` and `reasons`." },
  { type: "payment.settled", schema: PaymentEventSchema, summary: "A payment settled", description: "Sent to the organizations the settlement concerns, with the transaction hash." }
]

const byType = new Map(EVENTS.map((e) => [e.type, e]))

/** The schema an event type's payload is encoded with (undefined for a type not documented here). */
export const schemaOf = (type: string): Schema.Schema<any, any> | undefined => byType.get(type)?.schema

/** `webhooks` and the component schemas for an OpenAPI 3.1 document. */
export const webhooksSection = () => {
  const defs: Record<string, JSONSchema.JsonSchema7> = {}
  const refs = new Map<Schema.Schema<any, any>, unknown>()
  for (const e of EVENTS) {
    if (!refs.has(e.schema)) {
      refs.set(e.schema, JSONSchema.fromAST(e.schema.ast, { definitions: defs, definitionPath: "#/components/schemas/", target: "openApi3.1" }))
    }
  }
  const webhooks: Record<string, unknown> = {}
  for (const e of EVENTS) {
    webhooks[e.type] = {
      post: {
        summary: e.summary,
        description: `${e.description} Signed with \`Mailroom-Signature: t=<unix>,v1=<hex>\` (HMAC-SHA256 of \`t.<body>\` with the ` +
          "account's webhook secret); also streamed by `GET /v1/events` with this body as `data:`.",
        operationId: `event_${e.type.replace(/\./g, "_")}`,
        requestBody: {
          required: true,
          content: { "application/json": { schema: { allOf: [refs.get(e.schema), { type: "object", properties: { event: { const: e.type } } }] } } }
        },
        responses: {
          "200": { description: "Any 2xx marks the delivery `delivered` (`header_confirmed` with a `Mailroom-Confirmed` header); 410 stops retries; anything else is retried on the delivery schedule." }
        }
      }
    }
  }
  return { webhooks, schemas: defs }
}
