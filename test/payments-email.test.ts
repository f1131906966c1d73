/**
 * The email rail of x402, end to end over real parts: a real chain (anvil with the EIP-3009 token at
 * Base Sepolia's USDC address, the built-in facilitator), a scripted SMTP relay capturing what the
 * service sends, and the service's own SMTP server receiving it back (two organizations of one
 * service: the payee mails a challenge to the payer's inbox; the payer replies with a signed payment
 * (the CLI signs it locally); the payee's service settles it on ingestion and mails a receipt or a
 * reject). Events go to a real HTTP receiver and are checked with the endpoint's secret.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import { simpleParser } from "mailparser"
import { writeFileSync } from "node:fs"
import { join } from "node:path"
import nodemailer from "nodemailer"
import type { Hex } from "viem"
import { Provisioning } from "../src/identity/Provisioning.js"
import { type Chain, startAnvil, USDC } from "./support/chain/anvil.js"
import { runCli } from "./support/cli.js"
import { makeManualClock, tempDir, TestServer, testDatabase, testServerOn } from "./support/harness.js"
import { eventually, type Hooks, startHooks, verifySignature } from "./support/hooks.js"
import { call } from "./support/http.js"
import { grantPayments, type Requirements, signPayment } from "./support/payments.js"
import { type RelayMessage, startTestRelay, type TestRelay } from "./support/relay.js"

class TestChain extends Context.Tag("test/Chain")<TestChain, Chain>() {}
class TestHooks extends Context.Tag("test/Hooks")<TestHooks, Hooks>() {}
class Relay extends Context.Tag("test/Relay")<Relay, TestRelay>() {}

const clock = makeManualClock()

const Env = Layer.unwrapScoped(Effect.gen(function*() {
  const chain = yield* Effect.acquireRelease(Effect.promise(startAnvil), (c) => Effect.sync(c.stop))
  const facilitator = yield* Effect.promise(() => chain.newAccount(100n))
  const hooks = yield* startHooks
  const relay = yield* startTestRelay
  return Provisioning.Default.pipe(
    // Payer and payee stand for two services joined by the relay: this test hands relayed mail in itself.
    Layer.provideMerge(testServerOn({ localDelivery: false }).pipe(
      Layer.provide(clock.layer),
      Layer.provideMerge(testDatabase({
        X402_RPC_URL: chain.rpcUrl,
        X402_FACILITATOR_PRIVATE_KEY: facilitator.key,
        OUTBOUND_SMTP_URL: relay.url,
        DELIVERY_RETRY_DELAYS: "200ms,400ms",
        DELIVERY_TIMEOUT: "2s",
        DNS_SERVER: "127.0.0.1:9"
      }))
    )),
    Layer.merge(Layer.succeed(TestChain, chain)),
    Layer.merge(Layer.succeed(TestHooks, hooks)),
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
  const org = yield* p.createOrganization({ name: "Mail pay", plan: "developer" })
  const key = yield* p.issueApiKey(org.id)
  yield* grantPayments(org.id)
  return { orgId: org.id, token: key.apiKey, inbox: org.managedInboxAddress! } satisfies Org
})

const newPayee = Effect.gen(function*() {
  const chain = yield* TestChain
  const org = yield* newOrg
  const wallet = yield* Effect.promise(() => chain.newAccount())
  const put = yield* call("PUT", "/v1/payments/payout-addresses/eip155:84532", { token: org.token, body: { address: wallet.address } })
  expect(put.status, put.text).toBe(200)
  return { ...org, wallet: wallet.address }
})

const newPayer = (usdc: bigint) =>
  Effect.gen(function*() {
    const chain = yield* TestChain
    const org = yield* newOrg
    const wallet = yield* Effect.promise(() => chain.newAccount())
    if (usdc > 0n) yield* Effect.promise(() => chain.mint(wallet.address, usdc))
    return { ...org, key: wallet.key, address: wallet.address }
  })

/** An endpoint of `org` at the receiver's `path`; answers the organization's webhook secret. */
const endpointFor = (org: Org, path: string) =>
  Effect.gen(function*() {
    const hooks = yield* TestHooks
    const r = yield* call("POST", "/v1/endpoints", {
      token: org.token,
      body: { url: hooks.url(path), rules: { event_types: ["payment.settled", "payment.failed"] } }
    })
    expect(r.status, r.text).toBe(201)
    const secret = yield* call("GET", "/v1/account/webhook-secret", { token: org.token })
    return secret.body.data.secret as string
  })

/** The `n`th message (0-based) the relay took for `to`, once it arrived. */
const relayed = (to: string, n = 0) =>
  Effect.flatMap(Relay, (relay) =>
    eventually(() => relay.messages.filter((m) => m.to.includes(to))[n], 30_000, `message ${n} relayed to ${to}`))

/** A relayed message handed to the service's SMTP server (the recipient's inbound mail); answers the stored email id. */
const deliverIn = (m: RelayMessage, to: string) =>
  Effect.flatMap(TestServer, (server) =>
    Effect.promise(async () => {
      const t = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
      try {
        const info = await t.sendMail({ envelope: { from: m.from, to: [to] }, raw: m.raw })
        return /queued as ([0-9a-f-]{36})/.exec(String(info.response))?.[1]!
      } finally {
        t.close()
      }
    }))

const partOf = async (raw: Buffer, type: string) => {
  const mail = await simpleParser(raw)
  const part = mail.attachments.find((a) => a.contentType === type)
  return { mail, json: part === undefined ? undefined : JSON.parse(part.content.toString("utf8")) }
}

interface Mailed {
  readonly id: string
  readonly payment_required: { accepts: Array<Requirements & { extra: { challengeId: string } }> }
  readonly sent_email_id: string
}

/** The payee asks `payer` for `amount` by mail; the challenge reaches the payer's inbox. Answers the challenge and the payer's email id. */
const mailChallenge = (payee: Org, payer: Org, amount: string, extra: Record<string, unknown> = {}, n = 0) =>
  Effect.gen(function*() {
    const r = yield* call("POST", "/v1/payments/challenges", { token: payee.token, body: { amount, deliver_to: payer.inbox, ...extra } })
    expect(r.status, r.text).toBe(201)
    const challenge = r.body.data as Mailed
    const m = yield* relayed(payer.inbox, n)
    const emailId = yield* deliverIn(m, payer.inbox)
    return { challenge, message: m, emailId }
  })

/** The payer's reply with `payload`, through the API; it reaches the payee's inbox. */
const replyWith = (payer: Org, emailId: string, payload: unknown) =>
  Effect.gen(function*() {
    const r = yield* call("POST", `/v1/payments/emails/${emailId}/pay`, { token: payer.token, body: { payment_payload: payload } })
    expect(r.status, r.text).toBe(201)
    return r.body.data as { id: string; message_id: string }
  })

/** The payee service's answer, mailed back to the payer: its status header and its x402 response part. */
const answerTo = (payer: Org, n: number) =>
  Effect.gen(function*() {
    const m = yield* relayed(payer.inbox, n)
    const { json, mail } = yield* Effect.promise(() => partOf(m.raw, "application/x402-payment-response+json"))
    return { raw: m, mail, answer: json as Record<string, unknown>, status: mail.headers.get("x-mailroom-payment-status") }
  })

const eventAt = (path: string, secret: string) =>
  Effect.gen(function*() {
    const hooks = yield* TestHooks
    const [hit] = yield* eventually(() => hooks.on(path).length > 0 && hooks.on(path), 20_000, `event at ${path}`)
    expect(verifySignature(hit!.headers["mailroom-signature"] as string, hit!.body, secret)).toBe(true)
    return { type: hit!.headers["mailroom-event-type"], body: JSON.parse(hit!.body) }
  })

const nowSeconds = () => clock.clock.unsafeCurrentTimeMillis() / 1000

layer(Env, { timeout: 300_000, excludeTestServices: true })("payments by email on a real chain", (it) => {
  describe("the happy path", () => {
    it.scoped("challenge mailed, paid by a reply the CLI signs, settled on chain, receipt mailed, payment.settled delivered", () =>
      Effect.gen(function*() {
        const chain = yield* TestChain
        const sql = yield* SqlClient.SqlClient
        const server = yield* TestServer
        const payee = yield* newPayee
        const payer = yield* newPayer(5_000_000n)
        const secret = yield* endpointFor(payee, "/ok/mail-settled")

        const { challenge, emailId, message } = yield* mailChallenge(payee, payer, "1.5", { description: "report #42" })
        expect(challenge).toMatchObject({ status: "pending", deliver_to: payer.inbox, is_payee: true })
        expect(challenge.sent_email_id).toMatch(/^[0-9a-f-]{36}$/)
        // The mail: from the payee's managed inbox, an x402 PaymentRequired part equal to the challenge's.
        // The envelope sender is the message's VERP return path; the From header names the sender.
        expect(message.from).toMatch(/^bounces\+[0-9a-f]{48}@/)
        expect(message.raw.toString("latin1").split("\r\n\r\n")[0]).toMatch(new RegExp(`^From: (.*<)?${payee.inbox.replace(/[.+]/g, "\\$&")}>?\r?$`, "mi"))
        const mailed = yield* Effect.promise(() => partOf(message.raw, "application/x402-payment-required+json"))
        expect(mailed.json).toEqual(challenge.payment_required)
        expect(mailed.mail.headers.get("x-mailroom-payment-challenge")).toBe(challenge.id)
        const sent = yield* call("GET", `/v1/sent-emails/${challenge.sent_email_id}`, { token: payee.token })
        expect(sent.body.data.message_id).toBe(mailed.mail.messageId)

        // The payer reads the challenge the email carries.
        const read = yield* call("GET", `/v1/payments/emails/${emailId}/challenge`, { token: payer.token })
        expect(read.status, read.text).toBe(200)
        expect(read.body.data).toMatchObject({ email_id: emailId, challenge_id: challenge.id })
        expect(read.body.data.payment_required).toEqual(challenge.payment_required)
        const stranger = yield* newOrg
        expect((yield* call("GET", `/v1/payments/emails/${emailId}/challenge`, { token: stranger.token })).status).toBe(404)

        // The CLI signs locally and replies.
        const dir = yield* tempDir
        const keyFile = join(dir, "wallet.key")
        writeFileSync(keyFile, `${payer.key}\n`)
        const cliEnv = { baseUrl: server.baseUrl, configHome: dir, extra: { MAILROOM_API_KEY: payer.token } }
        const both = yield* Effect.promise(() =>
          runCli(["payments", "pay", challenge.id, "--email", emailId, "--key-file", keyFile], cliEnv))
        expect(both.code).toBe(2)
        expect(both.stderr).toContain("not both")
        const out = yield* Effect.promise(() =>
          runCli(["payments", "pay", "--email", emailId, "--key-file", keyFile, "--json"], {
            baseUrl: server.baseUrl,
            configHome: dir,
            extra: { MAILROOM_API_KEY: payer.token }
          })
        )
        expect(out.code, out.stderr).toBe(0)
        const reply = JSON.parse(out.stdout) as { data?: unknown }
        const replyRow = (reply.data ?? reply) as { id: string; status: string; to: Array<string> }
        expect(replyRow).toMatchObject({ status: "sent", to: [payee.inbox] })

        const payment = yield* relayed(payee.inbox, 0)
        const signed = yield* Effect.promise(() => partOf(payment.raw, "application/x402-payment+json"))
        expect(signed.mail.inReplyTo).toBe(mailed.mail.messageId)
        expect(signed.json).toMatchObject({ x402Version: 2, payload: { authorization: { from: payer.address, value: "1500000" } } })
        yield* deliverIn(payment, payee.inbox)

        const { answer, status, mail } = yield* answerTo(payer, 1)
        expect(status).toBe("settled")
        expect(mail.inReplyTo).toBe(signed.mail.messageId)
        expect(answer).toMatchObject({
          x402Version: 2,
          success: true,
          status: "settled",
          network: "eip155:84532",
          payer: payer.address,
          challenge_id: challenge.id,
          amount: "1.5"
        })
        expect(answer.transaction).toMatch(/^0x[0-9a-f]{64}$/)
        expect(mail.text).toContain(answer.transaction as string)
        const receipt = yield* Effect.promise(() => chain.receipt(answer.transaction as Hex))
        expect(receipt?.status).toBe("success")
        expect(yield* Effect.promise(() => chain.balanceOf(payer.address))).toBe(3_500_000n)
        expect(yield* Effect.promise(() => chain.balanceOf(payee.wallet))).toBe(1_500_000n)

        const got = yield* call("GET", `/v1/payments/challenges/${challenge.id}`, { token: payee.token })
        expect(got.body.data).toMatchObject({ status: "paid", payment_id: answer.payment_id })
        const incoming = yield* call("GET", "/v1/payments?direction=in", { token: payee.token })
        expect(incoming.body.data).toHaveLength(1)
        expect(incoming.body.data[0]).toMatchObject({
          id: answer.payment_id,
          rail: "email",
          status: "settled",
          direction: "in",
          amount: "1.5",
          transaction: answer.transaction
        })

        const event = yield* eventAt("/ok/mail-settled", secret)
        expect(event.type).toBe("payment.settled")
        expect(event.body).toMatchObject({
          event: "payment.settled",
          payment: {
            id: answer.payment_id,
            challenge_id: challenge.id,
            rail: "email",
            direction: "in",
            status: "settled",
            amount: "1.5",
            transaction: answer.transaction,
            asset: USDC
          }
        })

        // The reply's job is done, durably recorded with what was answered.
        const jobs = yield* sql<{ status: string; outcome: string; payment_id: string; reply_email_id: string | null }>`
          SELECT status, outcome, payment_id, reply_email_id FROM payment_email_jobs WHERE org_id = ${payee.orgId}`
        expect(jobs).toEqual([{ status: "done", outcome: "settled", payment_id: answer.payment_id, reply_email_id: expect.any(String) }])

        // The same reply again settles nothing more: the receipt is mailed again.
        yield* deliverIn(payment, payee.inbox)
        const again = yield* answerTo(payer, 2)
        expect(again.status).toBe("settled")
        expect(again.answer.transaction).toBe(answer.transaction)
        expect(yield* Effect.promise(() => chain.balanceOf(payer.address))).toBe(3_500_000n)
      }))
  })

  describe("matching, mailing and retries", () => {
    it.effect("a fresh mail is matched by the payload's challengeId; another organization's challenge is never matched", () =>
      Effect.gen(function*() {
        const chain = yield* TestChain
        const sql = yield* SqlClient.SqlClient
        const payee = yield* newPayee
        const other = yield* newPayee
        const payer = yield* newPayer(5_000_000n)
        const own = yield* call("POST", "/v1/payments/challenges", { token: payee.token, body: { amount: "1" } })
        const foreign = yield* call("POST", "/v1/payments/challenges", { token: other.token, body: { amount: "1" } })
        const sign = (c: Mailed) => Effect.promise(() => signPayment(payer.key, c.payment_required.accepts[0]!, nowSeconds()))
        const mailIn = (payload: unknown, subject: string) =>
          Effect.flatMap(TestServer, (server) =>
            Effect.promise(async () => {
              const t = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
              try {
                const info = await t.sendMail({
                  from: payer.inbox,
                  to: payee.inbox,
                  subject,
                  text: "paying",
                  attachments: [{ filename: "payment.json", contentType: "application/x402-payment+json", content: JSON.stringify(payload) }]
                })
                return /queued as ([0-9a-f-]{36})/.exec(String(info.response))?.[1]!
              } finally {
                t.close()
              }
            }))
        // Another organization's challenge named in a mail to this payee: not matched, not answered, nothing moves.
        const stray = yield* mailIn(yield* sign(foreign.body.data), "for someone else")
        const strayJob = yield* Effect.gen(function*() {
          for (let i = 0; i < 300; i++) {
            const rows = yield* sql<{ status: string; outcome: string | null }>`
              SELECT status, outcome FROM payment_email_jobs WHERE email_id = ${stray}`
            if (rows[0]?.status === "done") return rows[0]
            yield* Effect.sleep("50 millis")
          }
          return yield* Effect.dieMessage("the stray job was not done")
        })
        expect(strayJob).toEqual({ status: "done", outcome: "unmatched" })
        expect((yield* call("GET", `/v1/payments/challenges/${foreign.body.data.id}`, { token: other.token })).body.data.status)
          .toBe("pending")

        // Its own challenge, named only by the payload: settled, receipt mailed to the sender.
        yield* mailIn(yield* sign(own.body.data), "paying by id")
        const { answer, status } = yield* answerTo(payer, 0)
        expect(status).toBe("settled")
        expect(answer).toMatchObject({ challenge_id: own.body.data.id, success: true })
        expect(yield* Effect.promise(() => chain.balanceOf(payee.wallet))).toBe(1_000_000n)
        expect(yield* Effect.promise(() => chain.balanceOf(other.wallet))).toBe(0n)
        const relay = yield* Relay
        expect(relay.messages.filter((m) => m.to.includes(payer.inbox))).toHaveLength(1)
      }))

    it.effect("a challenge that cannot be mailed is refused with the relay's error and not kept", () =>
      Effect.gen(function*() {
        const relay = yield* Relay
        const payee = yield* newPayee
        const payer = yield* newOrg
        relay.script.push({ stage: "data", action: "554 5.7.1 no thanks" })
        const r = yield* call("POST", "/v1/payments/challenges", { token: payee.token, body: { amount: "1", deliver_to: payer.inbox } })
        expect(r.status, r.text).toBe(502)
        expect(r.body.error.code).toBe("outbound_relay_failed")
        const list = yield* call("GET", "/v1/payments/challenges", { token: payee.token })
        expect(list.body.data).toEqual([])
      }))

    it.effect("an answer the relay refuses at first is mailed again later; the payment settles once", () =>
      Effect.gen(function*() {
        const chain = yield* TestChain
        const relay = yield* Relay
        const sql = yield* SqlClient.SqlClient
        const payee = yield* newPayee
        const payer = yield* newPayer(5_000_000n)
        const { challenge, emailId } = yield* mailChallenge(payee, payer, "2")
        const payload = yield* Effect.promise(() => signPayment(payer.key, challenge.payment_required.accepts[0]!, nowSeconds()))
        yield* replyWith(payer, emailId, payload)
        const reply = yield* relayed(payee.inbox, 0)
        // The next relay transaction is the receipt: refused once (transient).
        relay.script.push({ stage: "data", action: "451 4.3.0 try again later" })
        yield* deliverIn(reply, payee.inbox)
        const { answer, status } = yield* answerTo(payer, 1)
        expect(status).toBe("settled")
        const jobs = yield* sql<{ attempts: number; outcome: string }>`
          SELECT attempts, outcome FROM payment_email_jobs WHERE org_id = ${payee.orgId}`
        expect(jobs).toEqual([{ attempts: 2, outcome: "settled" }])
        const payments = yield* call("GET", "/v1/payments?direction=in", { token: payee.token })
        expect(payments.body.data.map((p: { id: string; status: string }) => [p.id, p.status])).toEqual([[answer.payment_id, "settled"]])
        expect(yield* Effect.promise(() => chain.balanceOf(payer.address))).toBe(3_000_000n)
      }))
  })

  describe("rejects", () => {
    it.effect("the payer's spend policy refuses a pay by email before anything is mailed", () =>
      Effect.gen(function*() {
        const relay = yield* Relay
        const payee = yield* newPayee
        const payer = yield* newPayer(5_000_000n)
        const { challenge, emailId } = yield* mailChallenge(payee, payer, "2")
        const policy = yield* call("PATCH", "/v1/payments/policy", { token: payer.token, body: { paused: true, per_payment_cap: "1" } })
        expect(policy.status, policy.text).toBe(200)
        const payload = yield* Effect.promise(() => signPayment(payer.key, challenge.payment_required.accepts[0]!, nowSeconds()))
        const r = yield* call("POST", `/v1/payments/emails/${emailId}/pay`, { token: payer.token, body: { payment_payload: payload } })
        expect(r.status, r.text).toBe(422)
        expect(r.body.error).toMatchObject({
          code: "payment_declined",
          details: { failure_category: "declined", reasons: ["paused", "per_payment_cap"], challenge_id: challenge.id }
        })
        expect(relay.messages.filter((m) => m.to.includes(payee.inbox))).toEqual([])
        const unpaused = yield* call("PATCH", "/v1/payments/policy", { token: payer.token, body: { paused: false, per_payment_cap: null } })
        expect(unpaused.status).toBe(200)
        yield* replyWith(payer, emailId, payload)
        const answer = yield* relayed(payee.inbox, 0)
        // The envelope sender is the message's VERP return path; the From header names the sender.
        expect(answer.from).toMatch(/^bounces\+[0-9a-f]{48}@/)
        expect(answer.raw.toString("latin1").split("\r\n\r\n")[0]).toMatch(new RegExp(`^From: (.*<)?${payer.inbox.replace(/[.+]/g, "\\$&")}>?\r?$`, "mi"))
      }))

    it.effect("a signature by another key: reject mail naming signer_mismatch, payment.failed (verification)", () =>
      Effect.gen(function*() {
        const chain = yield* TestChain
        const payee = yield* newPayee
        const payer = yield* newPayer(5_000_000n)
        const other = yield* Effect.promise(() => chain.newAccount())
        const secret = yield* endpointFor(payee, "/ok/mail-badsig")
        const { challenge, emailId } = yield* mailChallenge(payee, payer, "1")
        const payload = yield* Effect.promise(() =>
          signPayment(payer.key, challenge.payment_required.accepts[0]!, nowSeconds(), { signerKey: other.key }))
        yield* replyWith(payer, emailId, payload)
        yield* deliverIn(yield* relayed(payee.inbox, 0), payee.inbox)
        const { answer, status, mail } = yield* answerTo(payer, 1)
        expect(status).toBe("failed")
        expect(answer).toMatchObject({
          success: false,
          status: "failed",
          code: "payment_verification_failed",
          failure_category: "verification",
          reasons: ["signer_mismatch"],
          errorReason: "signer_mismatch",
          challenge_id: challenge.id
        })
        expect(mail.text).toContain("signer_mismatch")
        const event = yield* eventAt("/ok/mail-badsig", secret)
        expect(event.type).toBe("payment.failed")
        expect(event.body.payment).toMatchObject({
          challenge_id: challenge.id,
          rail: "email",
          status: "failed",
          failure_category: "verification",
          reasons: ["signer_mismatch"]
        })
        expect(yield* Effect.promise(() => chain.balanceOf(payer.address))).toBe(5_000_000n)
        const c = yield* call("GET", `/v1/payments/challenges/${challenge.id}`, { token: payee.token })
        expect(c.body.data.status).toBe("pending")
      }))

    it.effect("above the per-settle ceiling: reject mail naming amount_exceeds_per_settle_ceiling, payment.failed (cap)", () =>
      Effect.gen(function*() {
        const chain = yield* TestChain
        const payee = yield* newPayee
        const payer = yield* newPayer(20_000_000n)
        const secret = yield* endpointFor(payee, "/ok/mail-ceiling")
        const { challenge, emailId } = yield* mailChallenge(payee, payer, "11")
        const payload = yield* Effect.promise(() => signPayment(payer.key, challenge.payment_required.accepts[0]!, nowSeconds()))
        yield* replyWith(payer, emailId, payload)
        yield* deliverIn(yield* relayed(payee.inbox, 0), payee.inbox)
        const { answer, status } = yield* answerTo(payer, 1)
        expect(status).toBe("failed")
        expect(answer).toMatchObject({ failure_category: "cap", reasons: ["amount_exceeds_per_settle_ceiling"], success: false })
        const event = yield* eventAt("/ok/mail-ceiling", secret)
        expect(event.body).toMatchObject({
          event: "payment.failed",
          payment: { failure_category: "cap", reasons: ["amount_exceeds_per_settle_ceiling"], rail: "email" }
        })
        expect(yield* Effect.promise(() => chain.balanceOf(payer.address))).toBe(20_000_000n)
      }))

    it.effect("two replies racing for the last of a daily cap: one settles, the other is rejected with settle_daily_cap_exceeded", () =>
      Effect.gen(function*() {
        const chain = yield* TestChain
        const sql = yield* SqlClient.SqlClient
        const payee = yield* newPayee
        const payer = yield* newPayer(10_000_000n)
        const secret = yield* endpointFor(payee, "/ok/mail-race")
        yield* sql`INSERT INTO settle_caps (org_id, daily) VALUES (${payee.orgId}, 5000000)`
        // (Two bodies: the same create body within 60 s answers the same challenge.)
        const first = yield* mailChallenge(payee, payer, "3", { description: "first" }, 0)
        const second = yield* mailChallenge(payee, payer, "3", { description: "second" }, 1)
        for (const c of [first, second]) {
          const payload = yield* Effect.promise(() => signPayment(payer.key, c.challenge.payment_required.accepts[0]!, nowSeconds()))
          yield* replyWith(payer, c.emailId, payload)
        }
        const replies = yield* Effect.all([relayed(payee.inbox, 0), relayed(payee.inbox, 1)])
        yield* Effect.all(replies.map((m) => deliverIn(m, payee.inbox)), { concurrency: "unbounded" })
        const answers = yield* Effect.all([answerTo(payer, 2), answerTo(payer, 3)])
        const statuses = answers.map((a) => a.status).sort()
        expect(statuses).toEqual(["failed", "settled"])
        const rejected = answers.find((a) => a.status === "failed")!
        expect(rejected.answer).toMatchObject({ failure_category: "cap", reasons: ["settle_daily_cap_exceeded"], code: "payment_declined" })
        expect(yield* Effect.promise(() => chain.balanceOf(payee.wallet))).toBe(3_000_000n)
        expect(yield* Effect.promise(() => chain.balanceOf(payer.address))).toBe(7_000_000n)
        const hooks = yield* TestHooks
        yield* eventually(() => hooks.on("/ok/mail-race").length >= 2, 20_000, "both events")
        const events = hooks.on("/ok/mail-race").map((h) => {
          expect(verifySignature(h.headers["mailroom-signature"] as string, h.body, secret)).toBe(true)
          return JSON.parse(h.body) as { event: string; payment: { failure_category?: string; reasons?: Array<string> } }
        })
        expect(events.map((e) => e.event).sort()).toEqual(["payment.failed", "payment.settled"])
        expect(events.find((e) => e.event === "payment.failed")!.payment).toMatchObject({
          failure_category: "cap",
          reasons: ["settle_daily_cap_exceeded"]
        })
      }))

    it.effect("an expired challenge: reject mail naming challenge_expired, payment.failed (settlement)", () =>
      Effect.gen(function*() {
        const chain = yield* TestChain
        const payee = yield* newPayee
        const payer = yield* newPayer(5_000_000n)
        const secret = yield* endpointFor(payee, "/ok/mail-expired")
        const { challenge, emailId } = yield* mailChallenge(payee, payer, "1", { expires_in: 30 })
        const payload = yield* Effect.promise(() => signPayment(payer.key, challenge.payment_required.accepts[0]!, nowSeconds()))
        yield* replyWith(payer, emailId, payload)
        const reply = yield* relayed(payee.inbox, 0)
        clock.advance(31_000)
        yield* deliverIn(reply, payee.inbox)
        const { answer, status, mail } = yield* answerTo(payer, 1)
        expect(status).toBe("failed")
        expect(answer).toMatchObject({
          code: "challenge_expired",
          failure_category: "settlement",
          reasons: ["challenge_expired"],
          retryable: false
        })
        expect(mail.text).toContain("challenge_expired")
        const event = yield* eventAt("/ok/mail-expired", secret)
        expect(event.body).toMatchObject({
          event: "payment.failed",
          payment: { challenge_id: challenge.id, failure_category: "settlement", reasons: ["challenge_expired"], rail: "email" }
        })
        expect(yield* Effect.promise(() => chain.balanceOf(payer.address))).toBe(5_000_000n)
      }))
  })
})
