/**
 * The email event payload, one shape for HTTP endpoints and functions:
 * `{id: "evt_…", event, created_at, email: {…}}`. `id` is the event id, stable across retries and
 * replays, so the caller builds it once and stores the serialized body.
 */
import { Schema } from "effect"
import { randomToken } from "../platform/Secrets.js"
import { EmailEventSchema } from "./Events.js"
import type { Trust } from "../mail/Trust.js"

export const TEXT_LIMIT_BYTES = 256 * 1024

export interface EmailAuth {
  readonly spf: string
  readonly dkim: string
  readonly dmarc: string
}

export interface PayloadAttachment {
  readonly filename: string | null
  readonly content_type: string
  readonly size_bytes: number
  readonly download_url: string
}

/** A published registry entry the message's From address was verified as (DMARC, or DKIM aligned with its domain). */
export interface RegistrySender {
  readonly registry: string
  readonly handle: string
  readonly verified: true
}

export interface EmailPayload {
  readonly id: string
  /** The conversation the email belongs to (see Threads). */
  readonly thread_id: string
  /** The inbox (GET /inboxes) the email reached; null for a domain address. */
  readonly inbox_id: string | null
  readonly message_id: string | null
  readonly from: string
  /** Present only when the From address is verified as published registry entries: one object, or a list when several. */
  readonly sender?: RegistrySender | ReadonlyArray<RegistrySender>
  readonly to: ReadonlyArray<string>
  readonly recipient: string
  readonly subject: string
  readonly date: string | null
  readonly in_reply_to: string | null
  readonly references: ReadonlyArray<string>
  readonly text: string | null
  readonly html: string | null
  /** The new text without quoted history or signature (src/mail/ReplyText.ts). */
  readonly extracted_text: string | null
  readonly headers: Readonly<Record<string, string>>
  readonly size_bytes: number
  readonly spam_score: number | null
  readonly auth: EmailAuth
  /** The message says an automaton sent it (Auto-Submitted other than `no`, Precedence bulk/junk/list). */
  readonly auto_submitted: boolean
  /** Who is proven to have sent it and the content's trust signals, as judged when it arrived. */
  readonly trust: Trust
  readonly attachments: ReadonlyArray<PayloadAttachment>
  readonly raw_url: string
  readonly attachments_url: string
  readonly content_truncated: boolean
}

export interface EmailEvent {
  readonly id: string
  readonly event: string
  readonly created_at: string
  readonly email: EmailPayload
  /** `wake.command` only: the command, and whether the account's secret signed it. */
  readonly wake?: WakePayload
}

export interface WakePayload {
  /** The wake that fired (null for a command mailed by an allowed sender, or unsigned). */
  readonly id: string | null
  readonly type: string
  readonly payload: unknown
  readonly scheduled_for: string | null
  readonly fired_at: string
  /** A thread watch's firing: the thread that stayed silent (null otherwise). */
  readonly thread_id: string | null
  readonly sender: string
  /** True only when `Mailroom-Wake-Signature` verifies with the account's webhook secret. */
  readonly verified: boolean
}

export const newEventId = () => `evt_${randomToken(24)}`

/** Cuts a string to at most `limit` UTF-8 bytes without splitting a character. */
export const truncateUtf8 = (s: string, limit: number): { value: string; truncated: boolean } => {
  const bytes = Buffer.from(s, "utf8")
  if (bytes.length <= limit) return { value: s, truncated: false }
  let end = limit
  while (end > 0 && (bytes[end]! & 0xc0) === 0x80) end--
  return { value: bytes.subarray(0, end).toString("utf8"), truncated: true }
}

export type EmailInput = Omit<EmailPayload, "content_truncated" | "text" | "html"> & {
  readonly text: string | null
  readonly html: string | null
}

/** Builds the event, applying the 256 KiB cut to `text` and `html`. */
export const buildEmailEvent = (input: {
  readonly eventId: string
  readonly event: string
  readonly createdAt: Date
  readonly email: EmailInput
  readonly wake?: WakePayload
}): EmailEvent => {
  const text = input.email.text === null ? null : truncateUtf8(input.email.text, TEXT_LIMIT_BYTES)
  const html = input.email.html === null ? null : truncateUtf8(input.email.html, TEXT_LIMIT_BYTES)
  return {
    id: input.eventId,
    event: input.event,
    created_at: input.createdAt.toISOString(),
    email: {
      ...input.email,
      text: text?.value ?? null,
      html: html?.value ?? null,
      content_truncated: (text?.truncated ?? false) || (html?.truncated ?? false)
    },
    ...(input.wake !== undefined ? { wake: input.wake } : {})
  }
}

type Exact<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false
/** The payload built here and the published schema it is encoded with are one shape (a field added to one only fails to compile). */
const _emailEventIsExact: Exact<typeof EmailEventSchema.Type, EmailEvent> = true
void _emailEventIsExact

const encodeEmailEvent = Schema.encodeSync(EmailEventSchema)

/** The serialized body that is signed and sent (encoded with the published schema): the exact bytes matter for the signature. */
export const serializeEvent = (event: EmailEvent) => JSON.stringify(encodeEmailEvent(event))

/** A synthetic `email.received` for endpoint test sends; ids and URLs are recognisably fake. */
export const syntheticEmailReceived = (input: {
  readonly publicBaseUrl: string
  readonly recipient: string
  readonly now: Date
}): EmailEvent => {
  const emailId = "00000000-0000-4000-8000-000000000000"
  const body = "This is a test event sent by Mailroom to check your endpoint. No email was received."
  return buildEmailEvent({
    eventId: newEventId(),
    event: "email.received",
    createdAt: input.now,
    email: {
      id: emailId,
      thread_id: "00000000-0000-7000-8000-000000000000",
      inbox_id: null,
      message_id: `<test-${randomToken(12)}@mailroom.test>`,
      from: "Mailroom Test <test@mailroom.test>",
      to: [input.recipient],
      recipient: input.recipient,
      subject: "Mailroom test event",
      date: input.now.toISOString(),
      in_reply_to: null,
      references: [],
      text: body,
      html: `<p>${body}</p>`,
      extracted_text: body,
      headers: { "x-mailroom-test": "true" },
      size_bytes: 512,
      spam_score: 0,
      auth: { spf: "none", dkim: "none", dmarc: "none" },
      auto_submitted: false,
      trust: { sender_authenticated: false, sender_known: false, registry_verified: false, auto_submitted: false, signals: [] },
      attachments: [],
      raw_url: `${input.publicBaseUrl}/v1/emails/${emailId}/raw?token=test`,
      attachments_url: `${input.publicBaseUrl}/v1/emails/${emailId}/attachments.tar.gz?token=test`
    }
  })
}
