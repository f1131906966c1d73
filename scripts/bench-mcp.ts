/**
 * MCP benchmark: throughput and p50/p99 of MCP `tools/call` (`get_account`, `list_emails`) against
 * the same operations over REST (`GET /v1/account`, `GET /v1/emails?limit=20`), in one run on one
 * service (built as `npm start` builds it), over keep-alive connections from this process.
 *
 * Each of the four loads has organizations of its own (`--orgs` each), used round-robin, so the
 * 120-per-60-s window of an organization never refuses a request: a load of N requests over
 * `--orgs` organizations needs N / orgs < 120 (the bench says when a run came close). The two sides
 * of one call alternate in `--rounds` slices (REST first, then MCP first, …) so drift of a busy
 * machine falls on both. Every side reports its errors (429s apart); a ratio is printed only when
 * neither side of that call had one. CPU per request is the service's own CPU time during a side's
 * slices divided by its requests, a figure less bent by other load on the machine.
 * Target: MCP at least 0.7× the REST throughput of the same operation.
 *
 *   npx tsx scripts/bench-mcp.ts [--seconds 6] [--concurrency 16] [--rounds 3] [--orgs 100]
 */
import http from "node:http"
import { arg, message, percentile, provision, RawSmtp, scratch, startService } from "./bench-support.js"

const SECONDS = arg("seconds", 6)
const CONCURRENCY = arg("concurrency", 16)
const ROUNDS = arg("rounds", 3)
const ORGS_PER_LOAD = arg("orgs", 100)
const EMAILS_PER_ORG = 3
const WINDOW = 120

const agent = new http.Agent({ keepAlive: true, maxSockets: CONCURRENCY })

interface Shot {
  readonly method: string
  readonly path: string
  readonly body?: string
  readonly ok: (status: number, body: string) => boolean
}

type Outcome = "ok" | "limited" | "error"

const once = (base: URL, shot: Shot, key: string) =>
  new Promise<Outcome>((resolve) => {
    const headers: Record<string, string> = { authorization: `Bearer ${key}`, accept: "application/json, text/event-stream" }
    if (shot.body !== undefined) headers["content-type"] = "application/json"
    const req = http.request(new URL(shot.path, base), { method: shot.method, agent, headers }, (res) => {
      const chunks: Array<Buffer> = []
      res.on("data", (c: Buffer) => chunks.push(c))
      res.on("end", () => {
        const body = Buffer.concat(chunks).toString("utf8")
        const status = res.statusCode ?? 0
        // A tool call's refusal by the window is a 429 of the POST itself.
        resolve(shot.ok(status, body) ? "ok" : status === 429 || body.includes("\"rate_limited\"") ? "limited" : "error")
      })
    })
    req.on("error", () => resolve("error"))
    req.end(shot.body)
  })

/** One side of a call: its organizations and what its slices have measured so far. */
class Side {
  readonly latencies: Array<number> = []
  errors = 0
  limited = 0
  cpuMs = 0
  ms = 0
  private next = 0
  constructor(readonly name: string, readonly shot: Shot, readonly keys: ReadonlyArray<string>) {}
  key() {
    return this.keys[this.next++ % this.keys.length]!
  }
  get requests() {
    return this.next
  }
}

const slice = async (base: URL, side: Side, seconds: number, cpuMs: () => number) => {
  const until = performance.now() + seconds * 1000
  const t0 = performance.now()
  const cpu0 = cpuMs()
  await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
    while (performance.now() < until) {
      const t = performance.now()
      const outcome = await once(base, side.shot, side.key())
      side.latencies.push(performance.now() - t)
      if (outcome === "limited") side.limited++
      else if (outcome === "error") side.errors++
    }
  }))
  side.ms += performance.now() - t0
  side.cpuMs += cpuMs() - cpu0
}

const report = (side: Side) => {
  const sorted = [...side.latencies].sort((a, b) => a - b)
  const rps = sorted.length / (side.ms / 1000)
  const cpu = sorted.length === 0 ? 0 : side.cpuMs / sorted.length
  console.log(
    `${side.name.padEnd(32)} ${rps.toFixed(0).padStart(6)} req/s  p50 ${percentile(sorted, 0.5).toFixed(1).padStart(6)} ms  ` +
      `p99 ${percentile(sorted, 0.99).toFixed(1).padStart(6)} ms  cpu ${cpu.toFixed(2).padStart(5)} ms/req  ` +
      `errors ${side.errors} (429: ${side.limited})`
  )
  return rps
}

/** Both sides of one call, alternating, then their figures and (when both are clean) the ratio. */
const compare = async (label: string, base: URL, rest: Side, mcp: Side, cpuMs: () => number) => {
  // Warm-up (connections, JIT, caches), not counted.
  for (const side of [rest, mcp]) {
    await Promise.all(Array.from({ length: CONCURRENCY }, () => once(base, side.shot, side.key())))
  }
  const warm = [rest.requests, mcp.requests]
  for (let r = 0; r < ROUNDS; r++) {
    const order = r % 2 === 0 ? [rest, mcp] : [mcp, rest]
    for (const side of order) await slice(base, side, SECONDS / ROUNDS, cpuMs)
  }
  const restRps = report(rest)
  const mcpRps = report(mcp)
  for (const [i, side] of [rest, mcp].entries()) {
    const perOrg = Math.ceil((side.requests - warm[i]!) / side.keys.length) + 1
    if (perOrg > WINDOW * 0.8) console.log(`  (${side.name}: ~${perOrg} requests per organization; raise --orgs)`)
  }
  const dirty = rest.errors + rest.limited + mcp.errors + mcp.limited
  console.log(
    dirty > 0
      ? `ratio ${label}: none, a side had errors`
      : `ratio ${label} ${(mcpRps / restRps).toFixed(2)}× (target ≥ 0.70×)`
  )
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
  const orgs = await provision(s.env, 4 * ORGS_PER_LOAD)
  const service = await startService(s.env)
  try {
    const pools = [0, 1, 2, 3].map((i) => orgs.slice(i * ORGS_PER_LOAD, (i + 1) * ORGS_PER_LOAD))
    // The listing loads' organizations get mail to list, over a few SMTP connections at once.
    const listed = [...pools[2]!, ...pools[3]!]
    await Promise.all([0, 1, 2, 3].map(async (c) => {
      const smtp = await RawSmtp.open(service.smtpPort)
      for (const org of listed.filter((_, i) => i % 4 === c)) {
        for (let i = 0; i < EMAILS_PER_ORG; i++) await smtp.send("bench@example.com", org.address, message(i, "bench@example.com", org.address, 2048))
      }
      smtp.close()
    }))
    const base = new URL(service.baseUrl)
    const keys = pools.map((p) => p.map((o) => o.apiKey))
    console.log(
      `MCP vs REST, ${SECONDS} s per side in ${ROUNDS} alternating slices, ${CONCURRENCY} connections, ` +
        `${ORGS_PER_LOAD} organizations per side, ${process.env.DATABASE_URL ? "PostgreSQL" : "PGlite"}`
    )
    await compare(
      "get_account",
      base,
      new Side("REST GET /v1/account", rest("/v1/account"), keys[0]!),
      new Side("MCP tools/call get_account", rpc("get_account", {}), keys[1]!),
      service.cpuMs
    )
    await compare(
      "list_emails",
      base,
      new Side("REST GET /v1/emails?limit=20", rest("/v1/emails?limit=20"), keys[2]!),
      new Side("MCP tools/call list_emails", rpc("list_emails", { limit: 20 }), keys[3]!),
      service.cpuMs
    )
  } finally {
    agent.destroy()
    await service.stop()
    await s.cleanup()
  }
}

await main()
