/**
 * Service CPU per request, endpoint by endpoint (PostgreSQL): where the API's CPU goes. For each
 * request shape, 8 keep-alive clients send `--requests` requests spread over 100 organizations (so
 * the 120/min window never refuses), and the service's CPU time (user + system, /proc) is divided by
 * the count. The data is bench-api-mixed's: 5 filters, 60 emails and 60 deliveries per organization.
 *
 *   DATABASE_URL=postgres://… npx tsx scripts/bench-api-cost.ts [--requests 2000] [--only "GET /v1/emails"]
 */
import http from "node:http"
import { arg, startApiBench } from "./bench-support.js"

const REQUESTS = arg("requests", 2000)
/** `--only <text>`: only the shapes whose name contains it (for profiling one of them). */
const ONLY = process.argv.includes("--only") ? process.argv[process.argv.indexOf("--only") + 1] ?? "" : ""
const ORGS = 100
const agent = new http.Agent({ keepAlive: true, maxSockets: 8 })

const send = (base: string, method: string, path: string, key: string, body?: string, idem?: string) =>
  new Promise<number>((resolve, reject) => {
    const headers: Record<string, string> = { authorization: `Bearer ${key}` }
    if (body !== undefined) headers["content-type"] = "application/json"
    if (idem !== undefined) headers["idempotency-key"] = idem
    const req = http.request(new URL(path, base), { agent, method, headers }, (res) => {
      res.resume()
      res.on("end", () => resolve(res.statusCode ?? 0))
    })
    req.on("error", reject)
    req.end(body)
  })

interface Shape {
  readonly name: string
  readonly method: string
  readonly path: (i: number) => string
  readonly body?: (i: number) => string
  readonly idempotent?: boolean
}

const SHAPES: ReadonlyArray<Shape> = [
  { name: "GET /v1/health (no credential, exempt)", method: "GET", path: () => "/v1/health" },
  { name: "GET /v1/account", method: "GET", path: () => "/v1/account" },
  { name: "GET /v1/filters (5 rows)", method: "GET", path: () => "/v1/filters" },
  { name: "GET /v1/emails (20 of 60)", method: "GET", path: () => "/v1/emails" },
  { name: "GET /v1/webhooks/deliveries (20 of 60)", method: "GET", path: () => "/v1/webhooks/deliveries" },
  { name: "GET /v1/domains (none)", method: "GET", path: () => "/v1/domains" },
  {
    name: "POST /v1/filters + Idempotency-Key",
    method: "POST",
    path: () => "/v1/filters",
    body: (i) => JSON.stringify({ type: "blocklist", pattern: `c${i}@cost.example` }),
    idempotent: true
  }
]

const main = async () => {
  const { orgs, db, service, close } = await startApiBench("apicost", ORGS)
  try {
    let seq = 0
    const run = async (shape: Shape, count: number) => {
      let next = 0
      const statuses = new Map<number, number>()
      const worker = async () => {
        while (next < count) {
          const i = next++
          const n = seq++
          const org = orgs[i % ORGS]!
          const status = await send(service.baseUrl, shape.method, shape.path(n), org.apiKey, shape.body?.(n), shape.idempotent ? `cost-${n}` : undefined)
          statuses.set(status, (statuses.get(status) ?? 0) + 1)
        }
      }
      await Promise.all(Array.from({ length: 8 }, worker))
      return statuses
    }
    console.log(`\nbench-api-cost: service CPU per request, ${REQUESTS} requests per shape, 8 keep-alive clients, PostgreSQL\n`)
    console.log("shape                                         CPU ms/req   req/s   statuses")
    for (const shape of SHAPES.filter((x) => x.name.includes(ONLY))) {
      await db.query(`DELETE FROM rate_limit_windows`)
      await run(shape, 200) // warm-up: JIT and pool
      await db.query(`DELETE FROM rate_limit_windows`)
      const cpu0 = service.cpuMs()
      const t0 = performance.now()
      const statuses = await run(shape, REQUESTS)
      const secs = (performance.now() - t0) / 1000
      const cpu = service.cpuMs() - cpu0
      console.log(`${shape.name.padEnd(46)}${(cpu / REQUESTS).toFixed(2).padStart(9)}${(REQUESTS / secs).toFixed(0).padStart(9)}   ${[...statuses].map(([k, v]) => `${k}×${v}`).join(" ")}`)
    }
  } finally {
    await close()
    agent.destroy()
  }
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
