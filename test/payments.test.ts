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
  randomNonce,
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

    it.effect("payout addresses must be EIP-55 checksummed, on an offered network; a challenge needs one", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const good = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"
        const noPayout = yield* call("POST", "/v1/payments/challenges", { token: org.token, body: { amount: "1" } })
        expect(noPayout.status, noPayout.text).toBe(422)
        expect(noPayout.body.error).toMatchObject({ code: "no_payout_address", details: { network: "eip155:84532" } })
        for (const bad of [good.toLowerCase(), "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAeD", "0x1234", "not an address",
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
})
