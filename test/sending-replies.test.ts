/**
 * Replies and forwards of mail received over real SMTP, relayed to a scripted relay: recipients,
 * `Re:` once, threading headers, the default `from`, `reply_all`, the forwarded original as
 * message/rfc822, and each 422 `inbound_not_repliable` reason.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import { simpleParser } from "mailparser"
import nodemailer from "nodemailer"
import { Provisioning } from "../src/identity/Provisioning.js"
import { authenticatedDomain, testServiceWithDns } from "./support/dns.js"
import { TestServer } from "./support/harness.js"
import { call } from "./support/http.js"
import { startTestRelay, type TestRelay } from "./support/relay.js"

class Relay extends Context.Tag("test/Relay")<Relay, TestRelay>() {}

const Env = Provisioning.Default.pipe(
  Layer.provideMerge(Layer.unwrapScoped(Effect.map(startTestRelay, (relay) =>
    testServiceWithDns({ OUTBOUND_SMTP_URL: relay.url }).pipe(Layer.merge(Layer.succeed(Relay, relay))))))
)

let seq = 0
const unique = (label: string) => `${label}-${++seq}-${Math.random().toString(36).slice(2, 7)}`

const newOrg = (plan: "agent" | "developer" = "developer") =>
  Effect.gen(function*() {
    const p = yield* Provisioning
    const org = yield* p.createOrganization({ name: "Replier", plan })
    const key = yield* p.issueApiKey(org.id)
    return { orgId: org.id, token: key.apiKey, inbox: org.managedInboxAddress! }
  })

/** Mail in over SMTP: a message object for nodemailer, or raw MIME; answers the stored email's id. */
const mailIn = (envelope: { from: string; to: string }, message: Record<string, unknown> | string) =>
  Effect.flatMap(TestServer, (server) =>
    Effect.promise(async () => {
      const t = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
      try {
        const info = await t.sendMail(typeof message === "string"
          ? { envelope, raw: message }
          : { envelope, ...message })
        return /queued as ([0-9a-f-]{36})/.exec(String(info.response))?.[1]!
      } finally {
        t.close()
      }
    }))

const relayedTo = (to: string) =>
  Effect.flatMap(Relay, (r) =>
    Effect.promise(async () => {
      const m = r.messages.filter((x) => x.to.includes(to)).at(-1)
      if (m === undefined) throw new Error(`nothing relayed to ${to}`)
      return { envelope: m, parsed: await simpleParser(m.raw) }
    }))

layer(Env, { timeout: 120_000, excludeTestServices: true })("replies and forwards", (it) => {
  describe("reply", () => {
    it.effect("goes to Reply-To, from the address it was received at, Re: once, In-Reply-To and References set", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const sender = `${unique("alice")}@example.com`
        const replyTo = `${unique("desk")}@example.com`
        const id = yield* mailIn({ from: sender, to: org.inbox }, {
          from: `Alice <${sender}>`,
          to: org.inbox,
          cc: `bob@example.org, ${org.inbox.replace("@", "+other@")}`,
          replyTo: `Desk <${replyTo}>`,
          subject: "Re: Invoice 42",
          messageId: "<orig-42@example.com>",
          references: ["<root-1@example.com>"],
          text: "Where is it?"
        })
        const r = yield* call("POST", `/v1/emails/${id}/reply`, { token: org.token, body: { text: "On its way." } })
        expect(r.status, r.text).toBe(201)
        expect(r.body.data).toMatchObject({
          status: "sent",
          from: org.inbox,
          to: [replyTo],
          cc: [],
          subject: "Re: Invoice 42",
          in_reply_to: "<orig-42@example.com>"
        })
        const { envelope, parsed } = yield* relayedTo(replyTo)
        // The envelope sender is the message's VERP return path on the managed domain (bounces come back to it).
        expect(envelope.from).toMatch(/^bounces\+[0-9a-f]{48}@/)
        expect(envelope.from.split("@")[1]).toBe(org.inbox.split("@")[1])
        expect(parsed.subject).toBe("Re: Invoice 42")
        expect(parsed.inReplyTo).toBe("<orig-42@example.com>")
        expect(parsed.references).toEqual(["<root-1@example.com>", "<orig-42@example.com>"])
        expect(parsed.text?.trim()).toBe("On its way.")

        // reply_all: also the original's To and Cc, minus the organization's own addresses.
        const all = yield* call("POST", `/v1/emails/${id}/reply`, { token: org.token, body: { text: "All.", reply_all: true } })
        expect(all.status, all.text).toBe(201)
        expect(all.body.data.to).toEqual([replyTo])
        expect(all.body.data.cc).toEqual(["bob@example.org"])

        // Without Reply-To: to From; the subject gets its one Re:.
        const plain = yield* mailIn({ from: sender, to: org.inbox }, { from: sender, to: org.inbox, subject: "Hello", text: "x" })
        const p = yield* call("POST", `/v1/emails/${plain}/reply`, { token: org.token, body: { html: "<p>hi</p>" } })
        expect(p.body.data).toMatchObject({ to: [sender], subject: "Re: Hello" })

        const list = yield* call("GET", `/v1/sent-emails?to=${encodeURIComponent(sender)}`, { token: org.token })
        expect(list.body.data.map((s: { id: string }) => s.id)).toEqual([p.body.data.id])
      }))

    it.effect("a reply-only agent may answer whoever wrote in (the gate knows the sender)", () =>
      Effect.gen(function*() {
        const agent = yield* newOrg("agent")
        // Only authenticated mail makes its sender known: the client's domain publishes SPF.
        const sender = `${unique("client")}@${yield* authenticatedDomain("clients")}`
        const id = yield* mailIn({ from: sender, to: agent.inbox }, { from: sender, to: agent.inbox, subject: "Question", text: "?" })
        const r = yield* call("POST", `/v1/emails/${id}/reply`, { token: agent.token, body: { text: "Answer." } })
        expect(r.status, r.text).toBe(201)
        // Forwarding to a stranger is still gated.
        const f = yield* call("POST", `/v1/emails/${id}/forward`, { token: agent.token, body: { to: "stranger@example.org" } })
        expect(f.status).toBe(403)
        expect(f.body.error.code).toBe("recipient_not_allowed")
      }))

    it.effect("422 inbound_not_repliable: rejected, content_discarded, no_message_id, no_recipient; 404 for another org's email", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const sql = yield* SqlClient.SqlClient
        const sender = `${unique("s")}@example.com`
        const reason = (id: string) =>
          Effect.map(call("POST", `/v1/emails/${id}/reply`, { token: org.token, body: { text: "x" } }), (r) => {
            expect(r.status, r.text).toBe(422)
            expect(r.body.error.code).toBe("inbound_not_repliable")
            return r.body.error.details.reason as string
          })
        const rejected = yield* mailIn({ from: sender, to: org.inbox }, { from: sender, to: org.inbox, subject: "spam", text: "x" })
        yield* sql`UPDATE emails SET status = 'rejected', rejection_reason = 'spam score above threshold' WHERE id = ${rejected}`
        expect(yield* reason(rejected)).toBe("rejected")

        const discarded = yield* mailIn({ from: sender, to: org.inbox }, { from: sender, to: org.inbox, subject: "gone", text: "x" })
        yield* sql`UPDATE emails SET content_discarded_at = now() WHERE id = ${discarded}`
        expect(yield* reason(discarded)).toBe("content_discarded")
        const fwd = yield* call("POST", `/v1/emails/${discarded}/forward`, { token: org.token, body: { to: "x@example.com" } })
        expect(fwd.status).toBe(422)
        expect(fwd.body.error.details.reason).toBe("content_discarded")

        const noId = yield* mailIn({ from: sender, to: org.inbox },
          `From: ${sender}\r\nTo: ${org.inbox}\r\nSubject: no id\r\nDate: ${new Date().toUTCString()}\r\n\r\nbody\r\n`)
        expect(yield* reason(noId)).toBe("no_message_id")

        const noFrom = yield* mailIn({ from: sender, to: org.inbox },
          `To: ${org.inbox}\r\nSubject: nobody\r\nMessage-ID: <${unique("n")}@example.com>\r\n\r\nbody\r\n`)
        expect(yield* reason(noFrom)).toBe("no_recipient")

        const other = yield* newOrg()
        const theirs = yield* call("POST", `/v1/emails/${noFrom}/reply`, { token: other.token, body: { text: "x" } })
        expect(theirs.status).toBe(404)
      }))
  })

  describe("forward", () => {
    it.effect("attaches the original as message/rfc822 with a note, Fwd: subject", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const sender = `${unique("s")}@example.com`
        const id = yield* mailIn({ from: sender, to: org.inbox }, { from: sender, to: org.inbox, subject: "Contract", text: "the original text" })
        const to = `${unique("legal")}@example.com`
        const r = yield* call("POST", `/v1/emails/${id}/forward`, { token: org.token, body: { to, text: "FYI" } })
        expect(r.status, r.text).toBe(201)
        expect(r.body.data).toMatchObject({ to: [to], subject: "Fwd: Contract", from: org.inbox })
        const { parsed, envelope } = yield* relayedTo(to)
        expect(parsed.text?.trim()).toMatch(/^FYI\n/)
        expect(envelope.raw.toString()).toMatch(/Content-Type: message\/rfc822/i)
        expect(envelope.raw.toString()).toContain("the original text")
        const got = yield* call("GET", `/v1/sent-emails/${r.body.data.id}`, { token: org.token })
        expect(got.body.data.attachments).toEqual([
          { filename: "forwarded-message.eml", content_type: "message/rfc822", size_bytes: expect.any(Number) }
        ])
      }))
  })
})
