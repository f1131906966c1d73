/**
 * The demo sandbox's synthetic mailbox: one agent account, a few conversations and the webhook
 * deliveries they caused. Everything is derived from fixed text and a fixed seed, so the same request
 * answers the same bytes on every instance and every day; none of it is ever stored, and its
 * addresses live under reserved `.example` domains so nothing here can name a real organization.
 */
import { createHash } from "node:crypto"
import type { Account } from "../account/Api.js"
import { entitlementsOf, LIMITS } from "../contract/Plans.js"
import type { Email, EmailSummary } from "../emails/Api.js"
import { extractReplyText } from "../mail/ReplyText.js"
import type { WebhookDelivery } from "../deliveries/Api.js"
import type { ListedRow } from "../deliveries/Repo.js"
import type { SummaryRow } from "../emails/Repo.js"
import type { MessageRow } from "../threads/Repo.js"
import type { ThreadWatch } from "../wake/Api.js"

export const DEMO_SEED = "mailroom-demo-v1"
export const DEMO_INBOX = "agent@demo.example"
/** The demo's "now": when its sandbox send-mail says a message was sent. */
export const DEMO_NOW = new Date("2026-01-09T12:00:00.000Z")
export const DEMO_ENDPOINT_URL = "https://agent.demo.example/webhooks/mailroom"

/** A stable UUID (version 4 layout) for the n-th thing of a kind: the same on every call. */
export const demoId = (kind: string, n: number): string => {
  const h = createHash("sha256").update(`${DEMO_SEED}:${kind}:${n}`).digest("hex")
  const variant = ((parseInt(h[16]!, 16) & 0x3) | 0x8).toString(16)
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-${variant}${h.slice(17, 20)}-${h.slice(20, 32)}`
}

const at = (iso: string) => new Date(iso)

/** The demo mailbox's one inbox (GET /inboxes would list it). */
export const DEMO_INBOX_ID = demoId("inbox", 0)

export const demoAccount: Account = {
  id: demoId("account", 0),
  email: "owner@demo.example",
  plan: "developer",
  limits: LIMITS.developer,
  entitlements: [...entitlementsOf("developer")],
  managed_inbox_address: DEMO_INBOX,
  created_at: at("2026-01-05T08:00:00.000Z"),
  onboarding_completed: true,
  onboarding_step: null,
  billing_subscription_status: null,
  subscription_current_period_end: null,
  subscription_cancel_at_period_end: null,
  spam_threshold: 5,
  discard_content_on_webhook_confirmed: false,
  attachment_policy: null,
  webhook_secret_rotated_at: null,
  send_approval: "none"
}

/** One received message of the story, as written; the rest of its representation is derived. */
interface Letter {
  readonly from: string
  readonly fromName: string
  readonly subject: string
  readonly text: string
  readonly date: string
  /** Index of the letter it answers, if any. */
  readonly replyTo?: number
  readonly cc?: ReadonlyArray<string>
  readonly spam?: number
  readonly rejected?: boolean
}

const LETTERS: ReadonlyArray<Letter> = [
  {
    from: "maria@northwind.example",
    fromName: "Maria Chen",
    subject: "Invoice INV-2041 for January",
    text: "Hello,\n\nPlease find the January invoice INV-2041 for 1,240.00 EUR. Payment is due within 30 days.\n\nBest,\nMaria",
    date: "2026-01-05T09:12:00.000Z",
    spam: 0.4
  },
  {
    from: "maria@northwind.example",
    fromName: "Maria Chen",
    subject: "Re: Invoice INV-2041 for January",
    text: "Thanks for confirming. The purchase order number is PO-7781; we will add it to the invoice.\n\nMaria",
    date: "2026-01-05T11:40:00.000Z",
    replyTo: 0,
    spam: 0.2
  },
  {
    from: "sam@contoso.example",
    fromName: "Sam Okafor",
    subject: "Can we move Thursday's call?",
    text: "Hi! Something came up on Thursday. Could we meet on Friday at 15:00 UTC instead? The agenda stays the same.\n\nSam",
    date: "2026-01-06T14:03:00.000Z",
    cc: ["lee@contoso.example"],
    spam: 0.1
  },
  {
    from: "lee@contoso.example",
    fromName: "Lee Park",
    subject: "Re: Can we move Thursday's call?",
    text: "Friday works for me too. I will send the updated slides beforehand.\n\nLee",
    date: "2026-01-06T15:27:00.000Z",
    replyTo: 2,
    spam: 0.1
  },
  {
    from: "alerts@status.example",
    fromName: "Status Alerts",
    subject: "Resolved: elevated API latency in eu-west",
    text: "The incident that raised API latency in eu-west between 02:10 and 02:45 UTC is resolved. No data was lost.",
    date: "2026-01-07T03:01:00.000Z",
    spam: 1.2
  },
  {
    from: "winner@prizes.example",
    fromName: "Prize Department",
    subject: "You have won a lottery!!!",
    text: "Congratulations, claim your prize now by sending your bank details.",
    date: "2026-01-07T06:30:00.000Z",
    spam: 9.8,
    rejected: true
  },
  {
    from: "jobs@careers.example",
    fromName: "Careers Team",
    subject: "Your application for Support Engineer",
    text: "Thank you for applying. We would like to schedule a first interview next week; please reply with two time slots.",
    date: "2026-01-08T10:15:00.000Z",
    spam: 0.3
  },
  {
    from: "maria@northwind.example",
    fromName: "Maria Chen",
    subject: "Re: Invoice INV-2041 for January",
    text: "Payment received, thank you! A receipt is attached to our portal.\n\nMaria",
    date: "2026-01-09T08:05:00.000Z",
    replyTo: 1,
    spam: 0.2
  }
]

const messageIdOf = (i: number) => `<demo-${i}.${DEMO_SEED}@${LETTERS[i]!.from.split("@")[1]}>`

const referencesOf = (i: number): ReadonlyArray<string> => {
  const parent = LETTERS[i]!.replyTo
  return parent === undefined ? [] : [...referencesOf(parent), messageIdOf(parent)]
}

/** The thread a letter belongs to: the first letter of its chain. */
export const rootOf = (i: number): number => {
  const parent = LETTERS[i]!.replyTo
  return parent === undefined ? i : rootOf(parent)
}

export interface DemoEmail {
  readonly index: number
  readonly summary: EmailSummary
  readonly detail: (baseUrl: string) => Email
  readonly text: string
}

const emailOf = (letter: Letter, i: number): DemoEmail => {
  const id = demoId("email", i)
  const received = at(letter.date)
  const rejected = letter.rejected === true
  const summary: EmailSummary = {
    id,
    thread_id: demoId("thread", rootOf(i)),
    message_id: messageIdOf(i),
    event_type: "email.received",
    status: rejected ? "rejected" : "accepted",
    rejection_reason: rejected ? `spam score ${letter.spam} above the threshold 5` : null,
    from: letter.from,
    from_name: letter.fromName,
    envelope_from: letter.from,
    to: [DEMO_INBOX],
    cc: [...(letter.cc ?? [])],
    recipient: DEMO_INBOX,
    domain_id: null,
    inbox_id: DEMO_INBOX_ID,
    subject: letter.subject,
    date: received,
    size_bytes: 620 + letter.text.length + letter.subject.length,
    spam_score: letter.spam ?? null,
    auth: rejected ? { spf: "fail", dkim: "none", dmarc: "fail" } : { spf: "pass", dkim: "pass", dmarc: "pass" },
    auto_submitted: false,
    trust: { sender_authenticated: !rejected, sender_known: false, registry_verified: false, auto_submitted: false, signals: [] },
    attachment_count: 0,
    content_discarded: false,
    labels: [],
    read: false,
    received_at: received
  }
  const references = referencesOf(i)
  const headers: Record<string, string> = {
    from: `${letter.fromName} <${letter.from}>`,
    to: DEMO_INBOX,
    subject: letter.subject,
    date: received.toUTCString(),
    "message-id": messageIdOf(i),
    "content-type": "text/plain; charset=utf-8"
  }
  if (letter.cc !== undefined) headers["cc"] = letter.cc.join(", ")
  if (references.length > 0) {
    headers["in-reply-to"] = references[references.length - 1]!
    headers["references"] = references.join(" ")
  }
  return {
    index: i,
    summary,
    text: letter.text,
    detail: (baseUrl) => ({
      ...summary,
      in_reply_to: references.length > 0 ? references[references.length - 1]! : null,
      references: [...references],
      headers,
      text: letter.text,
      html: null,
      extracted_text: extractReplyText(letter.text, null),
      attachments: [],
      raw_url: `${baseUrl}/v1/demo/emails/${id}`,
      attachments_url: `${baseUrl}/v1/demo/emails/${id}`
    })
  }
}

/** Newest first, as the emails list answers. */
export const demoEmails: ReadonlyArray<DemoEmail> = LETTERS.map(emailOf).reverse()

/**
 * One delivery per accepted message to the demo endpoint; the status alert's first attempt met a
 * 503 and was retried, the newest is still waiting for its retry, so every status shows up.
 */
export const demoDeliveries: ReadonlyArray<WebhookDelivery> = demoEmails
  .filter((e) => e.summary.status === "accepted")
  .map((e) => {
    const i = e.index
    const created = e.summary.received_at
    const later = (ms: number) => new Date(created.getTime() + ms)
    const retried = LETTERS[i]!.from.startsWith("alerts@")
    const pending = i === LETTERS.length - 1
    return {
      id: demoId("delivery", i),
      email_id: e.summary.id,
      endpoint_id: demoId("endpoint", 0),
      endpoint_url: DEMO_ENDPOINT_URL,
      status: pending ? "pending" : "delivered",
      attempt_count: retried ? 2 : 1,
      duration_ms: 80 + ((i * 37) % 200),
      last_error: pending ? "HTTP 503 from the endpoint" : "",
      last_error_code: pending ? "http_503" : "",
      created_at: created,
      updated_at: later(retried ? 61_000 : 900),
      email: { sender: e.summary.from ?? "", recipient: DEMO_INBOX, subject: e.summary.subject ?? "" },
      event_id: `evt_${demoId("event", i).replace(/-/g, "").slice(0, 24)}`,
      event_type: "email.received",
      next_attempt_at: pending ? later(60_000) : null,
      replay_of: null
    } satisfies WebhookDelivery
  })

/** The demo's emails as the emails area's list reads its rows (`toSummary` gives back each summary). */
export const demoSummaryRows: ReadonlyArray<SummaryRow> = demoEmails.map(({ summary: s }) => ({
  id: s.id,
  thread_id: s.thread_id,
  domain_id: s.domain_id,
  inbox_id: s.inbox_id,
  recipient: s.recipient,
  envelope_from: s.envelope_from,
  from_address: s.from,
  from_name: s.from_name,
  to_addresses: [...s.to],
  cc_addresses: [...s.cc],
  subject: s.subject,
  message_id: s.message_id,
  sent_at: s.date,
  attachments: [],
  size_bytes: s.size_bytes,
  spam_score: s.spam_score === null ? null : String(s.spam_score),
  auth: s.auth,
  trust: s.trust,
  auto_submitted: s.auto_submitted,
  event_type: s.event_type,
  status: s.status,
  rejection_reason: s.rejection_reason,
  content_discarded_at: null,
  labels: [...s.labels],
  read: s.read,
  received_at: s.received_at
}))

/** The demo's deliveries as the deliveries area's list reads its rows (all to the one http endpoint). */
export const demoListedDeliveries: ReadonlyArray<ListedRow> = demoDeliveries.map((d) => ({
  id: d.id,
  email_id: d.email_id,
  endpoint_id: d.endpoint_id,
  event_id: d.event_id,
  event_type: d.event_type,
  replay_of: d.replay_of,
  status: d.status,
  attempt_count: d.attempt_count,
  // The column is never null; a listing shows it only while a delivery is pending.
  next_attempt_at: d.next_attempt_at ?? d.updated_at,
  duration_ms: d.duration_ms,
  last_error: d.last_error,
  last_error_code: d.last_error_code,
  email_sender: d.email.sender,
  email_recipient: d.email.recipient,
  email_subject: d.email.subject,
  created_at: d.created_at,
  updated_at: d.updated_at,
  endpoint_kind: "http",
  endpoint_url: d.endpoint_url,
  function_id: null
}))

export const demoEmailById = (id: string) => demoEmails.find((e) => e.summary.id === id)

/** The demo's conversations: its accepted mail grouped by thread, as the threads area reads them. */
export interface DemoThread {
  readonly id: string
  readonly messages: ReadonlyArray<MessageRow>
  readonly watches: ReadonlyArray<ThreadWatch>
}

const messageRowOf = (e: DemoEmail): MessageRow => ({
  thread_id: e.summary.thread_id,
  direction: "received",
  id: e.summary.id,
  at: e.summary.received_at,
  from_address: e.summary.from,
  to_addresses: e.summary.to,
  cc_addresses: e.summary.cc,
  subject: e.summary.subject,
  message_id: e.summary.message_id,
    inbox_id: e.summary.inbox_id,
    body: e.text,
    labels: e.summary.labels,
    read: e.summary.read
})

/** The job application waits for an answer: a watch wakes the agent's triage function after 48 hours of silence. */
const watchOf = (threadId: string, created: Date): ThreadWatch => ({
  id: demoId("wake", 0),
  thread_id: threadId,
  function_id: demoId("function", 0),
  command: { type: "follow_up", payload: { reason: "no answer yet" } },
  within: "48h",
  due_at: new Date(created.getTime() + 48 * 3_600_000),
  status: "fired",
  canceled_reason: null,
  created_at: created
})

export const demoThreads: ReadonlyArray<DemoThread> = (() => {
  const byThread = new Map<string, Array<MessageRow>>()
  for (const e of [...demoEmails].reverse()) {
    if (e.summary.status !== "accepted") continue
    const list = byThread.get(e.summary.thread_id) ?? []
    list.push(messageRowOf(e))
    byThread.set(e.summary.thread_id, list)
  }
  return [...byThread.entries()].map(([id, messages]) => ({
    id,
    messages,
    watches: messages[0]!.from_address === "jobs@careers.example" ? [watchOf(id, new Date(messages[0]!.at.getTime() + 600_000))] : []
  }))
})()
