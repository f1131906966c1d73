/**
 * Two builds of the service measured side by side: each in a process of its own with its own
 * scratch database (made by that build's own migrations) and its own organizations, both loaded at
 * the same time, by the same client, with the same request. Whatever the machine does during a
 * round (another tenant of the host, a slower core, a busier PostgreSQL) it does to both, so the
 * ratio of their CPU per request holds where single runs do not: on the host these figures come
 * from, one build measured against itself in consecutive runs varies by ±20%, and against itself
 * in this pairing by ±6% a round and 0.987–1.002 over four rounds (four pairs). A change of code
 * shape can still move a pair by more than that, so a small ratio deserves a second pair.
 *
 *   [DATABASE_URL=postgres://…] npx tsx scripts/bench-pair.ts --a <built main.mjs> [--b <built main.mjs>]
 *     [--path /v1/account] [--rounds 4] [--seconds 5] [--concurrency 25] [--orgs 400] [--seed]
 *
 * `--b` defaults to this checkout's build. A build of another commit: `git worktree add` it, link
 * `node_modules`, `npm run build` there, and pass its `dist/server/main.mjs`. `--path` is any GET
 * of the API; with a path other than `/v1/health` each request carries the API key of one of
 * `--orgs` organizations in turn, and the rate-limit windows are emptied between rounds so no
 * organization is refused. `--seed` gives each organization the API benchmarks' data (an endpoint,
 * 5 filters, 60 emails, 60 deliveries), for list paths such as `/v1/emails?limit=20`. Prints each round's CPU per request (the service's process tree, user +
 * system) of A and B, and B/A; below 1 means B spends less.
 */
import http from "node:http"
import pg from "pg"
import { resolve } from "node:path"
import { arg, builtService, provision, scratch, type Scratch, seedApiData, type Service, startService } from "./bench-support.js"

const text = (name: string, fallback: string | undefined) => {
  const i = process.argv.indexOf(`--${name}`)
  return i > 0 ? process.argv[i + 1]! : fallback
}

const A = text("a", undefined)
if (A === undefined) throw new Error("--a <built main.mjs> is required (the build to compare with)")
const B = text("b", undefined) ?? builtService()
const PATH = text("path", "/v1/account")!
const ROUNDS = arg("rounds", 4)
const SECONDS = arg("seconds", 5)
const CONCURRENCY = arg("concurrency", 25)
const ORGS = arg("orgs", 400)
const WARMUP_SECONDS = 3
const AUTHENTICATED = PATH !== "/v1/health"
const SEED = process.argv.includes("--seed")

interface Side {
  readonly name: string
  readonly build: string
  readonly db: Scratch
  readonly keys: ReadonlyArray<string>
  readonly service: Service
  readonly agent: http.Agent
  readonly port: number
}

const start = async (name: string, build: string): Promise<Side> => {
  const db = await scratch(`pair_${name.toLowerCase()}`)
  const orgs = AUTHENTICATED ? await provision(db.env, ORGS, "developer", build) : []
  if (SEED && db.adminUrl !== undefined) {
    const c = new pg.Client({ connectionString: db.adminUrl })
    await c.connect()
    await seedApiData(c, orgs.map((o) => o.id))
    await c.end()
  }
  const service = await startService(db.env, { build })
  return {
    name,
    build,
    db,
    keys: orgs.map((o) => o.apiKey),
    service,
    agent: new http.Agent({ keepAlive: true, maxSockets: CONCURRENCY }),
    port: Number(new URL(service.baseUrl).port)
  }
}

const get = (side: Side, i: number) =>
  new Promise<number>((done) => {
    const headers: Record<string, string> = AUTHENTICATED ? { authorization: `Bearer ${side.keys[i % side.keys.length]}` } : {}
    const req = http.get({ host: "127.0.0.1", port: side.port, path: PATH, agent: side.agent, headers }, (res) => {
      res.resume()
      res.on("end", () => done(res.statusCode ?? 0))
    })
    req.on("error", () => done(0))
  })

/** `CONCURRENCY` clients, each sending its next request when the last is answered, for `ms`. */
const load = async (side: Side, ms: number) => {
  const until = Date.now() + ms
  let sent = 0
  let failed = 0
  await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
    while (Date.now() < until) {
      const status = await get(side, sent++)
      if (status !== 200) failed++
    }
  }))
  return { requests: sent, failed }
}

const emptyWindows = async (side: Side) => {
  if (side.db.adminUrl === undefined) return
  const c = new pg.Client({ connectionString: side.db.adminUrl })
  await c.connect()
  await c.query("DELETE FROM rate_limit_windows")
  await c.end()
}

const sides: Array<Side> = []
try {
  sides.push(await start("A", resolve(A)))
  sides.push(await start("B", resolve(B)))
  const [a, b] = sides as [Side, Side]
  console.log(`bench-pair: GET ${PATH}, ${CONCURRENCY} keep-alive clients on each build at once, ${ROUNDS} rounds of ${SECONDS} s, ` +
    `${a.db.adminUrl === undefined ? "embedded PGlite" : "PostgreSQL"}`)
  console.log(`  A: ${a.build}\n  B: ${b.build}\n`)
  await Promise.all([load(a, WARMUP_SECONDS * 1000), load(b, WARMUP_SECONDS * 1000)])
  const total = { a: { cpu: 0, n: 0 }, b: { cpu: 0, n: 0 } }
  const ratios: Array<number> = []
  console.log("round   A µs/req   A req/s   B µs/req   B req/s    B/A   non-200 (A, B)")
  for (let round = 1; round <= ROUNDS; round++) {
    if (AUTHENTICATED) await Promise.all([emptyWindows(a), emptyWindows(b)])
    const cpu0 = [a.service.cpuMs(), b.service.cpuMs()] as const
    const [ra, rb] = await Promise.all([load(a, SECONDS * 1000), load(b, SECONDS * 1000)])
    const cpuA = a.service.cpuMs() - cpu0[0]
    const cpuB = b.service.cpuMs() - cpu0[1]
    const perA = cpuA / ra.requests * 1000
    const perB = cpuB / rb.requests * 1000
    ratios.push(perB / perA)
    total.a.cpu += cpuA
    total.a.n += ra.requests
    total.b.cpu += cpuB
    total.b.n += rb.requests
    console.log(`${String(round).padStart(5)} ${perA.toFixed(1).padStart(10)} ${(ra.requests / SECONDS).toFixed(0).padStart(9)} ` +
      `${perB.toFixed(1).padStart(10)} ${(rb.requests / SECONDS).toFixed(0).padStart(9)} ${(perB / perA).toFixed(3).padStart(6)}   ${ra.failed}, ${rb.failed}`)
  }
  const perA = total.a.cpu / total.a.n * 1000
  const perB = total.b.cpu / total.b.n * 1000
  const sorted = [...ratios].sort((x, y) => x - y)
  console.log(`\nall rounds: A ${perA.toFixed(1)} µs/req, B ${perB.toFixed(1)} µs/req, B/A ${(perB / perA).toFixed(3)} ` +
    `(rounds ${sorted[0]!.toFixed(3)}–${sorted[sorted.length - 1]!.toFixed(3)})`)
} finally {
  for (const side of sides) {
    side.agent.destroy()
    await side.service.stop()
    await side.db.cleanup()
  }
}
