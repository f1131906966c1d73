/**
 * Settlements that do not end in the request that started them, on a real chain (anvil, the
 * built-in facilitator): a client that hangs up while its payment settles does not strand it; a
 * payment a stopped process left `settling` is ended by the reconciler from what the chain says
 * (authorization used → settled with its transaction; unused and past validBefore → failed, the
 * challenge payable again; unused and still valid → left for a later pass).
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Context, Duration, Effect, Layer } from "effect"
import { createWalletClient, getAddress, type Hex, http, parseAbi, parseSignature, publicActions } from "viem"
import { privateKeyToAccount } from "viem/accounts"
import { baseSepolia } from "viem/chains"
import { OrgEvents } from "../src/events/OrgEvents.js"
import { DeliveryQueue } from "../src/deliveries/Queue.js"
import { Provisioning } from "../src/identity/Provisioning.js"
import { SettlementReconcilerLive } from "../src/payments/Reconciler.js"
import { PaymentsLive } from "../src/payments/Service.js"
import { type Chain, startAnvil, USDC } from "./support/chain/anvil.js"
import { makeManualClock, testDatabase, testServerOn } from "./support/harness.js"
import { eventually } from "./support/hooks.js"
import { call } from "./support/http.js"
import {
  type FacilitatorStub,
  grantPayments,
  randomNonce,
  type Requirements,
  serviceWith,
  signPayment,
  startFacilitatorStub,
  withHttpFacilitator
} from "./support/payments.js"

class TestChain extends Context.Tag("test/Chain")<TestChain, Chain>() {}
class Stub extends Context.Tag("test/FacilitatorStub")<Stub, FacilitatorStub>() {}

const clock = makeManualClock()
const SETTLE_TIMEOUT_MS = 5_000
/** The reconciler takes a payment as abandoned this long after it was claimed. */
const ABANDONED_MS = SETTLE_TIMEOUT_MS + 60_000

const Env = Layer.unwrapScoped(Effect.gen(function*() {
  const chain = yield* Effect.acquireRelease(Effect.promise(startAnvil), (c) => Effect.sync(c.stop))
  const stub = yield* Effect.acquireRelease(Effect.promise(startFacilitatorStub), (s) => Effect.sync(s.close))
  const facilitator = yield* Effect.promise(() => chain.newAccount(100n))
  const db = testDatabase({
    X402_RPC_URL: chain.rpcUrl,
    X402_FACILITATOR_PRIVATE_KEY: facilitator.key,
    X402_SETTLE_TIMEOUT: `${SETTLE_TIMEOUT_MS}ms`,
    DELIVERY_RETRY_DELAYS: "200ms",
    DELIVERY_TIMEOUT: "2s",
    DNS_SERVER: "127.0.0.1:9"
  })
  const reconciler = SettlementReconcilerLive({ pollMs: 200 }).pipe(
    Layer.provide(PaymentsLive.pipe(Layer.provide(OrgEvents.Default), Layer.provide(DeliveryQueue.Default))),
    Layer.provide(clock.layer)
  )
  return Layer.mergeAll(Provisioning.Default, reconciler, testServerOn().pipe(Layer.provide(clock.layer))).pipe(
    Layer.provideMerge(db),
    Layer.merge(Layer.succeed(TestChain, chain)),
    Layer.merge(Layer.succeed(Stub, stub))
  )
}))

interface Org {
  readonly orgId: string
  readonly token: string
}

const newOrg = Effect.gen(function*() {
  const p = yield* Provisioning
  const org = yield* p.createOrganization({ name: "Recovery", plan: "developer" })
  const key = yield* p.issueApiKey(org.id)
  yield* grantPayments(org.id)
  return { orgId: org.id, token: key.apiKey } satisfies Org
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

interface Challenge {
  readonly id: string
  readonly payment_required: { accepts: Array<Requirements> }
}

const challenge = (payee: Org, amount: string, description: string) =>
  Effect.gen(function*() {
    const r = yield* call("POST", "/v1/payments/challenges", { token: payee.token, body: { amount, description } })
    expect(r.status, r.text).toBe(201)
    return r.body.data as Challenge
  })

const nowSeconds = () => clock.clock.unsafeCurrentTimeMillis() / 1000

type Signed = Awaited<ReturnType<typeof signPayment>>

/**
 * What a process killed during settlement leaves behind, exactly as the pay pipeline writes it when
 * it claims a challenge: the challenge claimed by a `settling` payment (and the nonce bound to it).
 */
const leftSettling = (payer: Org, c: Challenge, payload: Signed) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const a = payload.payload.authorization
    const id = crypto.randomUUID()
    const now = new Date(clock.clock.unsafeCurrentTimeMillis())
    const rows = yield* sql<{ org_id: string; amount: string; pay_to: string; network: string; asset: string }>`
      SELECT org_id, amount::text AS amount, pay_to, network, asset FROM payment_challenges WHERE id = ${c.id}`
    const ch = rows[0]!
    yield* sql`UPDATE payment_challenges SET payment_id = ${id} WHERE id = ${c.id} AND payment_id IS NULL`
    yield* sql`INSERT INTO payment_nonces (network, asset, payer_address, nonce, challenge_id)
               VALUES (${ch.network}, ${ch.asset.toLowerCase()}, ${a.from.toLowerCase()}, ${a.nonce.toLowerCase()}, ${c.id})`
    yield* sql`INSERT INTO payments (id, challenge_id, rail, payer_org_id, payee_org_id, status, amount, asset, network,
                 payer_address, pay_to, nonce, spent_at, created_at, valid_before)
               VALUES (${id}, ${c.id}, 'http', ${payer.orgId}, ${ch.org_id}, 'settling', ${ch.amount}::numeric, ${ch.asset},
                 ${ch.network}, ${getAddress(a.from)}, ${ch.pay_to}, ${a.nonce.toLowerCase()}, ${now}, ${now},
                 ${new Date(Number(a.validBefore) * 1000)})`
    return id
  })

const transferAbi = parseAbi([
  "function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, uint8 v, bytes32 r, bytes32 s)"
])

/** What the dead process's facilitator had broadcast: the signed authorization, used on chain. */
const broadcast = (payload: Signed) =>
  Effect.gen(function*() {
    const chain = yield* TestChain
    const gas = yield* Effect.promise(() => chain.newAccount(1n))
    const wallet = createWalletClient({ account: privateKeyToAccount(gas.key), chain: baseSepolia, transport: http(chain.rpcUrl) })
      .extend(publicActions)
    const a = payload.payload.authorization
    const sig = parseSignature(payload.payload.signature as Hex)
    return yield* Effect.promise(async () => {
      const hash = await wallet.writeContract({
        address: USDC,
        abi: transferAbi,
        functionName: "transferWithAuthorization",
        args: [getAddress(a.from), getAddress(a.to), BigInt(a.value), BigInt(a.validAfter), BigInt(a.validBefore), a.nonce as Hex,
          Number(sig.v ?? BigInt(sig.yParity + 27)), sig.r, sig.s]
      })
      await wallet.waitForTransactionReceipt({ hash })
      return hash
    })
  })

/** Polls `check` (an effect) until it answers something. */
const until = <A, E, R>(check: Effect.Effect<A | false | undefined, E, R>, what: string) =>
  Effect.gen(function*() {
    const end = Date.now() + 30_000
    for (;;) {
      const v = yield* check
      if (v !== undefined && v !== false) return v
      if (Date.now() > end) return yield* Effect.dieMessage(`timed out waiting for ${what}`)
      yield* Effect.sleep("100 millis")
    }
  })

const paymentOf = (org: Org, id: string) => Effect.map(call("GET", `/v1/payments/${id}`, { token: org.token }), (r) => r.body.data)

layer(Env, { timeout: 300_000, excludeTestServices: true })("settlements that outlive their request", (it) => {
  describe("a client that hangs up", () => {
    it.scoped("mid-settlement: the payment still ends (settled), the challenge is paid, nothing is left settling", () =>
      Effect.gen(function*() {
        const stub = yield* Stub
        const payee = yield* newPayee
        const payer = yield* newPayer(0n)
        const c = yield* challenge(payee, "1", "hung up")
        const payload = yield* Effect.promise(() => signPayment(payer.key, c.payment_required.accepts[0]!, nowSeconds()))
        const viaStub = yield* serviceWith((conf) => ({ ...withHttpFacilitator(stub.url)(conf), x402SettleTimeout: Duration.minutes(5) }))
        stub.mode = { kind: "hold" }
        const seen = stub.settles.length
        const abort = new AbortController()
        const request = fetch(`${viaStub.baseUrl}/v1/payments/challenges/${c.id}/pay`, {
          method: "POST",
          headers: { authorization: `Bearer ${payer.token}`, "content-type": "application/json" },
          body: JSON.stringify({ payment_payload: payload }),
          signal: abort.signal
        }).catch((e: unknown) => e)
        yield* Effect.ensuring(
          Effect.gen(function*() {
            yield* eventually(() => stub.settles.length > seen, 30_000, "the settlement reached the facilitator")
            abort.abort()
            yield* Effect.promise(() => request)
            // Give the service time to see the hang-up before the facilitator answers.
            yield* Effect.sleep("1 second")
            stub.mode = { kind: "ok" }
            stub.release()
            const settled = yield* until(
              Effect.map(call("GET", "/v1/payments?direction=out", { token: payer.token }), (r) => r.body.data[0]?.status === "settled" && r.body.data[0]),
              "the payment settled"
            )
            expect(settled).toMatchObject({ challenge_id: c.id, status: "settled" })
            const got = yield* call("GET", `/v1/payments/challenges/${c.id}`, { token: payee.token })
            expect(got.body.data).toMatchObject({ status: "paid", payment_id: settled.id })
          }),
          Effect.sync(() => {
            stub.mode = { kind: "ok" }
            stub.release()
          })
        )
      }))
  })

  describe("the reconciler", () => {
    it.effect("ends what a stopped process left settling: used on chain → settled; expired unused → failed and payable again; still valid → left", () =>
      Effect.gen(function*() {
        const chain = yield* TestChain
        const payee = yield* newPayee
        const payer = yield* newPayer(10_000_000n)
        const now = Math.floor(nowSeconds())
        const [landed, lost, pending] = yield* Effect.all([
          challenge(payee, "1", "landed"),
          challenge(payee, "2", "lost"),
          challenge(payee, "3", "pending")
        ])
        const sign = (c: Challenge, validBefore: number) =>
          Effect.promise(() => signPayment(payer.key, c.payment_required.accepts[0]!, now, { validBefore: String(validBefore) }))
        const landedPayload = yield* sign(landed, now + 300)
        const lostPayload = yield* sign(lost, now + 60)
        const pendingPayload = yield* sign(pending, now + 3_600)
        const landedId = yield* leftSettling(payer, landed, landedPayload)
        const lostId = yield* leftSettling(payer, lost, lostPayload)
        const pendingId = yield* leftSettling(payer, pending, pendingPayload)

        // Stuck as a stopped process leaves it: settling, the challenge not payable.
        expect((yield* paymentOf(payer, landedId)).status).toBe("settling")
        const blocked = yield* call("POST", `/v1/payments/challenges/${lost.id}/pay`, { token: payer.token, body: { payment_payload: lostPayload } })
        expect(blocked.status, blocked.text).toBe(409)

        const tx = yield* broadcast(landedPayload)
        // The chain moves past the lost authorization's validBefore; the service's clock past the abandonment delay.
        yield* Effect.promise(() => chain.setNextBlockTime(now + 61))
        yield* Effect.promise(() => chain.mint(payee.wallet, 0n))
        clock.advance(ABANDONED_MS + 1_000)

        const settled = yield* until(Effect.map(paymentOf(payer, landedId), (p) => p.status === "settled" && p), "the landed payment settled")
        expect(settled).toMatchObject({ status: "settled", transaction: tx, amount: "1" })
        expect((yield* call("GET", `/v1/payments/challenges/${landed.id}`, { token: payee.token })).body.data).toMatchObject({
          status: "paid",
          payment_id: landedId
        })
        const failed = yield* until(Effect.map(paymentOf(payer, lostId), (p) => p.status === "failed" && p), "the lost payment failed")
        expect(failed.failure).toMatchObject({ code: "settlement_failed", category: "settlement", reasons: ["settlement_failed"] })
        // Both were ended by one pass that also looked at the third: still valid on chain, it waits.
        expect((yield* paymentOf(payer, pendingId)).status).toBe("settling")

        // The lost challenge is payable again, with a new authorization.
        const fresh = yield* Effect.promise(() => signPayment(payer.key, lost.payment_required.accepts[0]!, nowSeconds(), {
          nonce: randomNonce()
        }))
        const repaid = yield* call("POST", `/v1/payments/challenges/${lost.id}/pay`, { token: payer.token, body: { payment_payload: fresh } })
        expect(repaid.status, repaid.text).toBe(200)
        expect(yield* Effect.promise(() => chain.balanceOf(payee.wallet))).toBe(3_000_000n)
        expect(yield* Effect.promise(() => chain.balanceOf(payer.address))).toBe(7_000_000n)
      }))
  })
})
