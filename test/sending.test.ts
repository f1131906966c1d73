/**
 * POST /send-mail end to end over a real (scripted) SMTP relay: validation, the sender check, the
 * first-send gate, quotas, discard, attachments and headers, idempotency, every relay outcome
 * mapped to its code and recorded on the sent email, the sent-emails API and the outbound status.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import { simpleParser } from "mailparser"
import nodemailer from "nodemailer"
import { Provisioning } from "../src/identity/Provisioning.js"
import { TestServer } from "./support/harness.js"
import { authenticatedDomain, TestDns, testServiceWithDns } from "./support/dns.js"
import { call, fetchReply } from "./support/http.js"
import { type RelayMessage, startTestRelay, type TestRelay } from "./support/relay.js"

class Relay extends Context.Tag("test/Relay")<Relay, TestRelay>() {}

const Env = Provisioning.Default.pipe(
  Layer.provideMerge(Layer.unwrapScoped(Effect.map(startTestRelay, (relay) =>
    testServiceWithDns({ OUTBOUND_SMTP_URL: relay.url, OUTBOUND_TIMEOUT: "1s" }).pipe(Layer.merge(Layer.succeed(Relay, relay))))))
)

let seq = 0
const unique = (label: string) => `${label}-${++seq}-${Math.random().toString(36).slice(2, 7)}`

const newOrg = (plan: "agent" | "developer" | "pro" = "developer") =>
  Effect.gen(function*() {
    const p = yield* Provisioning
    const org = yield* p.createOrganization({ name: "Sender", plan })
    const key = yield* p.issueApiKey(org.id)
    return { orgId: org.id, token: key.apiKey, inbox: org.managedInboxAddress! }
  })

/** Mail into the service over SMTP (so its sender becomes known to the receiving organization). */
const mailIn = (from: string, to: string, extra: Record<string, unknown> = {}) =>
  Effect.flatMap(TestServer, (server) =>
    Effect.promise(async () => {
      const t = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
      try {
        const info = await t.sendMail({ from, to, subject: "hello", text: "hi there", ...extra })
        return /queued as ([0-9a-f-]{36})/.exec(String(info.response))?.[1]!
      } finally {
        t.close()
      }
    }))

const send = (token: string, body: Record<string, unknown>, key?: string) =>
  call("POST", "/v1/send-mail", { token, body, ...(key !== undefined ? { headers: { "idempotency-key": key } } : {}) })

const relayed = (predicate: (m: RelayMessage) => boolean) => Effect.map(Relay, (r) => r.messages.filter(predicate))

layer(Env, { timeout: 180_000, excludeTestServices: true })("send-mail", (it) => {
  describe("a send", () => {
    it.effect("is relayed signed, with Message-ID, Date, attachments and X-/List- headers, and recorded as sent", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const to = `${unique("rcpt")}@example.com`
        const key = unique("key")
        const r = yield* send(org.token, {
          from: `Agent Smith <${org.inbox}>`,
          to: [`Bob <${to}>`],
          cc: "carol@example.org",
          bcc: ["dave@example.org"],
          reply_to: "replies@example.org",
          subject: "Quarterly report",
          text: "Numbers attached.",
          html: "<p>Numbers attached.</p>",
          headers: { "X-Campaign": "q3", "List-Unsubscribe": "<mailto:unsub@example.org>" },
          attachments: [{ filename: "numbers.csv", content_base64: Buffer.from("a,b\n1,2\n").toString("base64") }]
        }, key)
        expect(r.status, r.text).toBe(201)
        expect(r.headers.get("idempotency-key")).toBe(key)
        const sent = r.body.data
        expect(sent).toMatchObject({
          status: "sent",
          from: `Agent Smith <${org.inbox}>`,
          to: [`Bob <${to}>`],
          cc: ["carol@example.org"],
          bcc: ["dave@example.org"],
          reply_to: "replies@example.org",
          subject: "Quarterly report",
          in_reply_to: null,
          send_at: null,
          error: null,
          content_discarded: false
        })
        expect(sent.message_id).toMatch(new RegExp(`^<${sent.id}@agents\\.localhost>$`))
        // A new message (not a reply) starts a thread of its own.
        expect(sent.thread_id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
        expect(sent.relay_response).toMatch(/^250/)
        expect(new Date(sent.sent_at).getTime()).toBeGreaterThan(Date.now() - 60_000)

        const [m] = yield* relayed((x) => x.to.includes(to))
        // The envelope sender is the message's VERP return path on the managed domain (bounces come back to it).
        expect(m!.from).toMatch(/^bounces\+[0-9a-f]{48}@/)
        expect(m!.from.split("@")[1]).toBe(org.inbox.split("@")[1])
        expect([...m!.to].sort()).toEqual(["carol@example.org", "dave@example.org", to].sort())
        const parsed = yield* Effect.promise(() => simpleParser(m!.raw))
        expect(parsed.messageId).toBe(sent.message_id)
        expect(parsed.date).toBeInstanceOf(Date)
        expect(parsed.headers.get("x-campaign")).toBe("q3")
        expect(String(parsed.headers.get("list-unsubscribe") ?? JSON.stringify(parsed.headers.get("list")))).toContain("unsub@example.org")
        expect(parsed.headers.has("bcc")).toBe(false)
        expect(parsed.headers.has("dkim-signature")).toBe(true)
        expect(parsed.attachments.map((a) => [a.filename, a.contentType, a.content.toString()])).toEqual([["numbers.csv", "text/csv", "a,b\n1,2\n"]])

        const got = yield* call("GET", `/v1/sent-emails/${sent.id}`, { token: org.token })
        expect(got.status).toBe(200)
        expect(got.body.data).toMatchObject({ id: sent.id, text: "Numbers attached.", html: "<p>Numbers attached.</p>" })
        expect(got.body.data.attachments).toEqual([{ filename: "numbers.csv", content_type: "text/csv", size_bytes: 8 }])

        const list = yield* call("GET", `/v1/sent-emails?to=${encodeURIComponent(to)}&status=sent`, { token: org.token })
        expect(list.body.data.map((s: { id: string }) => s.id)).toEqual([sent.id])
        const none = yield* call("GET", `/v1/sent-emails?status=failed`, { token: org.token })
        expect(none.body.data).toEqual([])
        const other = yield* newOrg()
        expect((yield* call("GET", `/v1/sent-emails/${sent.id}`, { token: other.token })).status).toBe(404)

        // The same key and body: the stored answer, and nothing sent again.
        const again = yield* send(org.token, {
          from: `Agent Smith <${org.inbox}>`,
          to: [`Bob <${to}>`],
          cc: "carol@example.org",
          bcc: ["dave@example.org"],
          reply_to: "replies@example.org",
          subject: "Quarterly report",
          text: "Numbers attached.",
          html: "<p>Numbers attached.</p>",
          headers: { "X-Campaign": "q3", "List-Unsubscribe": "<mailto:unsub@example.org>" },
          attachments: [{ filename: "numbers.csv", content_base64: Buffer.from("a,b\n1,2\n").toString("base64") }]
        }, key)
        expect(again.status).toBe(201)
        expect(again.headers.get("idempotent-replayed")).toBe("true")
        expect(again.body.data.id).toBe(sent.id)
        expect((yield* relayed((x) => x.to.includes(to))).length).toBe(1)
      }))

    it.effect("is refused field by field when invalid (400 validation_error, nothing relayed)", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const relay = yield* Relay
        const before = relay.dataEnds.count
        const base = { from: org.inbox, to: "x@example.com", subject: "s", text: "t" }
        const cases: Array<[Record<string, unknown>, string]> = [
          [{ ...base, text: undefined }, "text: one of text and html is required"],
          [{ ...base, to: Array.from({ length: 51 }, (_, i) => `r${i}@example.com`) }, "to: at most 50 recipients"],
          [{ ...base, headers: { "Reply-To": "x@y.z" } }, "headers.Reply-To: only X-* and List-*"],
          [{ ...base, send_at: new Date(Date.now() - 60_000).toISOString() }, "send_at: must be in the future"],
          [{ ...base, send_at: new Date(Date.now() + 31 * 86_400_000).toISOString() }, "send_at: must be at most 30 days ahead"],
          [{ ...base, to: "a@example.com, b@example.com" }, "to:"],
          [{ ...base, from: "not an address" }, "from:"],
          [{ ...base, subject: "" }, "subject: must be 1-998 characters"],
          [{ ...base, to: "registry:nope/none" }, "to: registry:nope/none is not a published registry entry"],
          [{ ...base, attachments: [{ filename: "big.bin", content_base64: Buffer.alloc(10 * 1024 * 1024 + 1).toString("base64") }] }, "attachments: at most 10 MiB"],
          [{ ...base, unknown_field: 1 }, "unknown_field"]
        ]
        for (const [body, message] of cases) {
          const r = yield* send(org.token, body)
          expect(r.status, `${message}: ${r.text}`).toBe(400)
          expect(r.body.error.code).toBe("validation_error")
          expect(r.body.error.message).toContain(message)
        }
        expect(relay.dataEnds.count).toBe(before)
      }))

    it.effect("from an address the organization cannot send from: 403 cannot_send_from_domain with valid_senders", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const r = yield* send(org.token, { from: "ceo@bigcorp.example", to: "x@example.com", subject: "s", text: "t" })
        expect(r.status).toBe(403)
        expect(r.body.error.code).toBe("cannot_send_from_domain")
        expect(r.body.error.details.valid_senders).toEqual([org.inbox])
        // The +tag form of the managed address is the organization's own.
        const tag = org.inbox.replace("@", "+news@")
        expect((yield* send(org.token, { from: tag, to: "x@example.com", subject: "s", text: "t" })).status).toBe(201)
      }))

    it.effect("without from: the organization's only address; with a verified domain too, 400 naming the valid senders", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const dns = yield* TestDns
        const to = `${unique("nofrom")}@example.com`
        const r = yield* send(org.token, { to, subject: "no from", text: "t" })
        expect(r.status, r.text).toBe(201)
        expect(r.body.data.from).toBe(org.inbox)
        const [m] = yield* relayed((x) => x.to.includes(to))
        // The envelope sender is the message's VERP return path on the managed domain (bounces come back to it).
        expect(m!.from).toMatch(/^bounces\+[0-9a-f]{48}@/)
        expect(m!.from.split("@")[1]).toBe(org.inbox.split("@")[1])

        // A verified domain is a second choice: the caller must name the sender.
        const domain = `${unique("own")}.test`
        const claim = yield* call("POST", "/v1/domains", { token: org.token, body: { domain } })
        expect(claim.status, claim.text).toBe(201)
        dns.zone.set(`_mailroom.${domain}`, { TXT: [`mailroom-verification=${claim.body.data.verification_token}`] })
        dns.zone.set(domain, { MX: [{ exchange: "mx.agents.localhost", priority: 10 }] })
        const v = yield* call("POST", `/v1/domains/${claim.body.data.id}/verify`, { token: org.token })
        expect(v.body.data.verified, v.text).toBe(true)
        const ambiguous = yield* send(org.token, { to, subject: "no from, two choices", text: "t" })
        expect(ambiguous.status, ambiguous.text).toBe(400)
        expect(ambiguous.body.error.code).toBe("validation_error")
        expect(ambiguous.body.error.message).toContain("from: is required")
        expect(ambiguous.body.error.details.valid_senders).toEqual([org.inbox, domain])
        expect((yield* send(org.token, { from: `me@${domain}`, to, subject: "named", text: "t" })).status).toBe(201)
      }))

    it.effect("discard_content: 403 discard_not_enabled unless the account enables it; then the body is dropped once relayed", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const body = { from: org.inbox, to: `${unique("d")}@example.com`, subject: "secret", text: "the body", discard_content: true }
        const refused = yield* send(org.token, body)
        expect(refused.status).toBe(403)
        expect(refused.body.error.code).toBe("discard_not_enabled")
        const patch = yield* call("PATCH", "/v1/account", { token: org.token, body: { discard_content_on_webhook_confirmed: true } })
        expect(patch.status, patch.text).toBe(200)
        const r = yield* send(org.token, body)
        expect(r.status, r.text).toBe(201)
        expect(r.body.data.content_discarded).toBe(true)
        const got = yield* call("GET", `/v1/sent-emails/${r.body.data.id}`, { token: org.token })
        expect(got.body.data).toMatchObject({ text: null, html: null, subject: "secret", status: "sent" })
        const [m] = yield* relayed((x) => x.to.includes(body.to))
        expect(m!.raw.toString()).toContain("the body")
      }))
  })

  describe("registry recipients", () => {
    it.effect("registry:<name>/<handle> resolves to the published entry's address; a pending entry is refused", () =>
      Effect.gen(function*() {
        const owner = yield* newOrg()
        const name = unique("agents")
        const reg = yield* call("POST", "/v1/registries", { token: owner.token, body: { name, publish_policy: "request" } })
        expect(reg.status, reg.text).toBe(201)
        const pub = yield* call("POST", `/v1/registries/${name}/entries`, { token: owner.token, body: { handle: "billing", address: owner.inbox } })
        expect(pub.status, pub.text).toBe(201)
        const other = yield* newOrg()
        const pending = yield* call("POST", `/v1/registries/${name}/entries`, { token: other.token, body: { handle: "support", address: other.inbox } })
        expect(pending.body.data.status).toBe("pending")

        const sender = yield* newOrg()
        const r = yield* send(sender.token, { from: sender.inbox, to: `registry:${name}/billing`, cc: "cc@example.org", subject: "invoice", text: "t" })
        expect(r.status, r.text).toBe(201)
        expect(r.body.data.to).toEqual([owner.inbox])
        // The entry's address is an inbox of this service: delivered here, only the cc relayed.
        expect((yield* relayed((x) => x.to.includes(owner.inbox))).length).toBe(0)
        expect((yield* relayed((x) => x.to.includes("cc@example.org") && x.raw.includes("Subject: invoice"))).length).toBe(1)
        const got = yield* call("GET", "/v1/emails", { token: owner.token })
        expect(got.body.data.map((e: { subject: string }) => e.subject)).toEqual(["invoice"])

        const refused = yield* send(sender.token, { from: sender.inbox, to: `registry:${name}/support`, subject: "s", text: "t" })
        expect(refused.status).toBe(400)
        expect(refused.body.error.message).toContain(`to: registry:${name}/support is not a published registry entry`)
        // The resolved address is what the first-send gate judges.
        const agent = yield* newOrg("agent")
        const gated = yield* send(agent.token, { from: agent.inbox, to: `registry:${name}/billing`, subject: "s", text: "t" })
        expect(gated.status).toBe(403)
        expect(gated.body.error.gates[0].subject).toBe(owner.inbox)
      }))
  })

  describe("the first-send gate (send_to_known_addresses)", () => {
    it.effect("refuses unknown recipients with one gates[] entry each; lifts once that address writes in", () =>
      Effect.gen(function*() {
        const agent = yield* newOrg("agent")
        // Only authenticated mail makes its sender known: the friend's domain publishes SPF.
        const known = `${unique("friend")}@${yield* authenticatedDomain("friends")}`
        const stranger = `${unique("stranger")}@example.com`
        const r = yield* send(agent.token, { from: agent.inbox, to: [known, stranger], subject: "hi", text: "t" })
        expect(r.status).toBe(403)
        expect(r.body.error.code).toBe("recipient_not_allowed")
        const server = yield* TestServer
        expect(r.body.error.gates).toEqual([known, stranger].map((subject) => ({
          name: "send_to_known_addresses",
          reason: "recipient_not_known",
          message: expect.stringContaining(subject),
          subject,
          fix: { action: "wait_for_inbound", subject },
          docs_url: `${server.baseUrl}/docs#tag/sending`
        })))
        const docs = yield* Effect.promise(() => fetchReply(r.body.error.gates[0].docs_url.split("#")[0], "GET"))
        expect(docs.status).toBe(200)

        yield* mailIn(`Friend <${known.toUpperCase()}>`, agent.inbox)
        const sql = yield* SqlClient.SqlClient
        const rows = yield* sql<{ address: string }>`SELECT address FROM known_addresses WHERE org_id = ${agent.orgId}`
        expect(rows.map((x) => x.address)).toEqual([known])
        const partly = yield* send(agent.token, { from: agent.inbox, to: [known, stranger], subject: "hi", text: "t" })
        expect(partly.status).toBe(403)
        expect(partly.body.error.gates.map((g: { subject: string }) => g.subject)).toEqual([stranger])
        const ok = yield* send(agent.token, { from: agent.inbox, to: known, subject: "hi", text: "t" })
        expect(ok.status, ok.text).toBe(201)
        // A developer account has no gate.
        const dev = yield* newOrg()
        expect((yield* send(dev.token, { from: dev.inbox, to: stranger, subject: "hi", text: "t" })).status).toBe(201)
      }))
  })

  describe("display names", () => {
    it.effect("a display name showing an address the organization cannot send from is refused (403); its own is fine", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const other = yield* newOrg()
        const to = `${unique("victim")}@example.com`
        const spoofs = [
          `"ceo@alpha.test" <${org.inbox}>`,
          `"Alpha CEO (ceo@alpha.test)" <${org.inbox}>`,
          `ceo@alpha.test <${org.inbox}>`,
          `"ceo＠alpha.test" <${org.inbox}>`,
          // The managed domain is shared: another organization's inbox is not this one's to show.
          `"${other.inbox}" <${org.inbox}>`
        ]
        for (const from of spoofs) {
          const r = yield* send(org.token, { from, to, subject: "urgent", text: "t" })
          expect(r.status, `${from}: ${r.text}`).toBe(403)
          expect(r.body.error.code).toBe("cannot_send_from_domain")
          expect(r.body.error.details.display_name_address).toMatch(/^(ceo@alpha\.test|.+@.+)$/)
        }
        expect(yield* relayed((m) => m.to.includes(to))).toHaveLength(0)
        // A scheduled send and a reply meet the same check.
        const later = yield* send(org.token, { from: spoofs[0]!, to, subject: "later", text: "t", send_at: new Date(Date.now() + 60_000).toISOString() })
        expect(later.status).toBe(403)
        const id = yield* mailIn(`Asker <${to}>`, org.inbox, { messageId: `<${unique("ask")}@example.com>` })
        const reply = yield* call("POST", `/v1/emails/${id}/reply`, { token: org.token, body: { from: spoofs[1]!, text: "t" } })
        expect(reply.status, reply.text).toBe(403)
        expect(reply.body.error.code).toBe("cannot_send_from_domain")
        for (const from of [`"Support" <${org.inbox}>`, `"${org.inbox}" <${org.inbox}>`, `"Desk ${org.inbox.replace("@", "+desk@")}" <${org.inbox}>`]) {
          const ok = yield* send(org.token, { from, to, subject: "fine", text: "t" })
          expect(ok.status, `${from}: ${ok.text}`).toBe(201)
        }
      }))
  })

  describe("quotas", () => {
    it.effect("send_per_hour: 429 rate_limited with the hour window's headers; idempotent retries do not count", () =>
      Effect.gen(function*() {
        const agent = yield* newOrg("agent")
        const friend = `${unique("f")}@${yield* authenticatedDomain("friends")}`
        yield* mailIn(friend, agent.inbox)
        const body = (i: number) => ({ from: agent.inbox, to: friend, subject: `n${i}`, text: "t" })
        const first = yield* send(agent.token, body(0), "quota-key")
        expect(first.status, first.text).toBe(201)
        for (let i = 0; i < 3; i++) expect((yield* send(agent.token, body(0), "quota-key")).headers.get("idempotent-replayed")).toBe("true")
        for (let i = 1; i < 10; i++) expect((yield* send(agent.token, body(i))).status).toBe(201)
        const over = yield* send(agent.token, body(10))
        expect(over.status).toBe(429)
        expect(over.body.error.code).toBe("rate_limited")
        expect(over.body.error.details).toMatchObject({ limit: 10, window: "hour" })
        expect(over.headers.get("ratelimit-policy")).toBe("10;w=3600")
        expect(over.headers.get("ratelimit-limit")).toBe("10")
        expect(over.headers.get("ratelimit-remaining")).toBe("0")
        expect(Number(over.headers.get("retry-after"))).toBeGreaterThan(3500)
        const status = yield* call("GET", "/v1/outbound/status", { token: agent.token })
        expect(status.body.data).toMatchObject({
          relay: "smtp",
          reachable: true,
          limits: { send_per_hour: 10, send_per_day: 50 },
          usage: { last_hour: 10, today: 10 },
          remaining: { hour: 0, day: 40 },
          scheduled: 0
        })
      }))

    it.effect("16 sends at once with room for 10: exactly 10 sent, 6 refused with 429, nothing of a refused send stored", () =>
      Effect.gen(function*() {
        const agent = yield* newOrg("agent")
        const sql = yield* SqlClient.SqlClient
        const friend = `${unique("race")}@${yield* authenticatedDomain("friends")}`
        yield* mailIn(friend, agent.inbox)
        const relay = yield* Relay
        const before = relay.messages.filter((m) => m.to.includes(friend)).length
        const replies = yield* Effect.all(
          Array.from({ length: 16 }, (_, i) => send(agent.token, { from: agent.inbox, to: friend, subject: `race ${i}`, text: "t" })),
          { concurrency: "unbounded" }
        )
        const sent = replies.filter((r) => r.status === 201)
        const refused = replies.filter((r) => r.status === 429)
        expect(sent.length, replies.map((r) => r.status).join(",")).toBe(10)
        expect(refused.length).toBe(6)
        for (const r of refused) expect(r.body.error.details).toMatchObject({ limit: 10, window: "hour" })
        const [rows] = yield* sql<{ n: number; counted: number; contents: number }>`
          SELECT count(*)::int AS n, count(s.quota_at)::int AS counted, count(c.sent_email_id)::int AS contents
          FROM sent_emails s LEFT JOIN sent_email_contents c ON c.sent_email_id = s.id WHERE s.org_id = ${agent.orgId}`
        expect(rows).toEqual({ n: 10, counted: 10, contents: 10 })
        expect(relay.messages.filter((m) => m.to.includes(friend)).length - before).toBe(10)
      }))

    it.effect("send_per_day: 429 with the day window's headers once the last 24 hours hold the plan's day", () =>
      Effect.gen(function*() {
        const dev = yield* newOrg()
        const sql = yield* SqlClient.SqlClient
        // 1000 sends spread over the day before the last hour (the developer plan's day quota).
        yield* sql`INSERT INTO sent_emails (org_id, status, from_header, from_address, subject, message_id, quota_at, sent_at)
          SELECT ${dev.orgId}, 'sent', ${dev.inbox}, ${dev.inbox}, 'old', '<old.' || g || '@x>', now() - interval '2 hours' - g * interval '1 minute', now()
          FROM generate_series(1, 1000) g`
        const over = yield* send(dev.token, { from: dev.inbox, to: "x@example.com", subject: "s", text: "t" })
        expect(over.status).toBe(429)
        expect(over.body.error.details).toMatchObject({ limit: 1000, window: "day" })
        expect(over.headers.get("ratelimit-policy")).toBe("1000;w=86400")
        expect(Number(over.headers.get("retry-after"))).toBeGreaterThan(0)
      }))
  })

  describe("relay outcomes (each recorded on the sent email as failed)", () => {
    const cases: Array<{ name: string; step: { stage: "greeting" | "mail" | "rcpt" | "data"; action: string }; status: number; code: string; smtp?: number }> = [
      { name: "550 at DATA", step: { stage: "data", action: "550 5.7.1 message refused" }, status: 502, code: "outbound_relay_failed", smtp: 550 },
      { name: "451 at DATA", step: { stage: "data", action: "451 4.3.0 try later" }, status: 502, code: "outbound_relay_failed", smtp: 451 },
      { name: "421 greeting (too many connections)", step: { stage: "greeting", action: "421 4.7.0 too many connections" }, status: 503, code: "outbound_capacity_exhausted", smtp: 421 },
      { name: "452 at RCPT", step: { stage: "rcpt", action: "452 4.5.3 too many recipients" }, status: 503, code: "outbound_capacity_exhausted", smtp: 452 },
      { name: "530 at MAIL", step: { stage: "mail", action: "530 5.7.0 authentication required" }, status: 500, code: "outbound_key_invalid", smtp: 530 },
      { name: "535 at MAIL", step: { stage: "mail", action: "535 5.7.8 bad credentials" }, status: 500, code: "outbound_key_invalid", smtp: 535 },
      { name: "534 at MAIL", step: { stage: "mail", action: "534 5.7.9 mechanism too weak" }, status: 500, code: "outbound_key_invalid", smtp: 534 },
      { name: "garbage after DATA", step: { stage: "data", action: "garbage" }, status: 502, code: "outbound_response_malformed" },
      { name: "dropped after DATA", step: { stage: "data", action: "drop" }, status: 502, code: "outbound_relay_failed" }
    ]
    for (const c of cases) {
      it.effect(`${c.name} → ${c.status} ${c.code}; the same key replays it`, () =>
        Effect.gen(function*() {
          const relay = yield* Relay
          const org = yield* newOrg()
          const to = `${unique("fail")}@example.com`
          if (c.step.stage === "greeting") relay.dropConnections()
          relay.script.push(c.step)
          const key = unique("k")
          const body = { from: org.inbox, to, subject: c.name, text: "t" }
          const r = yield* send(org.token, body, key)
          expect(r.status, r.text).toBe(c.status)
          expect(r.body.error.code).toBe(c.code)
          if (c.smtp !== undefined) expect(r.body.error.details.smtp_code).toBe(c.smtp)
          if (c.code === "outbound_capacity_exhausted") expect(r.headers.get("retry-after")).toBeNull()
          const list = yield* call("GET", `/v1/sent-emails?to=${encodeURIComponent(to)}`, { token: org.token })
          expect(list.body.data).toHaveLength(1)
          expect(list.body.data[0]).toMatchObject({ status: "failed", error: { code: c.code }, sent_at: null })
          const ends = relay.dataEnds.count
          const replay = yield* send(org.token, body, key)
          expect(replay.status).toBe(c.status)
          expect(replay.headers.get("idempotent-replayed")).toBe("true")
          expect(replay.body).toEqual(r.body)
          expect(relay.dataEnds.count).toBe(ends)
          expect(relay.script).toEqual([])
        }))
    }

    it.effect("no answer within OUTBOUND_TIMEOUT → 504 outbound_relay_timeout; the same key replays the 504, nothing sent twice", () =>
      Effect.gen(function*() {
        const relay = yield* Relay
        const org = yield* newOrg()
        const to = `${unique("slow")}@example.com`
        relay.script.push({ stage: "data", action: "stall" })
        const body = { from: org.inbox, to, subject: "slow", text: "t" }
        const started = Date.now()
        const r = yield* send(org.token, body, "timeout-key")
        expect(r.status, r.text).toBe(504)
        expect(r.body.error.code).toBe("outbound_relay_timeout")
        expect(Date.now() - started).toBeGreaterThanOrEqual(900)
        const ends = relay.dataEnds.count
        const replay = yield* send(org.token, body, "timeout-key")
        expect(replay.status).toBe(504)
        expect(replay.headers.get("idempotent-replayed")).toBe("true")
        expect(relay.dataEnds.count).toBe(ends)
        const list = yield* call("GET", `/v1/sent-emails?to=${encodeURIComponent(to)}`, { token: org.token })
        expect(list.body.data.map((s: { status: string; error: { code: string } }) => [s.status, s.error.code])).toEqual([["failed", "outbound_relay_timeout"]])
      }))

    it.effect("relay not listening → 502 outbound_unreachable; the status reports it unreachable", () =>
      Effect.gen(function*() {
        const relay = yield* Relay
        const org = yield* newOrg()
        yield* Effect.promise(() => relay.refuse())
        const r = yield* send(org.token, { from: org.inbox, to: "x@example.com", subject: "down", text: "t" }).pipe(
          Effect.ensuring(Effect.void)
        )
        const status = yield* call("GET", "/v1/outbound/status", { token: org.token })
        yield* Effect.promise(() => relay.accept())
        expect(r.status, r.text).toBe(502)
        expect(r.body.error.code).toBe("outbound_unreachable")
        expect(status.body.data).toMatchObject({ relay: "smtp", reachable: false })
        const ok = yield* send(org.token, { from: org.inbox, to: "x@example.com", subject: "up again", text: "t" })
        expect(ok.status, ok.text).toBe(201)
      }))
  })
})
