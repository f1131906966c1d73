/**
 * Payments (x402) over real HTTP against a real chain: anvil from npm with the EIP-3009 test token at
 * Base Sepolia's USDC address, settled by the built-in facilitator (@x402/evm). The happy path moves
 * balances on chain; every declined, verification and settlement subreason is reproduced with its
 * code, status, category and reasons; facilitator outages and generic failures come from a loopback
 * facilitator stub; a wrong facilitator key is `settlement_misconfigured`; races pay a challenge at
 * most once; `payment.failed` and `payment.settled` arrive signed through the delivery path.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import type { Hex } from "viem"
import { Provisioning } from "../src/identity/Provisioning.js"
import { type Chain, startAnvil, USDC } from "./support/chain/anvil.js"
import { makeManualClock, TestServer, testDatabase, testServerOn } from "./support/harness.js"
import { eventually, type Hooks, startHooks, verifySignature } from "./support/hooks.js"
import { call, fetchReply } from "./support/http.js"
import {
  addressOf,
  grantPayments,
  type Requirements,
  serviceWith,
  signPayment,
  startFacilitatorStub,
  withBuiltIn,
  withHttpFacilitator
} from "./support/payments.js"

class TestChain extends Context.Tag("test/Chain")<TestChain, Chain>() {}
class TestHooks extends Context.Tag("test/Hooks")<TestHooks, Hooks>() {}

const clock = makeManualClock()

const Env = Layer.unwrapScoped(Effect.gen(function*() {
  const chain = yield* Effect.acquireRelease(Effect.promise(startAnvil), (c) => Effect.sync(c.stop))
  const facilitator = yield* Effect.promise(() => chain.newAccount(100n))
  const hooks = yield* startHooks
  return Provisioning.Default.pipe(
    Layer.provideMerge(testServerOn().pipe(
      Layer.provide(clock.layer),
      Layer.provideMerge(testDatabase({
        X402_RPC_URL: chain.rpcUrl,
        X402_FACILITATOR_PRIVATE_KEY: facilitator.key,
        DELIVERY_RETRY_DELAYS: "200ms,400ms",
        DELIVERY_TIMEOUT: "2s",
        DNS_SERVER: "127.0.0.1:9"
      }))
    )),
    Layer.merge(Layer.succeed(TestChain, chain)),
    Layer.merge(Layer.succeed(TestHooks, hooks))
  )
}))

interface Org {
  readonly orgId: string
  readonly token: string
}

const newOrg = (entitled = true) =>
  Effect.gen(function*() {
    const p = yield* Provisioning
    const org = yield* p.createOrganization({ name: "Pay", plan: "developer" })
    const key = yield* p.issueApiKey(org.id)
    if (entitled) yield* grantPayments(org.id)
    return { orgId: org.id, token: key.apiKey } satisfies Org
  })

/** A payee with a fresh payout wallet on Base Sepolia. */
const newPayee = Effect.gen(function*() {
  const chain = yield* TestChain
  const org = yield* newOrg()
  const wallet = yield* Effect.promise(() => chain.newAccount())
  const put = yield* call("PUT", "/v1/payments/payout-addresses/eip155:84532", { token: org.token, body: { address: wallet.address } })
  expect(put.status, put.text).toBe(200)
  return { ...org, wallet: wallet.address }
})

/** A payer organization and a wallet holding `usdc` atomic units. */
const newPayer = (usdc: bigint) =>
  Effect.gen(function*() {
    const chain = yield* TestChain
    const org = yield* newOrg()
    const wallet = yield* Effect.promise(() => chain.newAccount())
    if (usdc > 0n) yield* Effect.promise(() => chain.mint(wallet.address, usdc))
    return { ...org, key: wallet.key, address: wallet.address }
  })

const challenge = (payee: Org, amount: string, extra: Record<string, unknown> = {}) =>
  Effect.gen(function*() {
    const r = yield* call("POST", "/v1/payments/challenges", { token: payee.token, body: { amount, ...extra } })
    expect(r.status, r.text).toBe(201)
    return r.body.data as { id: string; status: string; payment_required: { accepts: Array<Requirements> } }
  })

const nowSeconds = () => clock.clock.unsafeCurrentTimeMillis() / 1000

const pay = (payer: Org, challengeId: string, payload: unknown, base?: string) =>
  base === undefined
    ? call("POST", `/v1/payments/challenges/${challengeId}/pay`, { token: payer.token, body: { payment_payload: payload } })
    : Effect.promise(() =>
      fetchReply(`${base}/v1/payments/challenges/${challengeId}/pay`, "POST", { token: payer.token, body: { payment_payload: payload } })
    )

const expectFailure = (
  r: { status: number; text: string; body: { error: { code: string; details: Record<string, unknown> } }; headers: Headers },
  status: number,
  code: string,
  category: string,
  reasons: ReadonlyArray<string>
) => {
  expect(r.status, r.text).toBe(status)
  expect(r.body.error.code).toBe(code)
  expect(r.body.error.details.failure_category).toBe(category)
  expect(r.body.error.details.reasons).toEqual(reasons)
}

const endpointFor = (org: Org, path: string, rules?: unknown) =>
  Effect.gen(function*() {
    const hooks = yield* TestHooks
    const r = yield* call("POST", "/v1/endpoints", { token: org.token, body: { url: hooks.url(path), ...(rules ? { rules } : {}) } })
    expect(r.status, r.text).toBe(201)
    const secret = yield* call("GET", "/v1/account/webhook-secret", { token: org.token })
    return secret.body.data.secret as string
  })

layer(Env, { timeout: 300_000, excludeTestServices: true })("payments on a real chain", (it) => {
  describe("entitlement and setup", () => {
    it.effect("without the payments entitlement every operation is feature_disabled", () =>
      Effect.gen(function*() {
        const org = yield* newOrg(false)
        for (const [method, path, body] of [
          ["GET", "/v1/payments", undefined],
          ["GET", "/v1/payments/policy", undefined],
          ["PATCH", "/v1/payments/policy", { paused: true }],
          ["GET", "/v1/payments/payout-addresses", undefined],
          ["PUT", "/v1/payments/payout-addresses/eip155:84532", { address: "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed" }],
          ["POST", "/v1/payments/challenges", { amount: "1" }],
          ["GET", "/v1/payments/challenges", undefined]
        ] as const) {
          const r = yield* call(method, path, { token: org.token, ...(body ? { body } : {}) })
          expect(r.status, `${method} ${path}: ${r.text}`).toBe(403)
          expect(r.body.error.code).toBe("feature_disabled")
          expect(r.body.error.details).toMatchObject({ missing_entitlement: "payments" })
          expect(typeof r.body.error.details.message).toBe("string")
          expect(r.body.error.details.docs_url).toMatch(/^http/)
        }
        const account = yield* call("GET", "/v1/account", { token: org.token })
        expect(account.body.data.entitlements).not.toContain("payments")
        yield* grantPayments(org.orgId)
        const after = yield* call("GET", "/v1/account", { token: org.token })
        expect(after.body.data.entitlements).toContain("payments")
        expect([...after.body.data.entitlements].sort()).toEqual(after.body.data.entitlements)
        expect((yield* call("GET", "/v1/payments", { token: org.token })).status).toBe(200)
      }))

    it.effect("payout addresses must be valid EVM addresses (a mixed-case one with its EIP-55 checksum), on an offered network; a challenge needs one", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const good = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"
        const noPayout = yield* call("POST", "/v1/payments/challenges", { token: org.token, body: { amount: "1" } })
        expect(noPayout.status, noPayout.text).toBe(422)
        expect(noPayout.body.error).toMatchObject({ code: "no_payout_address", details: { network: "eip155:84532" } })
        for (const bad of ["0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAeD", "0x1234", "not an address",
          "0x0000000000000000000000000000000000000000"]) {
          const r = yield* call("PUT", "/v1/payments/payout-addresses/eip155:84532", { token: org.token, body: { address: bad } })
          expect(r.status, `${bad}: ${r.text}`).toBe(400)
          expect(r.body.error.code).toBe("validation_error")
        }
        const otherNet = yield* call("PUT", "/v1/payments/payout-addresses/eip155:1", { token: org.token, body: { address: good } })
        expect(otherNet.status).toBe(400)
        const notCaip = yield* call("PUT", "/v1/payments/payout-addresses/base", { token: org.token, body: { address: good } })
        expect(notCaip.status).toBe(400)
        const set = yield* call("PUT", "/v1/payments/payout-addresses/eip155:84532", { token: org.token, body: { address: good } })
        expect(set.status, set.text).toBe(200)
        expect(set.body.data).toMatchObject({ network: "eip155:84532", address: good })
        const list = yield* call("GET", "/v1/payments/payout-addresses", { token: org.token })
        expect(list.body.data.map((a: { address: string }) => a.address)).toEqual([good])
        expect(list.body.meta).toMatchObject({ total: 1, cursor: null })

        const created = yield* challenge(org, "2.5", { description: "an invoice" })
        const req = created.payment_required.accepts[0]!
        expect(created).toMatchObject({ status: "pending", amount: "2.5", network: "eip155:84532", pay_to: good })
        expect(req).toMatchObject({
          scheme: "exact",
          network: "eip155:84532",
          asset: USDC,
          amount: "2500000",
          payTo: good,
          extra: { name: "USDC", version: "2", chainId: 84532 }
        })
        expect(req.extra.nonce).toMatch(/^0x[0-9a-f]{64}$/)
        for (const body of [{ amount: 1 }, { amount: "1.0000001" }, { amount: "0" }, { amount: "-1" }, { amount: "1e3" },
          { amount: "1", expires_in: 5 }, { amount: "1", network: "eip155:1" }, { amount: "1", extra: true }]) {
          const r = yield* call("POST", "/v1/payments/challenges", { token: org.token, body })
          expect(r.status, `${JSON.stringify(body)}: ${r.text}`).toBe(400)
          expect(r.body.error.code).toBe("validation_error")
        }
      }))
  })

  describe("the happy path", () => {
    it.effect("settles on chain: balances move, the transaction is real, both sides see it and hear of it", () =>
      Effect.gen(function*() {
        const chain = yield* TestChain
        const hooks = yield* TestHooks
        const payee = yield* newPayee
        const payer = yield* newPayer(5_000_000n)
        const payerSecret = yield* endpointFor(payer, "/ok/payer-settled")
        const payeeSecret = yield* endpointFor(payee, "/ok/payee-settled")
        const c = yield* challenge(payee, "1.5")
        const payload = yield* Effect.promise(() => signPayment(payer.key, c.payment_required.accepts[0]!, nowSeconds()))
        const r = yield* pay(payer, c.id, payload)
        expect(r.status, r.text).toBe(200)
        const payment = r.body.data
        expect(payment).toMatchObject({
          challenge_id: c.id,
          direction: "out",
          status: "settled",
          amount: "1.5",
          network: "eip155:84532",
          payer_address: payer.address,
          pay_to: payee.wallet,
          failure: null
        })
        expect(payment.transaction).toMatch(/^0x[0-9a-f]{64}$/)
        const receipt = yield* Effect.promise(() => chain.receipt(payment.transaction))
        expect(receipt?.status).toBe("success")
        expect(yield* Effect.promise(() => chain.balanceOf(payer.address))).toBe(3_500_000n)
        expect(yield* Effect.promise(() => chain.balanceOf(payee.wallet))).toBe(1_500_000n)

        const got = yield* call("GET", `/v1/payments/challenges/${c.id}`, { token: payee.token })
        expect(got.body.data).toMatchObject({ status: "paid", payment_id: payment.id, is_payee: true })
        const seenByPayer = yield* call("GET", `/v1/payments/challenges/${c.id}`, { token: payer.token })
        expect(seenByPayer.body.data).toMatchObject({ status: "paid", is_payee: false })

        const again = yield* pay(payer, c.id, payload)
        expect(again.status, again.text).toBe(409)
        expect(again.body.error).toMatchObject({ code: "conflict", details: { payment_id: payment.id } })
        expect(yield* Effect.promise(() => chain.balanceOf(payer.address))).toBe(3_500_000n)

        const incoming = yield* call("GET", "/v1/payments?direction=in", { token: payee.token })
        expect(incoming.body.data.map((p: { id: string; direction: string }) => [p.id, p.direction])).toEqual([[payment.id, "in"]])
        expect((yield* call("GET", "/v1/payments?direction=out", { token: payee.token })).body.data).toEqual([])
        const outgoing = yield* call("GET", "/v1/payments?status=settled", { token: payer.token })
        expect(outgoing.body.data.map((p: { id: string }) => p.id)).toEqual([payment.id])
        expect((yield* call("GET", `/v1/payments/${payment.id}`, { token: payee.token })).body.data.direction).toBe("in")
        const stranger = yield* newOrg()
        expect((yield* call("GET", `/v1/payments/${payment.id}`, { token: stranger.token })).status).toBe(404)

        const [toPayer] = yield* eventually(() => hooks.on("/ok/payer-settled").length > 0 && hooks.on("/ok/payer-settled"), 20_000, "payer event")
        const [toPayee] = yield* eventually(() => hooks.on("/ok/payee-settled").length > 0 && hooks.on("/ok/payee-settled"), 20_000, "payee event")
        expect(verifySignature(toPayer!.headers["mailroom-signature"] as string, toPayer!.body, payerSecret)).toBe(true)
        expect(verifySignature(toPayee!.headers["mailroom-signature"] as string, toPayee!.body, payeeSecret)).toBe(true)
        expect(toPayer!.headers["mailroom-event-type"]).toBe("payment.settled")
        const payerEvent = JSON.parse(toPayer!.body)
        expect(payerEvent).toMatchObject({
          event: "payment.settled",
          payment: { id: payment.id, direction: "out", status: "settled", amount: "1.5", transaction: payment.transaction }
        })
        expect(payerEvent.id).toMatch(/^evt_/)
        expect(JSON.parse(toPayee!.body).payment).toMatchObject({ id: payment.id, direction: "in" })

        // The event is a delivery like any other: listed (no email), and not replayable (email only).
        const deliveries = yield* call("GET", "/v1/webhooks/deliveries", { token: payer.token })
        const d = deliveries.body.data.find((x: { event_type: string }) => x.event_type === "payment.settled")
        expect(d).toMatchObject({ email_id: null, status: "delivered" })
        const replay = yield* call("POST", `/v1/webhooks/deliveries/${d.id}/replay`, { token: payer.token })
        expect(replay.status).toBe(409)
      }))
  })

  describe("failures, in the contract's order", () => {
    it.effect("every verification subreason, alone and several at once; the challenge stays payable", () =>
      Effect.gen(function*() {
        const chain = yield* TestChain
        const payee = yield* newPayee
        const payer = yield* newPayer(10_000_000n)
        const stranger = yield* Effect.promise(() => chain.newAccount())
        const c = yield* challenge(payee, "1")
        const req = c.payment_required.accepts[0]!
        // Another challenge's suggested nonce is bound to it: presented here, it is nonce_mismatch.
        const taken = (yield* challenge(payee, "1", { description: "another" })).payment_required.accepts[0]!.extra.nonce
        const now = Math.floor(nowSeconds())
        const sign = (o: Parameters<typeof signPayment>[3]) => Effect.promise(() => signPayment(payer.key, req, now, o))
        const good = yield* sign({})
        const cases: Array<[string, unknown, ReadonlyArray<string>]> = [
          ["signature_unrecoverable", { ...good, payload: { ...good.payload, signature: `0x${"00".repeat(65)}` } }, ["signature_unrecoverable"]],
          ["short signature", { ...good, payload: { ...good.payload, signature: "0x1234" } }, ["signature_unrecoverable"]],
          ["signer_mismatch", yield* sign({ signerKey: stranger.key }), ["signer_mismatch"]],
          ["invalid_from_address", yield* sign({ from: "0x12", signature: `0x${"11".repeat(65)}` }), ["invalid_from_address"]],
          ["invalid_to_address", yield* sign({ to: "0xnothex", signature: `0x${"11".repeat(65)}` }), ["invalid_to_address"]],
          ["payto_mismatch", yield* sign({ to: stranger.address }), ["payto_mismatch"]],
          ["self_send", yield* sign({ to: payer.address }), ["payto_mismatch", "self_send"]],
          ["amount_mismatch", yield* sign({ value: "999999" }), ["amount_mismatch"]],
          ["nonce_mismatch", yield* sign({ nonce: taken }), ["nonce_mismatch"]],
          ["degenerate_window", yield* sign({ validAfter: String(now - 10), validBefore: String(now - 10) }), ["degenerate_window", "insufficient_headroom"]],
          ["window_too_wide", yield* sign({ validAfter: String(now - 600), validBefore: String(now + 90_000) }), ["window_too_wide"]],
          ["insufficient_headroom", yield* sign({ validBefore: String(now + 10) }), ["insufficient_headroom"]],
          ["not_yet_valid", yield* sign({ validAfter: String(now + 60), validBefore: String(now + 600) }), ["not_yet_valid"]],
          ["unsupported_network", yield* sign({ network: "eip155:8453" }), ["unsupported_network"]],
          ["malformed: not an object", "a string", ["malformed_payload"]],
          ["malformed: x402Version 1", { ...good, x402Version: 1 }, ["malformed_payload"]],
          ["malformed: no authorization", { ...good, payload: { signature: good.payload.signature } }, ["malformed_payload"]],
          ["malformed: value not an integer", { ...good, payload: { ...good.payload, authorization: { ...good.payload.authorization, value: "1.5" } } }, ["malformed_payload"]],
          ["several at once", yield* sign({ to: stranger.address, value: "5", nonce: taken, validBefore: String(now + 5) }),
            ["payto_mismatch", "amount_mismatch", "nonce_mismatch", "insufficient_headroom"]]
        ]
        for (const [what, payload, reasons] of cases) {
          const r = yield* pay(payer, c.id, payload)
          expect(r.status, `${what}: ${r.text}`).toBe(422)
          expectFailure(r, 422, "payment_verification_failed", "verification", reasons)
          expect(r.body.error.details.retryable).toBe(false)
          expect(r.headers.get("retry-after")).toBeNull()
        }
        // payer_mismatch: a challenge that names its payer's wallet.
        const named = yield* challenge(payee, "1", { payer_address: stranger.address })
        const byOther = yield* Effect.promise(() => signPayment(payer.key, named.payment_required.accepts[0]!, now))
        expectFailure(yield* pay(payer, named.id, byOther), 422, "payment_verification_failed", "verification", ["payer_mismatch"])

        expect(yield* Effect.promise(() => chain.balanceOf(payer.address))).toBe(10_000_000n)
        const still = yield* call("GET", `/v1/payments/challenges/${c.id}`, { token: payer.token })
        expect(still.body.data.status).toBe("pending")
        const ok = yield* pay(payer, c.id, good)
        expect(ok.status, ok.text).toBe(200)
        const failed = yield* call("GET", "/v1/payments?status=failed&limit=100", { token: payer.token })
        expect(failed.body.meta.total).toBe(cases.length + 1)
        expect(failed.body.data[0].failure).toMatchObject({ code: "payment_verification_failed", category: "verification" })
      }))

    it.effect("the spend policy declines before verification: every declined subreason; the challenge stays pending", () =>
      Effect.gen(function*() {
        const payee = yield* newPayee
        const payer = yield* newPayer(50_000_000n)
        const c = yield* challenge(payee, "3")
        const req = c.payment_required.accepts[0]!
        const good = yield* Effect.promise(() => signPayment(payer.key, req, nowSeconds()))
        const policy = (body: unknown) =>
          Effect.gen(function*() {
            const r = yield* call("PATCH", "/v1/payments/policy", { token: payer.token, body })
            expect(r.status, r.text).toBe(200)
            return r.body.data
          })
        const declinedWith = (payload: unknown, reasons: ReadonlyArray<string>) =>
          Effect.gen(function*() {
            const r = yield* pay(payer, c.id, payload)
            expectFailure(r, 422, "payment_declined", "declined", reasons)
            expect(r.body.error.details.retryable).toBe(false)
          })

        yield* policy({ paused: true })
        yield* declinedWith(good, ["paused"])
        // Policy comes before verification: a broken payload is still only `paused`.
        yield* declinedWith({ ...good, payload: { ...good.payload, signature: "0x00" } }, ["paused"])
        yield* policy({ paused: false, per_payment_cap: "2.999999" })
        yield* declinedWith(good, ["per_payment_cap"])
        yield* policy({ per_payment_cap: null, daily_cap: "2" })
        yield* declinedWith(good, ["daily_cap"])
        yield* policy({ daily_cap: null, payee_allowlist: [payer.orgId, "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"] })
        yield* declinedWith(good, ["allowlist"])
        yield* policy({ paused: true, per_payment_cap: "1", daily_cap: "1" })
        yield* declinedWith(good, ["paused", "per_payment_cap", "daily_cap", "allowlist"])
        yield* policy({ paused: false, per_payment_cap: null, daily_cap: null, payee_allowlist: null })
        const zero = yield* Effect.promise(() => signPayment(payer.key, req, nowSeconds(), { value: "0" }))
        yield* declinedWith(zero, ["spend_non_positive_amount"])

        const still = yield* call("GET", `/v1/payments/challenges/${c.id}`, { token: payee.token })
        expect(still.body.data.status).toBe("pending")
        // A declined attempt is the payer's business: the payee does not see it.
        expect((yield* call("GET", "/v1/payments", { token: payee.token })).body.meta.total).toBe(0)
        // Allowlisted by organization id, by address (any case): pays.
        yield* policy({ payee_allowlist: [payee.orgId] })
        const ok = yield* pay(payer, c.id, good)
        expect(ok.status, ok.text).toBe(200)
        const c2 = yield* challenge(payee, "1")
        yield* policy({ payee_allowlist: [payee.wallet.toLowerCase()] })
        const ok2 = yield* pay(payer, c2.id, yield* Effect.promise(() => signPayment(payer.key, c2.payment_required.accepts[0]!, nowSeconds())))
        expect(ok2.status, ok2.text).toBe(200)
        const shown = yield* call("GET", "/v1/payments/policy", { token: payer.token })
        expect(shown.body.data).toMatchObject({ paused: false, per_payment_cap: null, daily_cap: null, spent_today: "4" })
      }))

    it.effect("an expired challenge is challenge_expired before anything else", () =>
      Effect.gen(function*() {
        const payee = yield* newPayee
        const payer = yield* newPayer(5_000_000n)
        const c = yield* challenge(payee, "1", { expires_in: 30 })
        const payload = yield* Effect.promise(() => signPayment(payer.key, c.payment_required.accepts[0]!, nowSeconds()))
        yield* call("PATCH", "/v1/payments/policy", { token: payer.token, body: { paused: true } })
        clock.advance(31_000)
        yield* Effect.gen(function*() {
          const r = yield* pay(payer, c.id, payload)
          expectFailure(r, 422, "challenge_expired", "settlement", ["challenge_expired"])
          const got = yield* call("GET", `/v1/payments/challenges/${c.id}`, { token: payee.token })
          expect(got.body.data.status).toBe("expired")
          const expiredList = yield* call("GET", "/v1/payments/challenges?status=expired", { token: payee.token })
          expect(expiredList.body.data.map((x: { id: string }) => x.id)).toEqual([c.id])
        }).pipe(Effect.ensuring(Effect.sync(() => clock.advance(-31_000))))
      }))

    it.effect("insufficient_funds is permanent (no Retry-After), leaves the challenge pending, and the same payload settles once funded", () =>
      Effect.gen(function*() {
        const chain = yield* TestChain
        const payee = yield* newPayee
        const payer = yield* newPayer(1_000_000n)
        const c = yield* challenge(payee, "2")
        const payload = yield* Effect.promise(() => signPayment(payer.key, c.payment_required.accepts[0]!, nowSeconds()))
        const r = yield* pay(payer, c.id, payload)
        expectFailure(r, 502, "settlement_failed", "settlement", ["insufficient_funds"])
        expect(r.body.error.details.retryable).toBe(false)
        expect(r.headers.get("retry-after")).toBeNull()
        expect((yield* call("GET", `/v1/payments/challenges/${c.id}`, { token: payer.token })).body.data.status).toBe("pending")
        yield* Effect.promise(() => chain.mint(payer.address, 1_000_000n))
        const ok = yield* pay(payer, c.id, payload)
        expect(ok.status, ok.text).toBe(200)
        expect(yield* Effect.promise(() => chain.balanceOf(payee.wallet))).toBe(2_000_000n)
      }))

    it.scoped("a facilitator key without gas is settlement_misconfigured; an unreachable chain is facilitator_unavailable", () =>
      Effect.gen(function*() {
        const chain = yield* TestChain
        const broke = yield* Effect.promise(() => chain.newAccount(0n))
        const misconfigured = yield* serviceWith(withBuiltIn(chain.rpcUrl, broke.key))
        const down = yield* serviceWith(withBuiltIn("http://127.0.0.1:9", broke.key))
        const payee = yield* newPayee
        const payer = yield* newPayer(5_000_000n)
        const c = yield* challenge(payee, "1")
        const payload = yield* Effect.promise(() => signPayment(payer.key, c.payment_required.accepts[0]!, nowSeconds()))
        const r = yield* pay(payer, c.id, payload, misconfigured.baseUrl)
        expectFailure(r, 502, "settlement_failed", "settlement", ["settlement_misconfigured"])
        expect(r.headers.get("retry-after")).toBeNull()
        const u = yield* pay(payer, c.id, payload, down.baseUrl)
        expectFailure(u, 502, "settlement_failed", "settlement", ["facilitator_unavailable"])
        expect(u.headers.get("retry-after")).toBe("5")
        expect(u.body.error.details).toMatchObject({ retryable: true, retry_after: 5 })
        expect(yield* Effect.promise(() => chain.balanceOf(payer.address))).toBe(5_000_000n)
        const ok = yield* pay(payer, c.id, payload)
        expect(ok.status, ok.text).toBe(200)
      }))

    it.scoped("through an HTTP facilitator: unavailable and generic failures carry Retry-After, refusals are misconfigured", () =>
      Effect.gen(function*() {
        const stub = yield* Effect.acquireRelease(Effect.promise(startFacilitatorStub), (s) => Effect.sync(s.close))
        const viaStub = yield* serviceWith(withHttpFacilitator(stub.url))
        const payee = yield* newPayee
        const payer = yield* newPayer(0n)
        const c = yield* challenge(payee, "1")
        const payload = yield* Effect.promise(() => signPayment(payer.key, c.payment_required.accepts[0]!, nowSeconds()))
        const attempt = (mode: typeof stub.mode) =>
          Effect.gen(function*() {
            stub.mode = mode
            return yield* pay(payer, c.id, payload, viaStub.baseUrl)
          })
        for (const status of [503, 502, 504, 429]) {
          const r = yield* attempt({ kind: "status", status, body: "unavailable" })
          expectFailure(r, 502, "settlement_failed", "settlement", ["facilitator_unavailable"])
          expect(r.headers.get("retry-after")).toBe("5")
        }
        const refused = yield* attempt({ kind: "refuse" })
        expectFailure(refused, 502, "settlement_failed", "settlement", ["facilitator_unavailable"])
        for (const body of ["<html>oops</html>", JSON.stringify({ success: false, errorReason: "something_odd" })]) {
          const r = yield* attempt({ kind: "status", status: 500, body })
          expectFailure(r, 502, "settlement_failed", "settlement", ["settlement_failed"])
          expect(r.headers.get("retry-after")).toBe("10")
          expect(r.body.error.details).toMatchObject({ retryable: true, retry_after: 10 })
        }
        const garbage = yield* attempt({ kind: "status", status: 200, body: "{\"not\":\"a settle response\"}" })
        expectFailure(garbage, 502, "settlement_failed", "settlement", ["settlement_failed"])
        const auth = yield* attempt({ kind: "status", status: 401, body: "{\"error\":\"bad key\"}" })
        expectFailure(auth, 502, "settlement_failed", "settlement", ["settlement_misconfigured"])
        expect(auth.headers.get("retry-after")).toBeNull()
        const broke = yield* attempt({
          kind: "status",
          status: 400,
          body: JSON.stringify({ success: false, errorReason: "invalid_exact_evm_insufficient_balance", transaction: "", network: "eip155:84532" })
        })
        expectFailure(broke, 502, "settlement_failed", "settlement", ["insufficient_funds"])
        const ok = yield* attempt({ kind: "ok" })
        expect(ok.status, ok.text).toBe(200)
        // What the facilitator was sent: the payload and the challenge's requirements.
        expect(stub.settles.at(-1)).toMatchObject({
          paymentPayload: { x402Version: 2 },
          paymentRequirements: { scheme: "exact", network: "eip155:84532", amount: "1000000", payTo: payee.wallet }
        })
      }))

    it.effect("payment.failed reaches the payer's endpoints with failure_category and reasons, signed", () =>
      Effect.gen(function*() {
        const hooks = yield* TestHooks
        const payee = yield* newPayee
        const payer = yield* newPayer(0n)
        const secret = yield* endpointFor(payer, "/ok/failed-events")
        const payeeSecret = yield* endpointFor(payee, "/ok/payee-failed-events")
        const c = yield* challenge(payee, "1")
        const req = c.payment_required.accepts[0]!
        const taken = (yield* challenge(payee, "1", { description: "another" })).payment_required.accepts[0]!.extra.nonce
        const bad = yield* Effect.promise(() => signPayment(payer.key, req, nowSeconds(), { value: "2", nonce: taken }))
        const r = yield* pay(payer, c.id, bad)
        expect(r.status).toBe(422)
        const poor = yield* Effect.promise(() => signPayment(payer.key, req, nowSeconds()))
        const p = yield* pay(payer, c.id, poor)
        expect(p.status).toBe(502)
        const hits = yield* eventually(() => hooks.on("/ok/failed-events").length >= 2 && hooks.on("/ok/failed-events"), 20_000, "failed events")
        const bodies = hits.map((h) => {
          expect(h.headers["mailroom-event-type"]).toBe("payment.failed")
          expect(verifySignature(h.headers["mailroom-signature"] as string, h.body, secret)).toBe(true)
          expect(verifySignature(h.headers["legacy-signature"] as string, h.body, secret)).toBe(true)
          return JSON.parse(h.body)
        })
        const byId = (id: string) => bodies.find((b) => b.payment.id === id)
        expect(byId(r.body.error.details.payment_id)).toMatchObject({
          event: "payment.failed",
          payment: {
            challenge_id: c.id,
            amount: "1",
            network: "eip155:84532",
            failure_category: "verification",
            reasons: ["amount_mismatch", "nonce_mismatch"],
            code: "payment_verification_failed",
            retryable: false
          }
        })
        expect(byId(p.body.error.details.payment_id)).toMatchObject({
          payment: { failure_category: "settlement", reasons: ["insufficient_funds"], code: "settlement_failed" }
        })
        // Failures of the HTTP flow are the payer's events; the payee hears of nothing.
        expect(hooks.on("/ok/payee-failed-events")).toEqual([])
        expect(payeeSecret).not.toBe(secret)
      }))

    it.effect("event_types decide which endpoints hear payment events", () =>
      Effect.gen(function*() {
        const hooks = yield* TestHooks
        const payee = yield* newPayee
        const payer = yield* newPayer(0n)
        // The organization fallback subscribes to mail only; a route-target endpoint asks for payment.failed.
        yield* endpointFor(payer, "/ok/mail-only", { event_types: ["email.received"] })
        const target = yield* call("POST", "/v1/endpoints", {
          token: payer.token,
          body: { url: hooks.url("/ok/payments-only"), is_route_target: true, rules: { event_types: ["payment.failed"] } }
        })
        expect(target.status, target.text).toBe(201)
        const c = yield* challenge(payee, "1")
        const r = yield* pay(payer, c.id, "garbage")
        expect(r.status).toBe(422)
        yield* eventually(() => hooks.on("/ok/payments-only").length === 1, 20_000, "subscribed endpoint")
        expect(hooks.on("/ok/mail-only")).toEqual([])
      }))
  })

  describe("races", () => {
    it.effect("concurrent pays of one challenge: one settles, the others are 409 conflict, money moves once", () =>
      Effect.gen(function*() {
        const chain = yield* TestChain
        const payee = yield* newPayee
        const payer = yield* newPayer(10_000_000n)
        const c = yield* challenge(payee, "1")
        const payload = yield* Effect.promise(() => signPayment(payer.key, c.payment_required.accepts[0]!, nowSeconds()))
        const results = yield* Effect.all(Array.from({ length: 6 }, () => pay(payer, c.id, payload)), { concurrency: "unbounded" })
        const statuses = results.map((r) => r.status).sort()
        expect(statuses.filter((s) => s === 200)).toHaveLength(1)
        expect(statuses.filter((s) => s === 409)).toHaveLength(5)
        for (const r of results.filter((x) => x.status === 409)) expect(r.body.error.code).toBe("conflict")
        expect(yield* Effect.promise(() => chain.balanceOf(payee.wallet))).toBe(1_000_000n)
        expect(yield* Effect.promise(() => chain.balanceOf(payer.address))).toBe(9_000_000n)
      }))

    it.effect("a signed payment replayed on another challenge is nonce_mismatch; it never settles twice", () =>
      Effect.gen(function*() {
        const chain = yield* TestChain
        const payee = yield* newPayee
        const payer = yield* newPayer(10_000_000n)
        // Two bodies: the same body twice within 60 s is one challenge (a derived idempotency key).
        const a = yield* challenge(payee, "1", { description: "first" })
        const b = yield* challenge(payee, "1", { description: "second" })
        const payload = yield* Effect.promise(() => signPayment(payer.key, a.payment_required.accepts[0]!, nowSeconds()))
        const [first, replay] = yield* Effect.all([pay(payer, a.id, payload), pay(payer, b.id, payload)], { concurrency: 2 })
        expect(first.status, first.text).toBe(200)
        expectFailure(replay, 422, "payment_verification_failed", "verification", ["nonce_mismatch"])
        const other = yield* newPayer(0n)
        const byOtherOrg = yield* pay(other, b.id, payload)
        expectFailure(byOtherOrg, 422, "payment_verification_failed", "verification", ["nonce_mismatch"])
        expect(yield* Effect.promise(() => chain.balanceOf(payee.wallet))).toBe(1_000_000n)
        const sql = yield* SqlClient.SqlClient
        const settled = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM payments WHERE nonce = ${payload.payload.authorization.nonce} AND status = 'settled'`
        expect(settled[0]!.n).toBe(1)
      }))
  })
})
