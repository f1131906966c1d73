/**
 * MCP benchmark: throughput and p50/p99 of MCP `tools/call` (`get_account`, `list_emails`) against
 * the same operations over REST (`GET /v1/account`, `GET /v1/emails?limit=20`), in one run on one
 * service (built as `npm start` builds it), over keep-alive connections from this process.
 * Requests are spread over many organizations so the 120/min window never refuses one.
 * Target: MCP at least 0.7× the REST throughput of the same operation.
 *
 *   npx tsx scripts/bench-mcp.ts [--seconds 5] [--concurrency 32]
 */
import http from "node:http"
import { arg, message, percentile, provision, RawSmtp, scratch, startService } from "./bench-support.js"

const SECONDS = arg("seconds", 5)
const CONCURRENCY = arg("concurrency", 32)
const ORGS = 150
const EMAILS_PER_ORG = 3

const agent = new http.Agent({ keepAlive: true, maxSockets: CONCURRENCY })

interface Shot {
  readonly method: string
  readonly path: string
  readonly body?: string
  readonly ok: (status: number, body: string) => boolean
}

const once = (base: URL, shot: Shot, key: string) =>
  new Promise<boolean>((resolve, reject) => {
    const headers: Record<string, string> = { authorization: `Bearer ${key}`, accept: "application/json, text/event-stream" }
    if (shot.body !== undefined) headers["content-type"] = "application/json"
    const req = http.request(new URL(shot.path, base), { method: shot.method, agent, headers }, (res) => {
      const chunks: Array<Buffer> = []
      res.on("data", (c: Buffer) => chunks.push(c))
      res.on("end", () => resolve(shot.ok(res.statusCode ?? 0, Buffer.concat(chunks).toString("utf8"))))
    })
    req.on("error", reject)
    req.end(shot.body)
  })

const load = async (name: string, base: URL, shot: Shot, keys: ReadonlyArray<string>) => {
  await Promise.all(Array.from({ length: CONCURRENCY }, (_, i) => once(base, shot, keys[i % keys.length]!)))
  const latencies: Array<number> = []
  let errors = 0
  let n = 0
  const until = performance.now() + SECONDS * 1000
  await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
    while (performance.now() < until) {
      const t0 = performance.now()
      const ok = await once(base, shot, keys[n++ % keys.length]!).catch(() => false)
      latencies.push(performance.now() - t0)
      if (!ok) errors++
    }
  }))
  latencies.sort((a, b) => a - b)
  const rps = latencies.length / SECONDS
  console.log(`${name.padEnd(34)} ${rps.toFixed(0).padStart(6)} req/s  p50 ${percentile(latencies, 0.5).toFixed(1).padStart(6)} ms  p99 ${percentile(latencies, 0.99).toFixed(1).padStart(6)} ms  errors ${errors}`)
  return rps
}

const rpc = (name: string, args: Record<string, unknown>): Shot => ({
  method: "POST",
  path: "/mcp",
  body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name, arguments: args } }),
  ok: (status, body) => status === 200 && body.includes("\"isError\":false")
})
const rest = (path: string): Shot => ({ method: "GET", path, ok: (status) => status === 200 })

const main = async () => {
  const s = await scratch("mcp")
  const orgs = await provision(s.env, ORGS)
  const service = await startService(s.env)
  try {
    const smtp = await RawSmtp.open(service.smtpPort)
    for (const org of orgs) {
      for (let i = 0; i < EMAILS_PER_ORG; i++) await smtp.send("bench@example.com", org.address, message(i, "bench@example.com", org.address, 2048))
    }
    smtp.close()
    const base = new URL(service.baseUrl)
    const keys = orgs.map((o) => o.apiKey)
    // Alternate halves of the organizations so no window fills.
    const a = keys.slice(0, ORGS / 2)
    const b = keys.slice(ORGS / 2)
    console.log(`MCP vs REST, ${SECONDS} s each, ${CONCURRENCY} connections, ${process.env.DATABASE_URL ? "PostgreSQL" : "PGlite"}`)
    const restAccount = await load("REST GET /v1/account", base, rest("/v1/account"), a)
    const mcpAccount = await load("MCP tools/call get_account", base, rpc("get_account", {}), b)
    const restList = await load("REST GET /v1/emails?limit=20", base, rest("/v1/emails?limit=20"), b)
    const mcpList = await load("MCP tools/call list_emails", base, rpc("list_emails", { limit: 20 }), a)
    console.log(`ratio get_account ${(mcpAccount / restAccount).toFixed(2)}×, list_emails ${(mcpList / restList).toFixed(2)}× (target ≥ 0.70×)`)
  } finally {
    agent.destroy()
    await service.stop()
    await s.cleanup()
  }
}

await main()
