/**
 * API benchmark: throughput and p50/p99 latency, in one run, of
 *   1. a bare node:http server answering a small JSON body (the ceiling of this machine),
 *   2. a bare Effect HttpApi hello-world (scripts/bench-hello.ts, bundled like the service): the
 *      ceiling of the framework the service is built on, the reference of the targets,
 *   3. the service's /v1/health (HTTP stack + envelope, no auth, no limiter, one trivial query),
 *   4. GET /v1/account with an API key (auth lookup + PostgreSQL rate limit + one query),
 *   5. overload: GET /v1/account over `--overload-connections` (400) connections: goodput (2xx/s)
 *      against the capacity measured in 4, the share refused (503), p99 and the requests slower than 2 s,
 * each server in a child process, the load from this process over keep-alive connections. Each
 * target's server CPU (user + system, /proc) is divided by its requests: CPU per request is the
 * figure a loaded machine bends least.
 * Uses DATABASE_URL when set (a scratch database is created on that server), else embedded PGlite.
 * Requests are spread over many organizations so the 120/min limiter never refuses one.
 *
 *   npx tsx scripts/bench-api.ts [--seconds 5] [--concurrency 50] [--overload-connections 400]
 * BENCH_SERVICE=<path of a built main.mjs> measures another build of the service (an older one, to
 * compare) with this same harness.
 */
import { benchDatabase, budgetMark, builtService, printBudget, serviceNodeArgs, serviceSqlStats, systemMsOf, treeCpuMs } from "./bench-support.js"
import { build } from "esbuild"
import { fileURLToPath } from "node:url"
import { Effect, Layer } from "effect"
import { spawn } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import http from "node:http"
import { loadavg, tmpdir } from "node:os"
import { join } from "node:path"
import pg from "pg"
import { Provisioning } from "../src/identity/Provisioning.js"
import { freePort, testConfigLayer } from "../test/support/harness.js"

const arg = (name: string, fallback: number) => {
  const i = process.argv.indexOf(`--${name}`)
  return i > 0 ? Number(process.argv[i + 1]) : fallback
}
const SECONDS = arg("seconds", 5)
const CONCURRENCY = arg("concurrency", 50)
const OVERLOAD = arg("overload-connections", 400)
const ORGS = 400

interface Result {
  readonly name: string
  readonly requests: number
  readonly errors: number
  readonly rps: number
  readonly p50: number
  readonly p99: number
  /** Answers with status 200 per second. */
  readonly goodput: number
  readonly refused: number
  readonly over2s: number
  /** The requests slower than 2 s, counted by the second of the run they were sent in. */
  readonly over2sBySecond: ReadonlyMap<number, number>
  /** Server CPU ms per request. */
  readonly cpu: number
  /** The share of that CPU spent in the kernel (the server's own process). */
  readonly kernel: number
}

const once = (agent: http.Agent, url: URL, headers: Record<string, string>) =>
  new Promise<number>((resolve, reject) => {
    const req = http.request(url, { agent, headers }, (res) => {
      res.resume()
      res.on("end", () => resolve(res.statusCode ?? 0))
    })
    req.on("error", reject)
    req.end()
  })

const load = async (
  name: string,
  url: string,
  pid: number | undefined,
  headersFor: (i: number) => Record<string, string>,
  connections = CONCURRENCY
): Promise<Result> => {
  const target = new URL(url)
  const agent = new http.Agent({ keepAlive: true, maxSockets: connections })
  // Warm-up: connections, JIT, caches.
  await Promise.all(Array.from({ length: connections }, (_, i) => once(agent, target, headersFor(i)).catch(() => 0)))
  const latencies: Array<number> = []
  const over2sBySecond = new Map<number, number>()
  let errors = 0
  let ok = 0
  let refused = 0
  let n = 0
  const cpu0 = treeCpuMs(pid)
  const sys0 = systemMsOf(pid)
  const start = performance.now()
  const deadline = start + SECONDS * 1000
  await Promise.all(Array.from({ length: connections }, async () => {
    while (performance.now() < deadline) {
      const i = n++
      const t0 = performance.now()
      try {
        const status = await once(agent, target, headersFor(i))
        if (status === 200) ok++
        else {
          errors++
          if (status === 503) refused++
        }
      } catch {
        errors++
      }
      const took = performance.now() - t0
      latencies.push(took)
      if (took > 2000) {
        const second = Math.floor((t0 - start) / 1000)
        over2sBySecond.set(second, (over2sBySecond.get(second) ?? 0) + 1)
      }
    }
  }))
  const secs = (performance.now() - start) / 1000
  const cpu = treeCpuMs(pid) - cpu0
  const sys = systemMsOf(pid) - sys0
  agent.destroy()
  latencies.sort((a, b) => a - b)
  const q = (p: number) => latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))] ?? 0
  return {
    name,
    requests: latencies.length,
    errors,
    rps: latencies.length / secs,
    p50: q(0.5),
    p99: q(0.99),
    goodput: ok / secs,
    refused,
    over2s: latencies.filter((l) => l > 2000).length,
    over2sBySecond,
    cpu: cpu / Math.max(1, latencies.length),
    kernel: sys / Math.max(1, cpu)
  }
}

const waitFor = async (url: string, ms = 180_000) => {
  const until = Date.now() + ms
  while (Date.now() < until) {
    try {
      if ((await fetch(url)).ok) return
    } catch { /* not up yet */ }
    await new Promise((r) => setTimeout(r, 200))
  }
  throw new Error(`${url} did not come up`)
}

const main = async () => {
  const dataDir = mkdtempSync(join(tmpdir(), "mailroom-bench-"))
  let dbName: string | undefined
  const env: Record<string, string> = { DATA_DIR: dataDir, LOG_LEVEL: "none" }
  if (process.env.DATABASE_URL) {
    dbName = `mailroom_bench_${process.pid}`
    const admin = new pg.Client({ connectionString: process.env.DATABASE_URL })
    await admin.connect()
    await admin.query(`CREATE DATABASE ${dbName}`)
    await admin.end()
    const u = new URL(process.env.DATABASE_URL)
    u.pathname = `/${dbName}`
    env.DATABASE_URL = u.toString()
  }

  // Provision organizations directly in the database, then release it for the service.
  const keys = await Effect.runPromise(
    Effect.gen(function*() {
      const p = yield* Provisioning
      const out: Array<string> = []
      for (let i = 0; i < ORGS; i++) {
        const org = yield* p.createOrganization({ name: `bench-${i}`, plan: "developer" })
        out.push((yield* p.issueApiKey(org.id)).apiKey)
      }
      return out
    }).pipe(
      Effect.provide(Provisioning.Default.pipe(Layer.provideMerge(benchDatabase()), Layer.provide(testConfigLayer(env)))),
      Effect.scoped
    )
  )

  // The bare server runs in a child process too, so each server is measured the same way.
  const barePort = await freePort()
  const bareChild = spawn(process.execPath, ["-e", `
    const http = require("node:http");
    http.createServer((q, s) => { const b = JSON.stringify({ success: true, data: { status: "ok" } });
      s.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(b) }); s.end(b) })
      .listen(${barePort}, "127.0.0.1")`], { stdio: "ignore" })

  const root = fileURLToPath(new URL("../", import.meta.url))
  await build({
    absWorkingDir: root, bundle: true, platform: "node", target: "node20", packages: "external", logLevel: "warning",
    entryPoints: ["scripts/bench-hello.ts"], format: "esm", outfile: "dist/bench/hello.mjs"
  })
  const helloPort = await freePort()
  const helloChild = spawn(process.execPath, [`${root}dist/bench/hello.mjs`], {
    env: { ...process.env, PORT: String(helloPort) },
    stdio: ["ignore", "ignore", "inherit"]
  })

  const port = await freePort()
  // BENCH_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/prof" profiles the service during the run.
  const nodeArgs = (process.env.BENCH_NODE_ARGS ?? "").split(" ").filter((a) => a.length > 0)
  const statsFile = join(tmpdir(), `mailroom-bench-api-stats-${process.pid}.json`)
  const service = spawn(process.execPath, [...serviceNodeArgs(), ...nodeArgs, builtService()], {
    // One process unless WORKERS says otherwise: the capacity and CPU of one process, beside the
    // single-process references.
    env: { ...process.env, ...env, WORKERS: process.env.WORKERS ?? "1", PORT: String(port), SMTP_PORT: String(await freePort()), MAILROOM_STATS_FILE: statsFile },
    stdio: ["ignore", "ignore", "inherit"]
  })
  // Every process of the service: the workers' CPU and SQL counters too.
  const measured = { cpuMs: () => treeCpuMs(service.pid), sqlStats: () => serviceSqlStats(statsFile, Number(process.env.WORKERS ?? "1")) }
  try {
    await waitFor(`http://127.0.0.1:${barePort}/`)
    await waitFor(`http://127.0.0.1:${helloPort}/hello`)
    await waitFor(`http://127.0.0.1:${port}/v1/health`)
    const base = `http://127.0.0.1:${port}`
    const account = (i: number) => ({ authorization: `Bearer ${keys[i % keys.length]}` })
    // Windows are cleared between targets so no organization's 120/min window refuses a request.
    const clearWindows = async () => {
      if (env.DATABASE_URL === undefined) return
      const db = new pg.Client({ connectionString: env.DATABASE_URL })
      await db.connect()
      await db.query("DELETE FROM rate_limit_windows")
      await db.end()
    }
    const results = [
      await load("bare node:http", `http://127.0.0.1:${barePort}/`, bareChild.pid, () => ({})),
      await load("Effect HttpApi hello-world", `http://127.0.0.1:${helloPort}/hello`, helloChild.pid, () => ({})),
      await load("GET /v1/health", `${base}/v1/health`, service.pid, () => ({}))
    ]
    await clearWindows()
    const mark = await budgetMark(measured)
    results.push(await load("GET /v1/account (auth+limit+query)", `${base}/v1/account`, service.pid, account))
    // The warm-up requests of `load` count too.
    await printBudget(measured, mark, "authenticated read", results[3]!.requests + CONCURRENCY)
    await clearWindows()
    const overload = await load(`overload: ${OVERLOAD} connections on /v1/account`, `${base}/v1/account`, service.pid, account, OVERLOAD)
    const database = env.DATABASE_URL ? "PostgreSQL" : "embedded PGlite"
    console.log(`\nbench-api: ${SECONDS} s per target, ${CONCURRENCY} concurrent keep-alive clients, ${database}, WORKERS=${process.env.WORKERS ?? "1"}, load average ${loadavg().map((l) => l.toFixed(2)).join(" ")}\n`)
    console.log("target                                      req/s     p50 ms   p99 ms   errors   CPU ms/req   kernel")
    for (const r of results) {
      console.log(
        `${r.name.padEnd(40)} ${r.rps.toFixed(0).padStart(7)} ${r.p50.toFixed(2).padStart(9)} ${r.p99.toFixed(2).padStart(8)} ${String(r.errors).padStart(8)} ${r.cpu.toFixed(3).padStart(12)} ${(100 * r.kernel).toFixed(0).padStart(7)}%`
      )
    }
    const [b, e, h, a] = results as [Result, Result, Result, Result]
    console.log(`\nratios (req/s): account/hello-world ${(a.rps / e.rps).toFixed(2)} (target >= 0.5), health/hello-world ${(h.rps / e.rps).toFixed(2)} (target >= 0.8), account/health ${(a.rps / h.rps).toFixed(2)}, hello-world/bare ${(e.rps / b.rps).toFixed(2)}`)
    console.log(`ratios (p50): account/hello-world ${(a.p50 / e.p50).toFixed(2)}, health/hello-world ${(h.p50 / e.p50).toFixed(2)}; (p99): account/hello-world ${(a.p99 / e.p99).toFixed(2)}`)
    console.log(`ratios (CPU/req): hello-world/account ${(e.cpu / a.cpu).toFixed(2)}, hello-world/health ${(e.cpu / h.cpu).toFixed(2)}`)
    const o = overload
    console.log(
      `\n${o.name}: goodput ${o.goodput.toFixed(0)} req/s vs capacity ${a.goodput.toFixed(0)} at ${CONCURRENCY} = ${(o.goodput / a.goodput).toFixed(2)} (target >= 0.8); ` +
        `refused 503 ${(100 * o.refused / Math.max(1, o.requests)).toFixed(1)}% of ${o.requests}; other errors ${o.errors - o.refused}; ` +
        `p50 ${o.p50.toFixed(0)} ms, p99 ${o.p99.toFixed(0)} ms; > 2 s: ${o.over2s} (target 0); CPU ${o.cpu.toFixed(3)} ms/req`
    )
    if (o.over2s > 0) {
      const bySecond = [...o.over2sBySecond].sort(([a], [b]) => a - b).map(([second, n]) => `${second}s: ${n}`).join(", ")
      console.log(`requests slower than 2 s by the second of the run they were sent in: ${bySecond}`)
    }
  } finally {
    service.kill("SIGTERM")
    bareChild.kill("SIGTERM")
    helloChild.kill("SIGTERM")
    await new Promise((r) => setTimeout(r, 1500))
    if (dbName !== undefined) {
      const admin = new pg.Client({ connectionString: process.env.DATABASE_URL })
      await admin.connect()
      await admin.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`)
      await admin.end()
    }
    rmSync(dataDir, { recursive: true, force: true })
  }
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})

