/**
 * API benchmark: throughput and p50/p99 latency, in one run, of
 *   1. a bare node:http server answering a small JSON body (the ceiling of this machine),
 *   2. a bare Effect HttpApi hello-world (scripts/bench-hello.ts, bundled like the service): the
 *      ceiling of the framework the service is built on, the reference of the targets,
 *   3. the service's /v1/health (HTTP stack + envelope, no auth, no limiter, one trivial query),
 *   4. GET /v1/account with an API key (auth lookup + PostgreSQL rate limit + one query),
 * each server in a child process, the load from this process over keep-alive connections.
 * Uses DATABASE_URL when set (a scratch database is created on that server), else embedded PGlite.
 * Requests are spread over many organizations so the 120/min limiter never refuses one.
 *
 *   npx tsx scripts/bench-api.ts [--seconds 5] [--concurrency 50]
 */
import { budgetMark, builtService, cpuMsOf, freshSqlStats, printBudget } from "./bench-support.js"
import { build } from "esbuild"
import { fileURLToPath } from "node:url"
import { Effect, Layer } from "effect"
import { spawn } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import http from "node:http"
import { tmpdir } from "node:os"
import { join } from "node:path"
import pg from "pg"
import { Provisioning } from "../src/identity/Provisioning.js"
import { DatabaseLive } from "../src/platform/Database.js"
import { freePort, testConfigLayer } from "../test/support/harness.js"

const arg = (name: string, fallback: number) => {
  const i = process.argv.indexOf(`--${name}`)
  return i > 0 ? Number(process.argv[i + 1]) : fallback
}
const SECONDS = arg("seconds", 5)
const CONCURRENCY = arg("concurrency", 50)
const ORGS = 400

interface Result {
  readonly name: string
  readonly requests: number
  readonly errors: number
  readonly rps: number
  readonly p50: number
  readonly p99: number
}

const agent = new http.Agent({ keepAlive: true, maxSockets: CONCURRENCY })

const once = (url: URL, headers: Record<string, string>) =>
  new Promise<number>((resolve, reject) => {
    const req = http.request(url, { agent, headers }, (res) => {
      res.resume()
      res.on("end", () => resolve(res.statusCode ?? 0))
    })
    req.on("error", reject)
    req.end()
  })

const load = async (name: string, url: string, headersFor: (i: number) => Record<string, string>): Promise<Result> => {
  const target = new URL(url)
  // Warm-up: connections, JIT, caches.
  await Promise.all(Array.from({ length: CONCURRENCY }, (_, i) => once(target, headersFor(i)).catch(() => 0)))
  const latencies: Array<number> = []
  let errors = 0
  let n = 0
  const deadline = performance.now() + SECONDS * 1000
  await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
    while (performance.now() < deadline) {
      const i = n++
      const t0 = performance.now()
      try {
        const status = await once(target, headersFor(i))
        if (status !== 200) errors++
      } catch {
        errors++
      }
      latencies.push(performance.now() - t0)
    }
  }))
  latencies.sort((a, b) => a - b)
  const q = (p: number) => latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))] ?? 0
  return { name, requests: latencies.length, errors, rps: latencies.length / SECONDS, p50: q(0.5), p99: q(0.99) }
}

const waitFor = async (url: string, ms = 60_000) => {
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
      Effect.provide(Provisioning.Default.pipe(Layer.provideMerge(DatabaseLive), Layer.provide(testConfigLayer(env)))),
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
  const service = spawn(process.execPath, [...nodeArgs, builtService()], {
    env: { ...process.env, ...env, PORT: String(port), SMTP_PORT: String(await freePort()), MAILROOM_STATS_FILE: statsFile },
    stdio: ["ignore", "ignore", "inherit"]
  })
  const measured = { cpuMs: () => cpuMsOf(service.pid), sqlStats: () => freshSqlStats(statsFile) }
  try {
    await waitFor(`http://127.0.0.1:${barePort}/`)
    await waitFor(`http://127.0.0.1:${helloPort}/hello`)
    await waitFor(`http://127.0.0.1:${port}/v1/health`)
    const base = `http://127.0.0.1:${port}`
    const results = [
      await load("bare node:http", `http://127.0.0.1:${barePort}/`, () => ({})),
      await load("Effect HttpApi hello-world", `http://127.0.0.1:${helloPort}/hello`, () => ({})),
      await load("GET /v1/health", `${base}/v1/health`, () => ({}))
    ]
    const mark = await budgetMark(measured)
    results.push(await load("GET /v1/account (auth+limit+query)", `${base}/v1/account`, (i) => ({
      authorization: `Bearer ${keys[i % keys.length]}`
    })))
    // The warm-up requests of `load` count too.
    await printBudget(measured, mark, "authenticated read", results[3]!.requests + CONCURRENCY)
    const database = env.DATABASE_URL ? "PostgreSQL" : "embedded PGlite"
    console.log(`\nbench-api: ${SECONDS} s per target, ${CONCURRENCY} concurrent keep-alive clients, ${database}\n`)
    console.log("target                                   req/s     p50 ms   p99 ms   errors")
    for (const r of results) {
      console.log(
        `${r.name.padEnd(40)} ${r.rps.toFixed(0).padStart(7)} ${r.p50.toFixed(2).padStart(9)} ${r.p99.toFixed(2).padStart(8)} ${String(r.errors).padStart(8)}`
      )
    }
    const [b, e, h, a] = results as [Result, Result, Result, Result]
    console.log(`\nratios (req/s): account/hello-world ${(a.rps / e.rps).toFixed(2)} (target >= 0.5), health/hello-world ${(h.rps / e.rps).toFixed(2)}, account/health ${(a.rps / h.rps).toFixed(2)}, hello-world/bare ${(e.rps / b.rps).toFixed(2)}`)
    console.log(`ratios (p50): account/hello-world ${(a.p50 / e.p50).toFixed(2)}, health/hello-world ${(h.p50 / e.p50).toFixed(2)}; (p99): account/hello-world ${(a.p99 / e.p99).toFixed(2)}`)
  } finally {
    service.kill("SIGTERM")
    bareChild.kill("SIGTERM")
    helloChild.kill("SIGTERM")
    agent.destroy()
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

