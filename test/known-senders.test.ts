/**
 * Known senders (the first-send gate) from authenticated mail only, over real SMTP and a test DNS:
 * a forged From of a domain whose SPF and DMARC fail is stored but never makes its address known,
 * so a reply-only agent still cannot write to it; DMARC passing, or (without a DMARC record) SPF
 * aligned with the From domain, does. SPF passing for another envelope domain proves nothing.
 */
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import nodemailer, { type SendMailOptions } from "nodemailer"
import { Provisioning } from "../src/identity/Provisioning.js"
import { SPF_LOCALHOST, TestDns, testServiceWithDns } from "./support/dns.js"
import { TestServer } from "./support/harness.js"
import { call } from "./support/http.js"

const Env = Provisioning.Default.pipe(Layer.provideMerge(testServiceWithDns()))

const agentOrg = Effect.gen(function*() {
  const p = yield* Provisioning
  const org = yield* p.createOrganization({ name: "Reply-only", plan: "agent" })
  const key = yield* p.issueApiKey(org.id)
  return { orgId: org.id, token: key.apiKey, inbox: org.managedInboxAddress! }
})

const mailIn = (message: SendMailOptions) =>
  Effect.flatMap(TestServer, (server) =>
    Effect.promise(async () => {
      const t = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
      try {
        const info = await t.sendMail(message)
        return /queued as ([0-9a-f-]{36})/.exec(String(info.response))?.[1]!
      } finally {
        t.close()
      }
    }))

const tag = () => Math.random().toString(36).slice(2, 8)

layer(Env, { timeout: 120_000, excludeTestServices: true })("known senders", (it) => {
  describe("only authenticated mail makes its sender known", () => {
    it.effect("a forged From (SPF -all, DMARC p=reject: both fail) is stored, yet the agent may not write to it", () =>
      Effect.gen(function*() {
        const dns = yield* TestDns
        const agent = yield* agentOrg
        const bank = `bank-${tag()}.test`
        dns.zone.set(bank, { TXT: ["v=spf1 -all"] })
        dns.zone.set(`_dmarc.${bank}`, { TXT: ["v=DMARC1; p=reject"] })
        const id = yield* mailIn({ from: `CEO <ceo@${bank}>`, to: agent.inbox, subject: "Wire the money", text: "now" })
        const stored = yield* call("GET", `/v1/emails/${id}`, { token: agent.token })
        expect(stored.status, stored.text).toBe(200)
        expect(stored.body.data.auth).toMatchObject({ spf: "fail", dmarc: "fail" })
        const send = yield* call("POST", "/v1/send-mail", {
          token: agent.token,
          body: { from: agent.inbox, to: `ceo@${bank}`, subject: "Re: Wire the money", text: "done" }
        })
        expect(send.status, send.text).toBe(403)
        expect(send.body.error.code).toBe("recipient_not_allowed")
        const reply = yield* call("POST", `/v1/emails/${id}/reply`, { token: agent.token, body: { text: "done" } })
        expect(reply.status, reply.text).toBe(403)
        expect(reply.body.error.gates[0].subject).toBe(`ceo@${bank}`)
      }))

    it.effect("no record at all, or SPF passing for another envelope domain, makes nobody known", () =>
      Effect.gen(function*() {
        const dns = yield* TestDns
        const agent = yield* agentOrg
        const bare = `bare-${tag()}.test`
        dns.zone.set(bare, {})
        const attacker = `attacker-${tag()}.test`
        dns.zone.set(attacker, { TXT: [SPF_LOCALHOST] })
        const boss = `boss-${tag()}.test`
        dns.zone.set(boss, {})
        yield* mailIn({ from: `someone@${bare}`, to: agent.inbox, subject: "hi", text: "x" })
        const spoof = yield* mailIn({
          envelope: { from: `bounce@${attacker}`, to: [agent.inbox] },
          from: `Boss <boss@${boss}>`,
          to: agent.inbox,
          subject: "urgent",
          text: "x"
        })
        const stored = yield* call("GET", `/v1/emails/${spoof}`, { token: agent.token })
        expect(stored.body.data.auth.spf).toBe("pass")
        for (const to of [`someone@${bare}`, `boss@${boss}`]) {
          const r = yield* call("POST", "/v1/send-mail", { token: agent.token, body: { from: agent.inbox, to, subject: "s", text: "t" } })
          expect(r.status, `${to}: ${r.text}`).toBe(403)
          expect(r.body.error.code).toBe("recipient_not_allowed")
        }
      }))

    it.effect("DMARC passing, or SPF aligned with the From domain where no DMARC record exists, makes the sender known", () =>
      Effect.gen(function*() {
        const dns = yield* TestDns
        const agent = yield* agentOrg
        const strict = `friend-${tag()}.test`
        dns.zone.set(strict, { TXT: [SPF_LOCALHOST] })
        dns.zone.set(`_dmarc.${strict}`, { TXT: ["v=DMARC1; p=reject"] })
        const plain = `client-${tag()}.test`
        dns.zone.set(plain, { TXT: [SPF_LOCALHOST] })
        const a = yield* mailIn({ from: `Friend <Friend@${strict}>`, to: agent.inbox, subject: "hello", text: "x" })
        expect((yield* call("GET", `/v1/emails/${a}`, { token: agent.token })).body.data.auth).toMatchObject({ spf: "pass", dmarc: "pass" })
        const b = yield* mailIn({ from: `client@${plain}`, to: agent.inbox, subject: "hello", text: "x" })
        expect((yield* call("GET", `/v1/emails/${b}`, { token: agent.token })).body.data.auth).toMatchObject({ spf: "pass", dmarc: "none" })
        for (const to of [`friend@${strict}`, `client@${plain}`]) {
          const r = yield* call("POST", "/v1/send-mail", { token: agent.token, body: { from: agent.inbox, to, subject: "s", text: "t" } })
          expect(r.status, `${to}: ${r.text}`).toBe(201)
        }
      }))

    it.effect("trust: sender_authenticated for a DMARC pass, sender_known from its second message on; a forged From neither", () =>
      Effect.gen(function*() {
        const dns = yield* TestDns
        const agent = yield* agentOrg
        const good = `good-${tag()}.test`
        dns.zone.set(good, { TXT: [SPF_LOCALHOST] })
        dns.zone.set(`_dmarc.${good}`, { TXT: ["v=DMARC1; p=reject"] })
        const forged = `forged-${tag()}.test`
        dns.zone.set(forged, { TXT: ["v=spf1 -all"] })
        dns.zone.set(`_dmarc.${forged}`, { TXT: ["v=DMARC1; p=reject"] })
        const trustOf = (id: string) => Effect.map(call("GET", `/v1/emails/${id}`, { token: agent.token }), (r) => r.body.data.trust)
        const first = yield* mailIn({ from: `ann@${good}`, to: agent.inbox, subject: "one", text: "x" })
        expect(yield* trustOf(first)).toMatchObject({ sender_authenticated: true, sender_known: false, registry_verified: false })
        const second = yield* mailIn({ from: `ann@${good}`, to: agent.inbox, subject: "two", text: "x" })
        expect(yield* trustOf(second)).toMatchObject({ sender_authenticated: true, sender_known: true })
        for (let i = 0; i < 2; i++) {
          const fake = yield* mailIn({ from: `ceo@${forged}`, to: agent.inbox, subject: "wire", text: "x" })
          expect(yield* trustOf(fake)).toMatchObject({ sender_authenticated: false, sender_known: false })
        }
      }))
  })
})
