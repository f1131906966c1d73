/**
 * Fairness under attack, in one run: organization B's `GET /v1/account` latency alone, then again
 * while organization A floods the service (hundreds of open `POST /functions/{id}/invoke` of a function
 * that sleeps, and API calls at a steady rate, far past its 120 per minute, at the same time). B is two
 * organizations of the same plan, one per phase, so B's own 120-per-minute window is never what is
 * measured. Prints B's p50/p99 in both phases,
 * the ratio (target: B's p99 under attack within 2× of its unloaded p99), what A's flood was answered
 * (200s, 429s with Retry-After), and `/v1/health` during the flood.
 *
 *   npx tsx scripts/bench-fairness.ts [--samples 100] [--invokes 200] [--api-rate 300] [--sleep-ms 20000]
 *   (DATABASE_URL=postgres://… for PostgreSQL; embedded PGlite otherwise)
 */
import { loadavg } from "node:os"
import { arg, percentile, provision, scratch, startService } from "./bench-support.js"

const SAMPLES = arg("samples", 100)
const INVOKES = arg("invokes", 200)
const API_RATE = arg("api-rate", 300)
const SLEEP_MS = arg("sleep-ms", 20_000)

const SLEEPER = `export default { async fetch() { await new Promise((r) => setTimeout(r, ${SLEEP_MS})); return new Response("late") } }`

const main = async () => {
  const db = await scratch("fairness")
  try {
    const [a, bAlone, bAttacked] = await provision(db.env, 3, "pro")
    const service = await startService({ ...db.env, FUNCTION_TIMEOUT: `${SLEEP_MS + 30_000}ms` })
    try {
      const api = (token: string, method: string, path: string, body?: unknown, headers: Record<string, string> = {}) =>
        fetch(`${service.baseUrl}${path}`, {
          method,
          headers: { authorization: `Bearer ${token}`, ...(body !== undefined ? { "content-type": "application/json" } : {}), ...headers },
          ...(body !== undefined ? { body: JSON.stringify(body) } : {})
        })
      const deployed = await api(a!.apiKey, "POST", "/v1/functions", { name: "sleeper", code: SLEEPER })
      if (deployed.status !== 201) throw new Error(`deploy: ${deployed.status} ${await deployed.text()}`)
      const fn = ((await deployed.json()) as { data: { id: string } }).data

      /** B's GET /v1/account, one after another, SAMPLES times: sorted latencies in ms and non-200 answers. */
      const measureB = async (b: { apiKey: string }) => {
        const out: Array<number> = []
        let failed = 0
        for (let i = 0; i < SAMPLES; i++) {
          const t0 = performance.now()
          const r = await api(b!.apiKey, "GET", "/v1/account")
          await r.arrayBuffer()
          out.push(performance.now() - t0)
          if (r.status !== 200) failed++
        }
        return { sorted: out.sort((x, y) => x - y), failed }
      }

      for (let i = 0; i < 10; i++) await (await api(bAttacked!.apiKey, "GET", "/v1/account")).arrayBuffer()
      for (let i = 0; i < 10; i++) await (await api(bAlone!.apiKey, "GET", "/v1/account")).arrayBuffer()
      const alone = await measureB(bAlone!)

      // The flood: INVOKES open invocations (each holds its request until the function wakes), and A's
      // API calls at API_RATE per second (open loop: a call starts on time whatever the last one did),
      // all running while B is measured again.
      const answered = new Map<number, number>()
      const count = (s: number) => answered.set(s, (answered.get(s) ?? 0) + 1)
      let flooding = true
      const invokes = Array.from({ length: INVOKES }, () =>
        api(a!.apiKey, "POST", `/v1/functions/${fn.id}/invoke`, {}, { "idempotency-key": crypto.randomUUID() })
          .then(async (r) => {
            await r.arrayBuffer()
            count(r.status)
          })
          .catch(() => { count(0) }))
      const apiCalls: Array<Promise<void>> = []
      const t0 = performance.now()
      let sent = 0
      const pacer = setInterval(() => {
        const due = Math.floor(((performance.now() - t0) / 1000) * API_RATE)
        for (; flooding && sent < due; sent++) {
          apiCalls.push(api(a!.apiKey, "GET", "/v1/endpoints").then(async (r) => {
            await r.arrayBuffer()
            count(r.status)
          }, () => { count(0) }))
        }
      }, 5)
      await new Promise((r) => setTimeout(r, 1000))
      const health = await fetch(`${service.baseUrl}/v1/health`)
      await health.arrayBuffer()
      const attacked = await measureB(bAttacked!)
      flooding = false
      clearInterval(pacer)
      await Promise.all(apiCalls)
      const load = loadavg()[0]!.toFixed(1)

      const fmt = (s: ReadonlyArray<number>) => `p50 ${percentile(s, 0.5).toFixed(1)} ms, p99 ${percentile(s, 0.99).toFixed(1)} ms`
      const ratio = percentile(attacked.sorted, 0.99) / percentile(alone.sorted, 0.99)
      console.log(`bench-fairness: ${process.env.DATABASE_URL ? "PostgreSQL" : "embedded PGlite"}, load ${load}`)
      console.log(`B alone:        GET /v1/account ×${SAMPLES}: ${fmt(alone.sorted)} (${alone.failed} not 200)`)
      console.log(`B under attack: GET /v1/account ×${SAMPLES}: ${fmt(attacked.sorted)} (${attacked.failed} not 200)`)
      console.log(`p99 ratio under attack / alone: ${ratio.toFixed(2)}× (target ≤ 2×: ${ratio <= 2 ? "met" : "missed"})`)
      console.log(`A's flood: ${INVOKES} open invokes of a ${SLEEP_MS / 1000} s function + ${sent} API calls at ${API_RATE}/s; answers so far: ` +
        [...answered.entries()].sort(([x], [y]) => x - y).map(([s, n]) => `${s === 0 ? "transport error" : s} ×${n}`).join(", "))
      console.log(`/v1/health during the flood: ${health.status}`)
      // The invokes A still holds end with the service.
      void invokes
    } finally {
      await service.stop()
    }
  } finally {
    await db.cleanup()
  }
}

main().then(() => process.exit(0), (e) => {
  console.error(e)
  process.exit(1)
})
