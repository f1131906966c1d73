/**
 * The email rail's payer side against a hostile sender, over real parts: mail arrives over SMTP at the
 * service, the payer pays through `POST /payments/emails/{id}/pay`, a scripted SMTP relay captures what
 * leaves, a loopback x402 facilitator settles (the chain is not what is under test here). A mail that
 * names another organization's real challenge but asks to be paid elsewhere must not make the payer
 * sign for the attacker's wallet; the payer's policy judges the address actually paid; what is mailed
 * counts on the payer's daily cap, race-free; a transient settlement failure on the payee's side is
 * retried by the service, not answered as a reject.
 */
import { describe, expect, layer } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import { simpleParser } from "mailparser"
import nodemailer from "nodemailer"
import { generatePrivateKey } from "viem/accounts"
import { Provisioning } from "../src/identity/Provisioning.js"
import { TestServer, testDatabase, testServerOn } from "./support/harness.js"
import { eventually } from "./support/hooks.js"
import { call } from "./support/http.js"
import {
  addressOf,
  type FacilitatorStub,
  grantPayments,
  type Requirements,
  signPayment,
  startFacilitatorStub
} from "./support/payments.js"
import { type RelayMessage, startTestRelay, type TestRelay } from "./support/relay.js"

class Stub extends Context.Tag("test/FacilitatorStub")<Stub, FacilitatorStub>() {}
class Relay extends Context.Tag("test/Relay")<Relay, TestRelay>() {}

const Env = Layer.unwrapScoped(Effect.gen(function*() {
  const stub = yield* Effect.acquireRelease(Effect.promise(startFacilitatorStub), (s) => Effect.sync(s.close))
  const relay = yield* startTestRelay
  return Provisioning.Default.pipe(
    // Payer and payee stand for two services joined by the relay: this test hands relayed mail in itself.
    Layer.provideMerge(testServerOn({ localDelivery: false }).pipe(
      Layer.provideMerge(testDatabase({
        X402_FACILITATOR_URL: stub.url,
        OUTBOUND_SMTP_URL: relay.url,
        DELIVERY_RETRY_DELAYS: "200ms",
        DELIVERY_TIMEOUT: "2s",
        DNS_SERVER: "127.0.0.1:9"
      }))
    )),
    Layer.merge(Layer.succeed(Stub, stub)),
    Layer.merge(Layer.succeed(Relay, relay))
  )
}))

interface Org {
  readonly orgId: string
  readonly token: string
  readonly inbox: string
}

const newOrg = Effect.gen(function*() {
  const p = yield* Provisioning
  const org = yield* p.createOrganization({ name: "Mail payer", plan: "developer" })
  const key = yield* p.issueApiKey(org.id)
  yield* grantPayments(org.id)
  return { orgId: org.id, token: key.apiKey, inbox: org.managedInboxAddress! } satisfies Org
})

const newPayee = Effect.gen(function*() {
  const org = yield* newOrg
  const wallet = addressOf(generatePrivateKey())
  const put = yield* call("PUT", "/v1/payments/payout-addresses/eip155:84532", { token: org.token, body: { address: wallet } })
  expect(put.status, put.text).toBe(200)
  return { ...org, wallet }
})

const newPayer = Effect.map(newOrg, (org) => ({ ...org, key: generatePrivateKey() }))

const setPolicy = (org: Org, body: Record<string, unknown>) =>
  Effect.gen(function*() {
    const r = yield* call("PATCH", "/v1/payments/policy", { token: org.token, body })
    expect(r.status, r.text).toBe(200)
    return r.body.data as { spent_today: string }
  })

const spentToday = (org: Org) =>
  Effect.map(call("GET", "/v1/payments/policy", { token: org.token }), (r) => r.body.data.spent_today as string)

/** Mail handed to the service's SMTP server as an outside sender would; answers the stored email id. */
const smtpIn = (mail: { from: string; to: string; raw?: Buffer; subject?: string; attachments?: Array<{ filename: string; contentType: string; content: string }> }) =>
  Effect.flatMap(TestServer, (server) =>
    Effect.promise(async () => {
      const t = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
      try {
        const info = mail.raw !== undefined
          ? await t.sendMail({ envelope: { from: mail.from, to: [mail.to] }, raw: mail.raw })
          : await t.sendMail({ from: mail.from, to: mail.to, subject: mail.subject ?? "", text: "pay me", attachments: mail.attachments ?? [] })
        return /queued as ([0-9a-f-]{36})/.exec(String(info.response))?.[1]!
      } finally {
        t.close()
      }
    }))

const relayedTo = (to: string) => Effect.map(Relay, (relay) => relay.messages.filter((m) => m.to.includes(to)))

/** The `n`th message (0-based) the relay took for `to`, once it arrived. */
const relayed = (to: string, n = 0) =>
  Effect.flatMap(Relay, (relay) =>
    eventually(() => relay.messages.filter((m) => m.to.includes(to))[n], 30_000, `message ${n} relayed to ${to}`))

interface Mailed {
  readonly id: string
  readonly payment_required: { x402Version: 2; resource: unknown; accepts: Array<Requirements & { extra: { challengeId: string } }> }
}

/** A PaymentRequired as a forger edits it. */
interface Forgeable {
  readonly accepts: Array<{ payTo: string; extra: { challengeId?: string } }>
}

/** The payee mails a real challenge to the payer; it arrives in the payer's inbox. */
const mailChallenge = (payee: Org, payer: Org, amount: string, description: string) =>
  Effect.gen(function*() {
    const before = (yield* relayedTo(payer.inbox)).length
    const r = yield* call("POST", "/v1/payments/challenges", { token: payee.token, body: { amount, description, deliver_to: payer.inbox } })
    expect(r.status, r.text).toBe(201)
    const challenge = r.body.data as Mailed
    const m = yield* relayed(payer.inbox, before)
    const emailId = yield* smtpIn({ from: m.from, to: payer.inbox, raw: m.raw })
    return { challenge, emailId }
  })

/** A stranger's mail asking the payer to pay: `required` as its x402 payment-required part. */
const forged = (payer: Org, required: unknown) =>
  smtpIn({
    from: "billing@mallory.test",
    to: payer.inbox,
    subject: "Invoice due",
    attachments: [{ filename: "payment-required.json", contentType: "application/x402-payment-required+json", content: JSON.stringify(required) }]
  })

/** What the payer's agent does with a mailed challenge (as `mailroom payments pay --email` does): read, sign, reply. */
const payByEmail = (payer: Org & { key: `0x${string}` }, emailId: string) =>
  Effect.gen(function*() {
    const read = yield* call("GET", `/v1/payments/emails/${emailId}/challenge`, { token: payer.token })
    expect(read.status, read.text).toBe(200)
    const req = read.body.data.payment_required.accepts[0] as Requirements
    const payload = yield* Effect.promise(() => signPayment(payer.key, req, Date.now() / 1000))
    const r = yield* call("POST", `/v1/payments/emails/${emailId}/pay`, { token: payer.token, body: { payment_payload: payload } })
    return { r, payload }
  })

const expectRefused = (
  r: { status: number; text: string; body: { error: { code: string; details: Record<string, unknown> } } },
  code: string,
  reasons: ReadonlyArray<string>
) => {
  expect(r.status, r.text).toBe(422)
  expect(r.body.error.code).toBe(code)
  expect(r.body.error.details.reasons).toEqual(reasons)
  expect(r.body.error.details.retryable).toBe(false)
}

const partJson = async (m: RelayMessage, type: string) => {
  const mail = await simpleParser(m.raw)
  const part = mail.attachments.find((a) => a.contentType === type)
  return { mail, json: part === undefined ? undefined : JSON.parse(part.content.toString("utf8")) as Record<string, unknown> }
}

layer(Env, { timeout: 300_000, excludeTestServices: true })("the email rail's payer side", (it) => {
  describe("a mail naming a real challenge with another wallet", () => {
    it.effect("allowlisted payee named, attacker's wallet asked: declined `allowlist`, nothing mailed, nothing counted", () =>
      Effect.gen(function*() {
        const payee = yield* newPayee
        const payer = yield* newPayer
        yield* setPolicy(payer, { payee_allowlist: [payee.orgId] })
        const real = yield* call("POST", "/v1/payments/challenges", { token: payee.token, body: { amount: "2", description: "real" } })
        expect(real.status, real.text).toBe(201)
        const attacker = addressOf(generatePrivateKey())
        const required = structuredClone(real.body.data.payment_required) as Forgeable
        required.accepts[0]!.payTo = attacker
        const emailId = yield* forged(payer, required)
        const { r } = yield* payByEmail(payer, emailId)
        expectRefused(r, "payment_declined", ["allowlist"])
        expect(r.body.error.details.challenge_id).toBe(real.body.data.id)
        expect(yield* relayedTo("billing@mallory.test")).toEqual([])
        expect(yield* spentToday(payer)).toBe("0")
        // The same mail without the challenge id: declined the same way.
        delete required.accepts[0]!.extra.challengeId
        const plain = yield* forged(payer, required)
        expectRefused((yield* payByEmail(payer, plain)).r, "payment_declined", ["allowlist"])
        expect(yield* relayedTo("billing@mallory.test")).toEqual([])
      }))

    it.effect("with every payee allowed: payment_verification_failed `payto_mismatch`, nothing mailed", () =>
      Effect.gen(function*() {
        const payee = yield* newPayee
        const payer = yield* newPayer
        const real = yield* call("POST", "/v1/payments/challenges", { token: payee.token, body: { amount: "2", description: "real, open" } })
        const attacker = addressOf(generatePrivateKey())
        const required = structuredClone(real.body.data.payment_required) as Forgeable
        required.accepts[0]!.payTo = attacker
        const emailId = yield* forged(payer, required)
        const { r } = yield* payByEmail(payer, emailId)
        expectRefused(r, "payment_verification_failed", ["payto_mismatch"])
        expect(r.body.error.details.failure_category).toBe("verification")
        expect(yield* relayedTo("billing@mallory.test")).toEqual([])
        // A forwarded copy of the real challenge, paid to its real wallet, is the payee's money: it goes.
        const genuine = yield* forged(payer, real.body.data.payment_required)
        const ok = yield* payByEmail(payer, genuine)
        expect(ok.r.status, ok.r.text).toBe(201)
        expect(ok.payload.payload.authorization.to).toBe(payee.wallet)
      }))

    it.effect("the allowlist judges the wallet paid and the organization that owns it, not the organization the mail names", () =>
      Effect.gen(function*() {
        const payee = yield* newPayee
        const other = yield* newPayee
        const payer = yield* newPayer
        yield* setPolicy(payer, { payee_allowlist: [other.orgId] })
        // A real challenge of `payee` (not allowlisted), re-addressed to `other`'s payout wallet.
        const real = yield* call("POST", "/v1/payments/challenges", { token: payee.token, body: { amount: "1", description: "owner" } })
        const required = structuredClone(real.body.data.payment_required) as Forgeable
        required.accepts[0]!.payTo = other.wallet
        expectRefused((yield* payByEmail(payer, yield* forged(payer, required))).r, "payment_verification_failed", ["payto_mismatch"])
        // A mail naming no challenge, paying `other`'s wallet: `other` owns it and is allowlisted.
        delete required.accepts[0]!.extra.challengeId
        const ok = yield* payByEmail(payer, yield* forged(payer, required))
        expect(ok.r.status, ok.r.text).toBe(201)
        // `payee`'s own wallet is not allowlisted, whatever the mail says.
        expectRefused((yield* payByEmail(payer, yield* forged(payer, real.body.data.payment_required))).r, "payment_declined", ["allowlist"])
      }))
  })

  describe("the daily cap", () => {
    it.effect("what was mailed counts: spent_today, an HTTP pay over the rest is declined, the same authorization counts once", () =>
      Effect.gen(function*() {
        const payee = yield* newPayee
        const payer = yield* newPayer
        yield* setPolicy(payer, { daily_cap: "5" })
        const { emailId } = yield* mailChallenge(payee, payer, "3", "by mail")
        const first = yield* payByEmail(payer, emailId)
        expect(first.r.status, first.r.text).toBe(201)
        expect(yield* spentToday(payer)).toBe("3")
        // The same signed authorization again: it commits nothing more.
        const again = yield* call("POST", `/v1/payments/emails/${emailId}/pay`, { token: payer.token, body: { payment_payload: first.payload } })
        expect(again.status, again.text).toBe(201)
        expect(yield* spentToday(payer)).toBe("3")
        // Over HTTP, 3 more would pass the cap of 5.
        const c = yield* call("POST", "/v1/payments/challenges", { token: payee.token, body: { amount: "3", description: "by http" } })
        const payload = yield* Effect.promise(() => signPayment(payer.key, c.body.data.payment_required.accepts[0], Date.now() / 1000))
        const http = yield* call("POST", `/v1/payments/challenges/${c.body.data.id}/pay`, { token: payer.token, body: { payment_payload: payload } })
        expect(http.status, http.text).toBe(422)
        expect(http.body.error).toMatchObject({ code: "payment_declined", details: { reasons: ["daily_cap"] } })
        // And by mail as well.
        const second = yield* mailChallenge(payee, payer, "3", "by mail, again")
        expectRefused((yield* payByEmail(payer, second.emailId)).r, "payment_declined", ["daily_cap"])
        expect(yield* spentToday(payer)).toBe("3")
      }))

    it.effect("two pays by mail racing for the last of the cap: one is mailed, the other declined `daily_cap`", () =>
      Effect.gen(function*() {
        const payee = yield* newPayee
        const payer = yield* newPayer
        yield* setPolicy(payer, { daily_cap: "5" })
        const a = yield* mailChallenge(payee, payer, "3", "race a")
        const b = yield* mailChallenge(payee, payer, "3", "race b")
        const results = yield* Effect.all([payByEmail(payer, a.emailId), payByEmail(payer, b.emailId)], { concurrency: 2 })
        const statuses = results.map((x) => x.r.status).sort()
        expect(statuses).toEqual([201, 422])
        expectRefused(results.find((x) => x.r.status === 422)!.r, "payment_declined", ["daily_cap"])
        expect(yield* spentToday(payer)).toBe("3")
        expect((yield* relayedTo(payee.inbox)).length).toBe(1)
      }))
  })

  describe("settlement on the payee's side", () => {
    it.effect("a transient settlement failure is retried by the service; the payer gets the receipt, never a reject", () =>
      Effect.gen(function*() {
        const stub = yield* Stub
        const payee = yield* newPayee
        const payer = yield* newPayer
        const { challenge, emailId } = yield* mailChallenge(payee, payer, "1", "retried")
        const paid = yield* payByEmail(payer, emailId)
        expect(paid.r.status, paid.r.text).toBe(201)
        const reply = yield* relayed(payee.inbox, 0)
        stub.mode = { kind: "status", status: 503, body: "busy" }
        const seen = stub.settles.length
        yield* Effect.gen(function*() {
          yield* smtpIn({ from: reply.from, to: payee.inbox, raw: reply.raw })
          yield* eventually(() => stub.settles.length > seen, 30_000, "a first settlement attempt")
          stub.mode = { kind: "ok" }
          const answer = yield* relayed(payer.inbox, 1)
          const { json, mail } = yield* Effect.promise(() => partJson(answer, "application/x402-payment-response+json"))
          expect(mail.headers.get("x-mailroom-payment-status")).toBe("settled")
          expect(json).toMatchObject({ success: true, status: "settled", challenge_id: challenge.id })
          expect(stub.settles.length).toBeGreaterThan(seen + 1)
          // One answer only: the receipt (the challenge, then the receipt).
          expect((yield* relayedTo(payer.inbox)).length).toBe(2)
          const got = yield* call("GET", `/v1/payments/challenges/${challenge.id}`, { token: payee.token })
          expect(got.body.data.status).toBe("paid")
        }).pipe(Effect.ensuring(Effect.sync(() => (stub.mode = { kind: "ok" }))))
      }))
  })
})
