/**
 * Payments with standard x402 payers, on a real chain (anvil with the EIP-3009 test token at Base
 * Sepolia's USDC address, the built-in facilitator): the reference client (npm `@x402/core`
 * `x402Client` with `@x402/evm` `registerExactEvmScheme`, unchanged) pays a challenge; a nonce binds
 * to the first challenge it pays; the validity window is counted from max(validAfter, now) at its exact
 * boundary (the service clock pinned to a second); payout, payer and allowlist addresses in any case;
 * a malleable (high-s) signature refused.
 */
import { describe, expect, layer } from "@effect/vitest"
import { x402Client } from "@x402/core/client"
import type { PaymentRequired } from "@x402/core/types"
import { registerExactEvmScheme } from "@x402/evm/exact/client"
import { Clock, Context, Effect, Layer } from "effect"
import { getAddress, type Hex } from "viem"
import { privateKeyToAccount } from "viem/accounts"
import { Provisioning } from "../src/identity/Provisioning.js"
import { type Chain, startAnvil } from "./support/chain/anvil.js"
import { testDatabase, testServerOn } from "./support/harness.js"
import { call } from "./support/http.js"
import { grantPayments, randomNonce, type Requirements, signPayment } from "./support/payments.js"

class TestChain extends Context.Tag("test/Chain")<TestChain, Chain>() {}

/** The service's clock: the machine's, or pinned to one instant while a test needs it still. */
const pinnable = (() => {
  let pinned: number | null = null
  const now = () => pinned ?? Date.now()
  const clock: Clock.Clock = {
    [Clock.ClockTypeId]: Clock.ClockTypeId,
    unsafeCurrentTimeMillis: now,
    unsafeCurrentTimeNanos: () => BigInt(now()) * 1_000_000n,
    currentTimeMillis: Effect.sync(now),
    currentTimeNanos: Effect.sync(() => BigInt(now()) * 1_000_000n),
    sleep: (d) => Effect.sleep(d).pipe(Effect.withClock(Clock.make()))
  }
  return {
    layer: Layer.setClock(clock),
    /** Runs `self` with the service clock standing still at `ms`. */
    at: <A, E, R>(ms: number, self: Effect.Effect<A, E, R>) =>
      Effect.acquireUseRelease(Effect.sync(() => (pinned = ms)), () => self, () => Effect.sync(() => (pinned = null)))
  }
})()

const Env = Layer.unwrapScoped(Effect.gen(function*() {
  const chain = yield* Effect.acquireRelease(Effect.promise(startAnvil), (c) => Effect.sync(c.stop))
  const facilitator = yield* Effect.promise(() => chain.newAccount(100n))
  return Provisioning.Default.pipe(
    Layer.provideMerge(testServerOn().pipe(
      Layer.provide(pinnable.layer),
      Layer.provideMerge(testDatabase({
        X402_RPC_URL: chain.rpcUrl,
        X402_FACILITATOR_PRIVATE_KEY: facilitator.key,
        DNS_SERVER: "127.0.0.1:9"
      }))
    )),
    Layer.merge(Layer.succeed(TestChain, chain))
  )
}))

interface Org {
  readonly orgId: string
  readonly token: string
}

const newOrg = Effect.gen(function*() {
  const p = yield* Provisioning
  const org = yield* p.createOrganization({ name: "Interop", plan: "developer" })
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
  readonly payment_required: PaymentRequired & { accepts: Array<Requirements> }
}

const challenge = (payee: Org, amount: string, extra: Record<string, unknown> = {}) =>
  Effect.gen(function*() {
    const r = yield* call("POST", "/v1/payments/challenges", { token: payee.token, body: { amount, ...extra } })
    expect(r.status, r.text).toBe(201)
    return r.body.data as Challenge
  })

/** What any x402 payer does: the reference client, unchanged, over the challenge's PaymentRequired. */
const referencePayload = (key: Hex, c: Challenge) =>
  Effect.promise(async () => {
    const client = new x402Client()
    registerExactEvmScheme(client, { signer: privateKeyToAccount(key) })
    return client.createPaymentPayload(c.payment_required)
  })

const pay = (payer: Org, challengeId: string, payload: unknown) =>
  call("POST", `/v1/payments/challenges/${challengeId}/pay`, { token: payer.token, body: { payment_payload: payload } })

const expectVerification = (r: { status: number; text: string; body: { error: { code: string; details: Record<string, unknown> } } }, reasons: ReadonlyArray<string>) => {
  expect(r.status, r.text).toBe(422)
  expect(r.body.error.code).toBe("payment_verification_failed")
  expect(r.body.error.details.failure_category).toBe("verification")
  expect(r.body.error.details.reasons).toEqual(reasons)
}

const SECP256K1_N = 0xfffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141n

/** The malleable twin of a 65-byte signature: s → n − s, the recovery bit flipped. Same signer. */
const highS = (signature: string): Hex => {
  const r = signature.slice(2, 66)
  const s = BigInt(`0x${signature.slice(66, 130)}`)
  const v = Number.parseInt(signature.slice(130, 132), 16)
  const flipped = v === 27 ? 28 : v === 28 ? 27 : v ^ 1
  return `0x${r}${(SECP256K1_N - s).toString(16).padStart(64, "0")}${flipped.toString(16).padStart(2, "0")}`
}

layer(Env, { timeout: 300_000, excludeTestServices: true })("payments with standard x402 payers", (it) => {
  describe("the reference x402 client", () => {
    it.effect("x402Client with registerExactEvmScheme pays a challenge unchanged: settled, the token moved on chain", () =>
      Effect.gen(function*() {
        const chain = yield* TestChain
        const payee = yield* newPayee
        const payer = yield* newPayer(5_000_000n)
        // (The client's default spend control allows at most $1 a payment.)
        const c = yield* challenge(payee, "0.75")
        const payload = yield* referencePayload(payer.key, c)
        const auth = (payload.payload as { authorization: Record<string, string> }).authorization
        // What makes it a standard payer: its own random nonce, valid since 0, until now + maxTimeoutSeconds.
        expect(auth.validAfter).toBe("0")
        expect(auth.nonce).not.toBe(c.payment_required.accepts[0]!.extra.nonce)
        const r = yield* pay(payer, c.id, payload)
        expect(r.status, r.text).toBe(200)
        expect(r.body.data).toMatchObject({ status: "settled", amount: "0.75", payer_address: payer.address, pay_to: payee.wallet })
        const receipt = yield* Effect.promise(() => chain.receipt(r.body.data.transaction))
        expect(receipt?.status).toBe("success")
        expect(yield* Effect.promise(() => chain.balanceOf(payer.address))).toBe(4_250_000n)
        expect(yield* Effect.promise(() => chain.balanceOf(payee.wallet))).toBe(750_000n)
        expect(yield* Effect.promise(() => chain.authorizationUsed(payer.address, auth.nonce as Hex))).toBe(true)
        const shown = yield* call("GET", `/v1/payments/challenges/${c.id}`, { token: payee.token })
        expect(shown.body.data).toMatchObject({ status: "paid", payment_id: r.body.data.id })
      }))

    it.effect("a nonce binds to the first challenge it pays: the same (payer, nonce) for another challenge is nonce_mismatch", () =>
      Effect.gen(function*() {
        const chain = yield* TestChain
        const payee = yield* newPayee
        const payer = yield* newPayer(0n)
        const a = yield* challenge(payee, "1", { description: "a" })
        const b = yield* challenge(payee, "1", { description: "b" })
        // Same payee, same amount: a payload for `a` is word for word a valid payment of `b` too.
        const forA = yield* referencePayload(payer.key, a)
        const nonce = (forA.payload as { authorization: { nonce: Hex } }).authorization.nonce
        // The first pay binds the nonce to `a`, even though it cannot settle (no funds yet).
        const poor = yield* pay(payer, a.id, forA)
        expect(poor.status, poor.text).toBe(502)
        expect(poor.body.error.details.reasons).toEqual(["insufficient_funds"])
        expectVerification(yield* pay(payer, b.id, forA), ["nonce_mismatch"])
        // Signed afresh for `b` with that nonce: still bound to `a`.
        const resigned = yield* Effect.promise(() =>
          signPayment(payer.key, b.payment_required.accepts[0]!, Date.now() / 1000, { nonce, validAfter: "0" }))
        expectVerification(yield* pay(payer, b.id, resigned), ["nonce_mismatch"])
        // On its own challenge the same payload settles once funded.
        yield* Effect.promise(() => chain.mint(payer.address, 1_000_000n))
        const ok = yield* pay(payer, a.id, forA)
        expect(ok.status, ok.text).toBe(200)
        expectVerification(yield* pay(payer, b.id, forA), ["nonce_mismatch"])
        // The binding is the payer's: another wallet may use the same 32 bytes for `b`.
        const other = yield* newPayer(1_000_000n)
        const theirs = yield* Effect.promise(() =>
          signPayment(other.key, b.payment_required.accepts[0]!, Date.now() / 1000, { nonce, validAfter: "0" }))
        const paidB = yield* pay(other, b.id, theirs)
        expect(paidB.status, paidB.text).toBe(200)
        expect(yield* Effect.promise(() => chain.balanceOf(payee.wallet))).toBe(2_000_000n)
        // A challenge's suggested nonce is its own from the start: another challenge refuses it.
        const c = yield* challenge(payee, "1", { description: "c" })
        const d = yield* challenge(payee, "1", { description: "d" })
        const withC = yield* Effect.promise(() =>
          signPayment(payer.key, d.payment_required.accepts[0]!, Date.now() / 1000, { nonce: c.payment_required.accepts[0]!.extra.nonce }))
        expectVerification(yield* pay(payer, d.id, withC), ["nonce_mismatch"])
      }))

    it.effect("the same reference payload racing for two challenges: one settles, the other is nonce_mismatch", () =>
      Effect.gen(function*() {
        const chain = yield* TestChain
        const payee = yield* newPayee
        const payer = yield* newPayer(5_000_000n)
        const a = yield* challenge(payee, "1", { description: "race a" })
        const b = yield* challenge(payee, "1", { description: "race b" })
        const payload = yield* referencePayload(payer.key, a)
        const results = yield* Effect.all([pay(payer, a.id, payload), pay(payer, b.id, payload)], { concurrency: 2 })
        expect(results.map((r) => r.status).sort()).toEqual([200, 422])
        expectVerification(results.find((r) => r.status === 422)!, ["nonce_mismatch"])
        expect(yield* Effect.promise(() => chain.balanceOf(payee.wallet))).toBe(1_000_000n)
      }))

    it.effect("window_too_wide is validBefore − max(validAfter, now) > 86,400: at the boundary it pays, one second more it does not", () =>
      Effect.gen(function*() {
        const chain = yield* TestChain
        const payee = yield* newPayee
        const payer = yield* newPayer(5_000_000n)
        const c = yield* challenge(payee, "1")
        const req = c.payment_required.accepts[0]!
        const now = Math.floor(Date.now() / 1000)
        yield* pinnable.at(now * 1000, Effect.gen(function*() {
          const sign = (o: Parameters<typeof signPayment>[3]) => Effect.promise(() => signPayment(payer.key, req, now, o))
          const fresh = randomNonce
          // validAfter 0 (a standard payer) and validAfter in the past count from now alike.
          expectVerification(yield* pay(payer, c.id, yield* sign({ validAfter: "0", validBefore: String(now + 86_401), nonce: fresh() })),
            ["window_too_wide"])
          expectVerification(
            yield* pay(payer, c.id, yield* sign({ validAfter: String(now - 3_600), validBefore: String(now + 86_401), nonce: fresh() })),
            ["window_too_wide"]
          )
          // A validAfter still to come is not_yet_valid, and its window counts from it.
          expectVerification(
            yield* pay(payer, c.id, yield* sign({ validAfter: String(now + 60), validBefore: String(now + 60 + 86_401), nonce: fresh() })),
            ["window_too_wide", "not_yet_valid"]
          )
          expectVerification(
            yield* pay(payer, c.id, yield* sign({ validAfter: String(now + 60), validBefore: String(now + 60 + 86_400), nonce: fresh() })),
            ["not_yet_valid"]
          )
          const ok = yield* pay(payer, c.id, yield* sign({ validAfter: "0", validBefore: String(now + 86_400), nonce: fresh() }))
          expect(ok.status, ok.text).toBe(200)
        }))
        expect(yield* Effect.promise(() => chain.balanceOf(payee.wallet))).toBe(1_000_000n)
      }))
  })

  describe("signatures", () => {
    it.effect("a high-s (malleable) twin of a valid signature is signature_unrecoverable; the canonical one settles", () =>
      Effect.gen(function*() {
        const chain = yield* TestChain
        const payee = yield* newPayee
        const payer = yield* newPayer(5_000_000n)
        const c = yield* challenge(payee, "1")
        // Signed as the CLI signs (the challenge's own nonce), so nothing but the signature's form is at stake.
        const good = yield* Effect.promise(() => signPayment(payer.key, c.payment_required.accepts[0]!, Date.now() / 1000))
        const signature = good.payload.signature as Hex
        const twin = { ...good, payload: { ...good.payload, signature: highS(signature) } }
        expectVerification(yield* pay(payer, c.id, twin), ["signature_unrecoverable"])
        expect(yield* Effect.promise(() => chain.balanceOf(payer.address))).toBe(5_000_000n)
        const ok = yield* pay(payer, c.id, good)
        expect(ok.status, ok.text).toBe(200)
      }))
  })

  describe("addresses in any case", () => {
    it.effect("payout addresses: all lowercase or uppercase accepted and shown in EIP-55 form; a wrong mixed-case checksum is 400", () =>
      Effect.gen(function*() {
        const org = yield* newOrg
        const checksummed = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"
        const put = (address: string) =>
          call("PUT", "/v1/payments/payout-addresses/eip155:84532", { token: org.token, body: { address } })
        for (const written of [checksummed.toLowerCase(), `0x${checksummed.slice(2).toUpperCase()}`, checksummed]) {
          const r = yield* put(written)
          expect(r.status, `${written}: ${r.text}`).toBe(200)
          expect(r.body.data.address).toBe(checksummed)
          const list = yield* call("GET", "/v1/payments/payout-addresses", { token: org.token })
          expect(list.body.data.map((a: { address: string }) => a.address)).toEqual([checksummed])
          const c = yield* challenge(org, "1", { description: written })
          expect(c.payment_required.accepts[0]!.payTo).toBe(checksummed)
        }
        for (const bad of ["0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAeD", "0x5AAeb6053F3E94C9b9A09f33669435E7Ef1BeAed", "0x5aaeb6053f3e94c9b9a09f33669435e7ef1beae",
          "0X5AAEB6053F3E94C9B9A09F33669435E7EF1BEAED", "0x0000000000000000000000000000000000000000"]) {
          const r = yield* put(bad)
          expect(r.status, `${bad}: ${r.text}`).toBe(400)
          expect(r.body.error.code).toBe("validation_error")
          expect(r.body.error.details.issues[0].field).toBe("address")
        }
        expect((yield* put("0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAeD")).body.error.message).toMatch(/checksum/)
      }))

    it.effect("the payer_address of a challenge and the policy's allowlist follow the same rule", () =>
      Effect.gen(function*() {
        const payee = yield* newPayee
        const payer = yield* newPayer(5_000_000n)
        const lower = payer.address.toLowerCase()
        const c = yield* challenge(payee, "1", { payer_address: lower })
        expect((c as unknown as { payer_address: string }).payer_address).toBe(payer.address)
        const refused = yield* call("POST", "/v1/payments/challenges", {
          token: payee.token,
          body: { amount: "1", payer_address: "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAeD" }
        })
        expect(refused.status, refused.text).toBe(400)
        expect(refused.body.error.details.issues[0].field).toBe("payer_address")

        const upper = `0x${payee.wallet.slice(2).toUpperCase()}`
        const set = yield* call("PATCH", "/v1/payments/policy", { token: payer.token, body: { payee_allowlist: [upper, payee.orgId.toUpperCase()] } })
        expect(set.status, set.text).toBe(200)
        expect(set.body.data.payee_allowlist).toEqual([getAddress(payee.wallet), payee.orgId])
        const badList = yield* call("PATCH", "/v1/payments/policy", {
          token: payer.token,
          body: { payee_allowlist: ["0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAeD"] }
        })
        expect(badList.status, badList.text).toBe(400)
        expect(badList.body.error.code).toBe("validation_error")
        expect(badList.text).toMatch(/checksum/)
        // Allowlisted by the address written in capitals: it pays.
        yield* call("PATCH", "/v1/payments/policy", { token: payer.token, body: { payee_allowlist: [upper] } })
        const ok = yield* pay(payer, c.id, yield* referencePayload(payer.key, c))
        expect(ok.status, ok.text).toBe(200)
      }))
  })
})
