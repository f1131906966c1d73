/**
 * Payments benchmark: `npx tsx scripts/bench-payments.ts` (embedded PGlite), or with
 * `DATABASE_URL=postgres://…` on PostgreSQL. The service runs in this process over a scratch
 * database, as the tests run it.
 *
 * 1. Verification through `POST /v1/payments/challenges/{id}/pay` with settlement paused: the
 *    facilitator (a loopback stub) answers every settle at once with 503, so each request does all
 *    of a pay but the chain (expiry, the spend policy with its lock, our verifier recovering the
 *    signature, the claim, the failure record and its `payment.failed` event). Also payloads that
 *    fail verification (signer_mismatch). Figures: requests per second and latency percentiles.
 * 2. End to end on anvil: pay → settled (a real transaction through the built-in facilitator), one
 *    at a time and 4 at once; p50/p99.
 *
 * Requests rotate over many payer organizations: the API's limit is 120 requests per minute each.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Layer } from "effect"
import { generatePrivateKey } from "viem/accounts"
import { Provisioning } from "../src/identity/Provisioning.js"
import { startAnvil } from "../test/support/chain/anvil.js"
import { TestServer, testService } from "../test/support/harness.js"
import { fetchReply } from "../test/support/http.js"
import { addressOf, type Requirements, signPayment, startFacilitatorStub } from "../test/support/payments.js"

const VERIFY_SECONDS = Number(process.env.BENCH_SECONDS ?? 10)
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 8)
const E2E_PAYMENTS = Number(process.env.BENCH_E2E ?? 100)

const percentile = (sorted: ReadonlyArray<number>, p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN
const fmt = (ms: number) => `${ms.toFixed(1)} ms`
const summary = (label: string, latencies: Array<number>, seconds: number) => {
  const s = [...latencies].sort((a, b) => a - b)
  console.log(
    `${label}: ${latencies.length} requests in ${seconds.toFixed(1)} s = ${(latencies.length / seconds).toFixed(0)}/s; ` +
      `p50 ${fmt(percentile(s, 50))}, p90 ${fmt(percentile(s, 90))}, p99 ${fmt(percentile(s, 99))}, max ${fmt(s.at(-1) ?? NaN)}`
  )
}

interface Org {
  readonly orgId: string
  readonly token: string
}

const setup = (orgs: number) =>
  Effect.gen(function*() {
    const p = yield* Provisioning
    const sql = yield* SqlClient.SqlClient
    const make = Effect.gen(function*() {
      const org = yield* p.createOrganization({ name: "Bench", plan: "developer" })
      const key = yield* p.issueApiKey(org.id)
      yield* sql`INSERT INTO organization_entitlements (org_id, entitlement) VALUES (${org.id}, 'payments')`
      return { orgId: org.id, token: key.apiKey } satisfies Org
    })
    const payees = yield* Effect.all(Array.from({ length: 10 }, () => make))
    const payers = yield* Effect.all(Array.from({ length: orgs }, () => make))
    return { payees, payers }
  })

const run = (mode: { readonly stubUrl: string } | { readonly fund: (address: `0x${string}`) => Promise<void> }) =>
  Effect.gen(function*() {
    const server = yield* TestServer
    const api = (method: string, path: string, token: string, body?: unknown) =>
      fetchReply(`${server.baseUrl}${path}`, method, { token, ...(body !== undefined ? { body } : {}) })
    const { payees, payers } = yield* setup("stubUrl" in mode ? 60 : 20)
    for (const payee of payees) {
      const payout = addressOf(generatePrivateKey())
      const set = yield* Effect.promise(() => api("PUT", "/v1/payments/payout-addresses/eip155:84532", payee.token, { address: payout }))
      if (set.status !== 200) throw new Error(set.text)
    }
    let seq = 0
    const newChallenge = async (amount: string) => {
      const payee = payees[seq % payees.length]!
      const r = await api("POST", "/v1/payments/challenges", payee.token, { amount, description: `bench ${++seq}`, expires_in: 86_400 })
      if (r.status !== 201) throw new Error(r.text)
      return r.body.data as { id: string; payment_required: { accepts: Array<Requirements> } }
    }
    let next = 0
    const payer = () => payers[next++ % payers.length]!

    if ("stubUrl" in mode) {
      // 1. Verification with settlement paused.
      const key = generatePrivateKey()
      const other = generatePrivateKey()
      for (const [label, signer, expected] of [
        ["verify ok, settlement paused (502 facilitator_unavailable)", key, 502],
        ["verify fails (422 signer_mismatch)", other, 422]
      ] as const) {
        const cs = yield* Effect.promise(() => Promise.all(Array.from({ length: CONCURRENCY }, () => newChallenge("1"))))
        const payloads = yield* Effect.promise(() =>
          Promise.all(cs.map((c) => signPayment(key, c.payment_required.accepts[0]!, Date.now() / 1000, signer === other ? { signerKey: other } : {})))
        )
        const latencies: Array<number> = []
        const unexpected = new Map<number, number>()
        const started = Date.now()
        const end = started + VERIFY_SECONDS * 1000
        yield* Effect.promise(() =>
          Promise.all(cs.map(async (c, i) => {
            while (Date.now() < end) {
              const t = performance.now()
              const r = await api("POST", `/v1/payments/challenges/${c.id}/pay`, payer().token, { payment_payload: payloads[i] })
              latencies.push(performance.now() - t)
              if (r.status !== expected) unexpected.set(r.status, (unexpected.get(r.status) ?? 0) + 1)
            }
          }))
        )
        summary(`${label}, ${CONCURRENCY} at once`, latencies, (Date.now() - started) / 1000)
        if (unexpected.size > 0) console.log(`  unexpected statuses: ${JSON.stringify(Object.fromEntries(unexpected))}`)
      }
    }

    if ("fund" in mode) {
      // 2. Pay → settled on anvil.
      for (const p of payers) {
        const key = generatePrivateKey()
        wallets.set(p.orgId, key)
        yield* Effect.promise(() => mode.fund(addressOf(key)))
      }
      for (const parallel of [1, 4]) {
        const latencies: Array<number> = []
        const started = Date.now()
        const perWorker = Math.ceil(E2E_PAYMENTS / parallel)
        yield* Effect.promise(() =>
          Promise.all(Array.from({ length: parallel }, async () => {
            for (let i = 0; i < perWorker; i++) {
              const who = payer()
              const c = await newChallenge("0.01")
              const payload = await signPayment(wallets.get(who.orgId)!, c.payment_required.accepts[0]!, Date.now() / 1000)
              const t = performance.now()
              const r = await api("POST", `/v1/payments/challenges/${c.id}/pay`, who.token, { payment_payload: payload })
              latencies.push(performance.now() - t)
              if (r.status !== 200) throw new Error(`pay answered ${r.status}: ${r.text}`)
            }
          }))
        )
        summary(`pay → settled on anvil, ${parallel} at once`, latencies, (Date.now() - started) / 1000)
      }
    }
  })

const wallets = new Map<string, `0x${string}`>()

const main = async () => {
  console.log(`bench-payments on ${process.env.DATABASE_URL ? "PostgreSQL" : "PGlite"}; ${CONCURRENCY} workers, ${VERIFY_SECONDS} s`)
  const stub = await startFacilitatorStub()
  stub.mode = { kind: "status", status: 503, body: "paused" }
  await Effect.runPromise(Effect.scoped(run({ stubUrl: stub.url }).pipe(
    Effect.provide(Provisioning.Default.pipe(Layer.provideMerge(testService({ X402_FACILITATOR_URL: stub.url, LOG_LEVEL: "error" }))))
  )))
  stub.close()

  const chain = await startAnvil()
  try {
    const facilitator = await chain.newAccount(1000n)
    await Effect.runPromise(Effect.scoped(run({ fund: (address) => chain.mint(address, 1_000_000_000n) }).pipe(
      Effect.provide(Provisioning.Default.pipe(Layer.provideMerge(testService({
        X402_RPC_URL: chain.rpcUrl,
        X402_FACILITATOR_PRIVATE_KEY: facilitator.key,
        LOG_LEVEL: "error"
      }))))
    )))
  } finally {
    chain.stop()
  }
}

await main()
process.exit(0)
