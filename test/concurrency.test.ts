/**
 * Idempotency and rate limits under concurrency: 100 identical POSTs racing with one key have one
 * side effect; two servers on one database accept exactly 120 requests per organization per 60 s
 * window for each of 4 busy organizations among 100 (the 96 others unaffected), and the window slides.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { Provisioning } from "../src/identity/Provisioning.js"
import { API_RATE_LIMIT } from "../src/platform/RateLimits.js"
import { extraServer, makeManualClock, testDatabase, testServerOn } from "./support/harness.js"
import { call, fetchReply } from "./support/http.js"

const clock = makeManualClock()
const Env = Provisioning.Default.pipe(
  Layer.provideMerge(testServerOn().pipe(Layer.provide(clock.layer), Layer.provideMerge(testDatabase({ DNS_SERVER: "127.0.0.1:9" }))))
)

layer(Env, { timeout: 120_000, excludeTestServices: true })("concurrency", (it) => {
  describe("idempotency", () => {
    it.scoped("100 concurrent identical POSTs with one Idempotency-Key create one account", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const before = (yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM organizations`)[0]!.n
        const headers = { "idempotency-key": `race-${Math.random().toString(36).slice(2)}` }
        const replies = yield* Effect.all(
          Array.from({ length: 100 }, () => call("POST", "/v1/agent/accounts", { body: { terms_accepted: true }, headers })),
          { concurrency: "unbounded" }
        )
        const after = (yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM organizations`)[0]!.n
        expect(after - before).toBe(1)
        const ok = replies.filter((r) => r.status === 200)
        const busy = replies.filter((r) => r.status === 409)
        // One client address holds at most a quarter of the process's requests at once: past that, 429.
        const over = replies.filter((r) => r.status === 429)
        for (const r of over) expect(r.body.error.code).toBe("rate_limited")
        expect(ok.length + busy.length + over.length).toBe(100)
        expect(ok.length).toBeGreaterThanOrEqual(1)
        // Every success is the same account; every other answer is the in-progress conflict envelope.
        expect(new Set(ok.map((r) => r.body.data.api_key)).size).toBe(1)
        expect(ok.filter((r) => r.headers.get("idempotent-replayed") !== "true").length).toBe(1)
        for (const r of busy) {
          expect(r.body.error.code).toBe("conflict")
          expect(typeof r.body.error.message).toBe("string")
        }
        // After the race the key has run: a retry runs nothing more, and the API key it handed out is
        // not handed to another anonymous caller (anyone behind the same address could send the key).
        const again = yield* call("POST", "/v1/agent/accounts", { body: { terms_accepted: true }, headers })
        expect(again.status).toBe(409)
        expect(again.body.error.code).toBe("conflict")
        expect(again.text).not.toContain(ok[0]!.body.data.api_key)
        expect((yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM organizations`)[0]!.n - before).toBe(1)
      }))
  })

  describe("rate limit", () => {
    it.scoped("two servers, 100 organizations (4 sending 130 requests, 96 sending 3): exactly 120 accepted each, no bleed, the window slides", () =>
      Effect.gen(function*() {
        const provisioning = yield* Provisioning
        const orgs = yield* Effect.forEach(Array.from({ length: 100 }, (_, i) => i), (i) =>
          Effect.gen(function*() {
            const org = yield* provisioning.createOrganization({ name: `Org ${i}`, plan: "developer" })
            return (yield* provisioning.issueApiKey(org.id)).apiKey
          }), { concurrency: 4 })
        const second = yield* extraServer.pipe(Effect.withClock(clock.clock))
        const extra = 130 - API_RATE_LIMIT.limit
        // Every 25th organization sends 130 requests, the others 3: a full window must not touch theirs.
        const heavy = (o: number) => o % 25 === 0
        const light = 3
        const countFor = (o: number) => (heavy(o) ? API_RATE_LIMIT.limit + extra : light)
        const jobs = orgs.flatMap((apiKey, o) => Array.from({ length: countFor(o) }, (_, i) => ({ apiKey, o, i })))
        // Interleave organizations so their windows fill at the same time.
        jobs.sort((a, b) => a.i - b.i || a.o - b.o)
        const started = Date.now()
        const statuses = yield* Effect.forEach(jobs, (j) =>
          (j.i % 2 === 0
            ? call("GET", "/v1/account", { token: j.apiKey })
            : Effect.promise(() => fetchReply(`${second.baseUrl}/v1/account`, "GET", { token: j.apiKey }))
          ).pipe(Effect.map((r) => ({ o: j.o, status: r.status, code: r.body?.error?.code as string | undefined }))), { concurrency: 32 })
        const seconds = (Date.now() - started) / 1000
        console.log(`rate limit: ${jobs.length} requests over two servers in ${seconds.toFixed(1)} s`)
        for (let o = 0; o < orgs.length; o++) {
          const mine = statuses.filter((s) => s.o === o)
          expect(mine.filter((s) => s.status === 200).length).toBe(heavy(o) ? API_RATE_LIMIT.limit : light)
          const refused = mine.filter((s) => s.status !== 200)
          expect(refused.length).toBe(heavy(o) ? extra : 0)
          expect(refused.every((s) => s.status === 429 && s.code === "rate_limited")).toBe(true)
        }
        // The window slides: once its 60 s have passed (on the service clock) requests are accepted again.
        clock.advance((API_RATE_LIMIT.windowSeconds + 1) * 1000)
        const later = yield* call("GET", "/v1/account", { token: orgs[0]! })
        const laterOther = yield* Effect.promise(() => fetchReply(`${second.baseUrl}/v1/account`, "GET", { token: orgs[25]! }))
        expect(later.status).toBe(200)
        expect(laterOther.status).toBe(200)
      }), { timeout: 120_000 })
  })
})
