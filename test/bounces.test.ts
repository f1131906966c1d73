/**
 * Outbound outcomes end to end over real SMTP: every relayed send carries a VERP return path; a DSN
 * (RFC 3464) or an ARF complaint (RFC 5965) mailed back to it marks the sent email `bounced` or
 * `complained`, emits `email.bounced` / `email.complained` and suppresses the recipient, so sends to
 * it answer 422 `recipient_suppressed` until the suppression is deleted. Forged return paths match
 * nothing; a message there that is not a report is kept as ordinary mail.
 */
import { describe, expect, layer } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import nodemailer from "nodemailer"
import { Provisioning } from "../src/identity/Provisioning.js"
import { TestServer, testService } from "./support/harness.js"
import { eventually } from "./support/hooks.js"
import { call } from "./support/http.js"
import { type Receiver, startReceiver } from "./support/receiver.js"
import { startTestRelay, type TestRelay } from "./support/relay.js"
import { arf, crlf, dsn } from "./support/reports.js"

class Relay extends Context.Tag("test/Relay")<Relay, TestRelay>() {}

const Env = Provisioning.Default.pipe(
  Layer.provideMerge(Layer.unwrapScoped(Effect.map(startTestRelay, (relay) =>
    testService({ OUTBOUND_SMTP_URL: relay.url, OUTBOUND_TIMEOUT: "2s", DELIVERY_RETRY_DELAYS: "200ms" })
      .pipe(Layer.merge(Layer.succeed(Relay, relay))))))
)

let seq = 0
const unique = (label: string) => `${label}-${++seq}-${Math.random().toString(36).slice(2, 7)}`

interface Org {
  readonly orgId: string
  readonly token: string
  readonly inbox: string
  readonly receiver: Receiver
}

/** An organization with an organization-wide endpoint that records every event. */
const newOrg = Effect.gen(function*() {
  const p = yield* Provisioning
  const org = yield* p.createOrganization({ name: "Bouncer", plan: "developer" })
  const key = yield* p.issueApiKey(org.id)
  const receiver = yield* startReceiver
  const ep = yield* call("POST", "/v1/endpoints", { token: key.apiKey, body: { url: receiver.url("/events") } })
  expect(ep.status, ep.text).toBe(201)
  return { orgId: org.id, token: key.apiKey, inbox: org.managedInboxAddress!, receiver } satisfies Org
})

const send = (org: Org, body: Record<string, unknown>) => call("POST", "/v1/send-mail", { token: org.token, body: { from: org.inbox, subject: unique("Hello"), text: "hi", ...body } })

/** Sends one message and answers the sent email with the return path the relay saw. */
const sendOne = (org: Org, to: string, display?: string) =>
  Effect.gen(function*() {
    const r = yield* send(org, { to: display === undefined ? to : `${display} <${to}>` })
    expect(r.status, r.text).toBe(201)
    const relay = yield* Relay
    const seen = relay.messages.find((m) => m.to.includes(to))
    expect(seen).toBeDefined()
    return { id: r.body.data.id as string, messageId: r.body.data.message_id as string, returnPath: seen!.from }
  })

/** Mail into the service over SMTP; answers the server's final reply, or the error it refused with. */
const smtp = (envelopeFrom: string, to: string, raw: string) =>
  Effect.flatMap(TestServer, (server) =>
    Effect.promise(async () => {
      const t = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
      try {
        const info = await t.sendMail({ envelope: { from: envelopeFrom, to: [to] }, raw })
        return { ok: true as const, response: String(info.response) }
      } catch (e) {
        return { ok: false as const, response: String((e as { response?: string }).response ?? e), code: (e as { responseCode?: number }).responseCode }
      } finally {
        t.close()
      }
    }))

const eventsOf = (org: Org, type: string) => org.receiver.received.map((r) => JSON.parse(r.body)).filter((b) => b.event === type)

const sentEmail = (org: Org, id: string) =>
  Effect.map(call("GET", `/v1/sent-emails/${id}`, { token: org.token }), (r) => {
    expect(r.status, r.text).toBe(200)
    return r.body.data
  })

layer(Env, { timeout: 180_000, excludeTestServices: true })("bounces and complaints", (it) => {
  describe("the return path", () => {
    it.scoped("is a signed VERP address on the managed domain, different per message, and email.sent reports the relay's answer", () =>
      Effect.gen(function*() {
        const org = yield* newOrg
        const a = yield* sendOne(org, `${unique("a")}@example.com`)
        const b = yield* sendOne(org, `${unique("b")}@example.com`)
        const domain = org.inbox.slice(org.inbox.indexOf("@") + 1)
        expect(a.returnPath).toMatch(new RegExp(`^bounces\\+[0-9a-f]{48}@${domain.replace(/\./g, "\\.")}$`))
        expect(a.returnPath).not.toBe(b.returnPath)
        expect(a.returnPath).toContain(a.id.replace(/-/g, ""))
        const sent = yield* eventually(() => eventsOf(org, "email.sent").find((e) => e.sent_email.id === a.id), 15_000, "email.sent")
        expect(sent).toMatchObject({ sent_email: { id: a.id, status: "sent", message_id: a.messageId }, recipient: null })
        expect(sent.relay_response).toMatch(/^250/)
        expect(sent.id).toMatch(/^evt_/)
      }))
  })

  describe("a temporary relay failure", () => {
    it.scoped("of a scheduled send emits email.delivery_delayed with the retry time, then email.sent", () =>
      Effect.gen(function*() {
        const org = yield* newOrg
        const relay = yield* Relay
        const rcpt = `${unique("later")}@example.com`
        relay.script.push({ stage: "data", action: "451 4.3.0 try again later" })
        const r = yield* send(org, { to: rcpt, send_at: new Date(Date.now() + 800).toISOString() })
        expect(r.status, r.text).toBe(201)
        const delayed = yield* eventually(() => eventsOf(org, "email.delivery_delayed")[0], 20_000, "email.delivery_delayed")
        expect(delayed).toMatchObject({ sent_email: { id: r.body.data.id }, delay: { source: "relay", status: "451" } })
        expect(Number.isNaN(Date.parse(delayed.delay.retry_at))).toBe(false)
        const sent = yield* eventually(() => eventsOf(org, "email.sent").find((e) => e.sent_email.id === r.body.data.id), 20_000, "email.sent")
        expect(sent.sent_email.status).toBe("sent")
      }))
  })

  describe("a DSN", () => {
    it.scoped("with Action: failed and 5.1.1 bounces the sent email, emits email.bounced and suppresses the recipient until deleted", () =>
      Effect.gen(function*() {
        const org = yield* newOrg
        const rcpt = `${unique("gone")}@example.com`
        const sent = yield* sendOne(org, rcpt, "Gone Person")
        const reply = yield* smtp("", sent.returnPath, dsn({
          to: sent.returnPath, recipient: rcpt, action: "failed", status: "5.1.1", diagnostic: "550 5.1.1 User unknown", messageId: sent.messageId
        }))
        expect(reply.ok, reply.response).toBe(true)
        const row = yield* sentEmail(org, sent.id)
        expect(row.status).toBe("bounced")
        expect(row.bounce).toMatchObject({ type: "hard", status: "5.1.1", diagnostic: "550 5.1.1 User unknown", recipient: rcpt })
        expect(Date.parse(row.bounce.received_at)).toBeGreaterThan(Date.now() - 60_000)
        const listed = yield* call("GET", "/v1/sent-emails?status=bounced", { token: org.token })
        expect(listed.body.data.map((s: { id: string }) => s.id)).toEqual([sent.id])

        const event = yield* eventually(() => eventsOf(org, "email.bounced")[0], 15_000, "email.bounced")
        expect(event).toMatchObject({
          sent_email: { id: sent.id, status: "bounced", message_id: sent.messageId },
          recipient: rcpt,
          bounce: { type: "hard", status: "5.1.1", diagnostic: "550 5.1.1 User unknown" }
        })

        const suppressions = yield* call("GET", "/v1/suppressions", { token: org.token })
        expect(suppressions.status).toBe(200)
        expect(suppressions.body.meta.total).toBe(1)
        expect(suppressions.body.data[0]).toMatchObject({ address: rcpt, reason: "hard_bounce", sent_email_id: sent.id, status: "5.1.1" })

        // Every send path refuses the address, naming it; nothing is sent or recorded.
        const relay = yield* Relay
        const before = relay.messages.length
        const again = yield* send(org, { to: [`someone-else-${unique("x")}@example.com`, rcpt.toUpperCase()] })
        expect(again.status, again.text).toBe(422)
        expect(again.body.error.code).toBe("recipient_suppressed")
        expect(again.body.error.details.addresses).toEqual([rcpt])
        const scheduled = yield* send(org, { cc: rcpt, to: "other@example.com", send_at: new Date(Date.now() + 3_600_000).toISOString() })
        expect(scheduled.status).toBe(422)
        expect(scheduled.body.error.code).toBe("recipient_suppressed")
        // A reply to mail from the suppressed address.
        const inbound = yield* smtp(rcpt, org.inbox, crlf([`From: ${rcpt}`, `To: ${org.inbox}`, "Subject: ping", "Message-ID: <ping-1@example.com>", "", "ping"]))
        expect(inbound.ok, inbound.response).toBe(true)
        const emailId = /queued as ([0-9a-f-]{36})/.exec(inbound.response)![1]!
        const replied = yield* call("POST", `/v1/emails/${emailId}/reply`, { token: org.token, body: { text: "pong" } })
        expect(replied.status, replied.text).toBe(422)
        expect(replied.body.error.code).toBe("recipient_suppressed")
        const forwarded = yield* call("POST", `/v1/emails/${emailId}/forward`, { token: org.token, body: { to: rcpt } })
        expect(forwarded.status, forwarded.text).toBe(422)
        expect(forwarded.body.error.code).toBe("recipient_suppressed")
        expect(relay.messages.length).toBe(before)

        // Deleted: mail goes out again; deleting twice is 404.
        const removed = yield* call("DELETE", `/v1/suppressions/${encodeURIComponent(rcpt.toUpperCase())}`, { token: org.token })
        expect(removed.status, removed.text).toBe(200)
        expect(removed.body.data).toMatchObject({ address: rcpt, reason: "hard_bounce" })
        const missing = yield* call("DELETE", `/v1/suppressions/${encodeURIComponent(rcpt)}`, { token: org.token })
        expect(missing.status).toBe(404)
        expect(missing.body.error.code).toBe("not_found")
        expect((yield* call("GET", "/v1/suppressions", { token: org.token })).body.meta.total).toBe(0)
        const works = yield* send(org, { to: rcpt })
        expect(works.status, works.text).toBe(201)
        expect(works.body.data.status).toBe("sent")
      }))

    it.scoped("with Action: delayed emits email.delivery_delayed and changes nothing else", () =>
      Effect.gen(function*() {
        const org = yield* newOrg
        const rcpt = `${unique("slow")}@example.com`
        const sent = yield* sendOne(org, rcpt)
        const reply = yield* smtp("", sent.returnPath, dsn({
          to: sent.returnPath, recipient: rcpt, action: "delayed", status: "4.4.7", diagnostic: "421 4.4.7 try later", messageId: sent.messageId
        }))
        expect(reply.ok, reply.response).toBe(true)
        const event = yield* eventually(() => eventsOf(org, "email.delivery_delayed")[0], 15_000, "email.delivery_delayed")
        expect(event).toMatchObject({
          sent_email: { id: sent.id, status: "sent" },
          recipient: rcpt,
          delay: { source: "dsn", status: "4.4.7", diagnostic: "421 4.4.7 try later", retry_at: null }
        })
        expect((yield* sentEmail(org, sent.id)).status).toBe("sent")
        expect((yield* call("GET", "/v1/suppressions", { token: org.token })).body.meta.total).toBe(0)
      }))

    it.scoped("with a 4.x.x failure is a soft bounce: bounced, not suppressed", () =>
      Effect.gen(function*() {
        const org = yield* newOrg
        const rcpt = `${unique("full")}@example.com`
        const sent = yield* sendOne(org, rcpt)
        yield* smtp("", sent.returnPath, dsn({
          to: sent.returnPath, recipient: rcpt, action: "failed", status: "4.2.2", diagnostic: "452 4.2.2 mailbox full", messageId: sent.messageId
        }))
        const row = yield* sentEmail(org, sent.id)
        expect(row.status).toBe("bounced")
        expect(row.bounce).toMatchObject({ type: "soft", status: "4.2.2" })
        expect((yield* call("GET", "/v1/suppressions", { token: org.token })).body.meta.total).toBe(0)
        expect((yield* send(org, { to: rcpt })).status).toBe(201)
      }))

    it.scoped("naming an address the message was not sent to suppresses no one", () =>
      Effect.gen(function*() {
        const org = yield* newOrg
        const rcpt = `${unique("real")}@example.com`
        const sent = yield* sendOne(org, rcpt)
        const other = `${unique("victim")}@example.com`
        yield* smtp("", sent.returnPath, dsn({
          to: sent.returnPath, recipient: other, action: "failed", status: "5.1.1", diagnostic: "550 no", messageId: sent.messageId
        }))
        expect((yield* sentEmail(org, sent.id)).bounce).toMatchObject({ recipient: null })
        expect((yield* call("GET", "/v1/suppressions", { token: org.token })).body.meta.total).toBe(0)
      }))
  })

  describe("an ARF complaint", () => {
    it.scoped("marks the sent email complained, emits email.complained and suppresses the recipient", () =>
      Effect.gen(function*() {
        const org = yield* newOrg
        const rcpt = `${unique("angry")}@example.com`
        const sent = yield* sendOne(org, rcpt)
        const reply = yield* smtp("", sent.returnPath, arf({ to: sent.returnPath, recipient: rcpt, messageId: sent.messageId }))
        expect(reply.ok, reply.response).toBe(true)
        const row = yield* sentEmail(org, sent.id)
        expect(row.status).toBe("complained")
        expect(row.bounce).toMatchObject({ type: "complaint", status: "abuse", diagnostic: "SomeGenerator/1.0", recipient: rcpt })
        const event = yield* eventually(() => eventsOf(org, "email.complained")[0], 15_000, "email.complained")
        expect(event).toMatchObject({ sent_email: { id: sent.id, status: "complained" }, recipient: rcpt, bounce: { type: "complaint", status: "abuse" } })
        const list = yield* call("GET", "/v1/suppressions?limit=1", { token: org.token })
        expect(list.body.data[0]).toMatchObject({ address: rcpt, reason: "complaint", status: "abuse" })
        const refused = yield* send(org, { to: rcpt })
        expect(refused.status).toBe(422)
        expect(refused.body.error.code).toBe("recipient_suppressed")
      }))
  })

  describe("what is not a matched report", () => {
    it.scoped("an unknown or forged return path is refused at RCPT and matches nothing", () =>
      Effect.gen(function*() {
        const org = yield* newOrg
        const rcpt = `${unique("target")}@example.com`
        const sent = yield* sendOne(org, rcpt)
        const domain = sent.returnPath.slice(sent.returnPath.indexOf("@") + 1)
        const hex = sent.returnPath.slice("bounces+".length, sent.returnPath.indexOf("@"))
        const forged = [
          `bounces+${hex.slice(0, 32)}${"0".repeat(16)}@${domain}`,
          `bounces+${"1".repeat(48)}@${domain}`,
          `bounces+nonsense@${domain}`
        ]
        for (const to of forged) {
          const reply = yield* smtp("", to, dsn({ to, recipient: rcpt, action: "failed", status: "5.1.1", diagnostic: "550 no", messageId: sent.messageId }))
          expect(reply.ok, to).toBe(false)
          expect(reply.code, reply.response).toBe(550)
        }
        expect((yield* sentEmail(org, sent.id)).status).toBe("sent")
        expect((yield* call("GET", "/v1/suppressions", { token: org.token })).body.meta.total).toBe(0)
        const health = yield* call("GET", "/v1/health")
        expect(health.status).toBe(200)
      }))

    it.scoped("a malformed DSN at a real return path is kept as ordinary mail in the organization's inbox", () =>
      Effect.gen(function*() {
        const org = yield* newOrg
        const rcpt = `${unique("x")}@example.com`
        const sent = yield* sendOne(org, rcpt)
        const broken = crlf([
          "From: MAILER-DAEMON@mx.example.net",
          `To: ${sent.returnPath}`,
          "Subject: Undeliverable (broken report)",
          "MIME-Version: 1.0",
          "Content-Type: multipart/report; report-type=delivery-status; boundary=\"B\"",
          "",
          "--B",
          "Content-Type: text/plain",
          "",
          "Your message could not be delivered.",
          "--B",
          "Content-Type: message/delivery-status",
          "",
          "Reporting-MTA: dns; mx.example.net",
          "",
          "this line is not a field",
          "--B--"
        ])
        const reply = yield* smtp("", sent.returnPath, broken)
        expect(reply.ok, reply.response).toBe(true)
        expect((yield* sentEmail(org, sent.id)).status).toBe("sent")
        const stored = yield* call("GET", "/v1/emails", { token: org.token })
        expect(stored.status).toBe(200)
        expect(stored.body.data.map((e: { subject: string }) => e.subject)).toContain("Undeliverable (broken report)")
        // Plain text that is not a report at all: kept too.
        const plain = yield* smtp("", sent.returnPath, crlf(["From: someone@example.net", `To: ${sent.returnPath}`, "Subject: just text", "", "hello"]))
        expect(plain.ok, plain.response).toBe(true)
        expect((yield* call("GET", "/v1/suppressions", { token: org.token })).body.meta.total).toBe(0)
      }))
  })

  describe("the suppression list", () => {
    it.scoped("pages newest first, and rejects a bad cursor and limit", () =>
      Effect.gen(function*() {
        const org = yield* newOrg
        const ids: Array<string> = []
        for (let i = 0; i < 3; i++) {
          const rcpt = `${unique(`p${i}`)}@example.com`
          const sent = yield* sendOne(org, rcpt)
          yield* smtp("", sent.returnPath, dsn({ to: sent.returnPath, recipient: rcpt, action: "failed", status: "5.1.1", diagnostic: "550", messageId: sent.messageId }))
          ids.push(rcpt)
        }
        const first = yield* call("GET", "/v1/suppressions?limit=2", { token: org.token })
        expect(first.body.meta.total).toBe(3)
        expect(first.body.data.map((s: { address: string }) => s.address)).toEqual([ids[2], ids[1]])
        const next = yield* call("GET", `/v1/suppressions?limit=2&cursor=${first.body.meta.cursor}`, { token: org.token })
        expect(next.body.data.map((s: { address: string }) => s.address)).toEqual([ids[0]])
        expect(next.body.meta.cursor).toBeNull()
        const bad = yield* call("GET", "/v1/suppressions?cursor=nope", { token: org.token })
        expect(bad.status).toBe(400)
        expect(bad.body.error.code).toBe("validation_error")
        expect((yield* call("GET", "/v1/suppressions?limit=0", { token: org.token })).status).toBe(400)
        expect((yield* call("GET", "/v1/suppressions")).status).toBe(401)
        // Another organization sees none of them.
        const other = yield* newOrg
        expect((yield* call("GET", "/v1/suppressions", { token: other.token })).body.meta.total).toBe(0)
        expect((yield* call("DELETE", `/v1/suppressions/${ids[0]}`, { token: other.token })).status).toBe(404)
      }))
  })
})
