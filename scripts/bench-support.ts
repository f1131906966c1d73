/**
 * Shared pieces of the benchmarks: a scratch database (PostgreSQL from DATABASE_URL, else embedded),
 * organizations provisioned in-process before the service starts, the service as a child process,
 * percentiles and a raw SMTP client that times end-of-DATA → 250 exactly.
 */
import { Effect, Layer } from "effect"
import { execFileSync, spawn, type ChildProcess } from "node:child_process"
import { fileURLToPath } from "node:url"
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { createServer as createHttpServer } from "node:http"
import { connect, type Socket } from "node:net"
import { cpus, loadavg, tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { randomBytes } from "node:crypto"
import pg from "pg"
import { Provisioning } from "../src/identity/Provisioning.js"
import { databaseLayer, MIGRATIONS_DIR } from "../src/platform/Database.js"
import type * as SqlCounters from "../src/platform/SqlCounters.js"
import { freePort, testConfigLayer } from "../test/support/harness.js"

const ROOT = fileURLToPath(new URL("../", import.meta.url))

export const arg = (name: string, fallback: number) => {
  const i = process.argv.indexOf(`--${name}`)
  return i > 0 ? Number(process.argv[i + 1]) : fallback
}

export const percentile = (sorted: ReadonlyArray<number>, p: number) =>
  sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!

export interface Scratch {
  readonly env: Record<string, string>
  readonly adminUrl: string | undefined
  readonly cleanup: () => Promise<void>
}

/** A fresh database for one benchmark run. */
export const scratch = async (label: string): Promise<Scratch> => {
  const dataDir = mkdtempSync(join(tmpdir(), `mailroom-${label}-`))
  const env: Record<string, string> = {
    DATA_DIR: dataDir,
    // BENCH_LOG_LEVEL=warning shows the service's warnings and errors during a run.
    LOG_LEVEL: process.env.BENCH_LOG_LEVEL ?? "none",
    DNS_SERVER: "127.0.0.1:9",
    WEBHOOK_ALLOW_PRIVATE_URLS: "true",
    // Several service processes may share this database: they share the master key too.
    MAILROOM_SECRET_KEY: randomBytes(32).toString("hex")
  }
  const base = process.env.DATABASE_URL
  let name: string | undefined
  if (base) {
    name = `mailroom_${label}_${process.pid}`
    const admin = new pg.Client({ connectionString: base })
    await admin.connect()
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
    await admin.query(`CREATE DATABASE ${name}`)
    await admin.end()
    const u = new URL(base)
    u.pathname = `/${name}`
    env.DATABASE_URL = u.toString()
  }
  return {
    env,
    adminUrl: env.DATABASE_URL,
    cleanup: async () => {
      if (name !== undefined) {
        const admin = new pg.Client({ connectionString: base })
        await admin.connect()
        await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
        await admin.end()
      }
      rmSync(dataDir, { recursive: true, force: true })
    }
  }
}

export interface Org {
  readonly id: string
  readonly apiKey: string
  readonly address: string
}

/** Organizations created directly in the database (migrating it), before the service opens it. */
export const provision = (
  env: Record<string, string>,
  count: number,
  plan: "developer" | "pro" = "developer",
  /** The build whose migrations make the database (default: BENCH_SERVICE's, else this checkout's). */
  build?: string
) =>
  Effect.runPromise(
    Effect.gen(function*() {
      const p = yield* Provisioning
      const out: Array<Org> = []
      for (let i = 0; i < count; i++) {
        const org = yield* p.createOrganization({ name: `bench-${i}`, plan })
        out.push({ id: org.id, apiKey: (yield* p.issueApiKey(org.id)).apiKey, address: org.managedInboxAddress })
      }
      return out
    }).pipe(
      Effect.provide(Provisioning.Default.pipe(Layer.provideMerge(benchDatabase(build)), Layer.provide(testConfigLayer(env)))),
      Effect.scoped
    )
  )

export interface Service {
  readonly child: ChildProcess
  readonly baseUrl: string
  readonly smtpPort: number
  readonly rssKb: () => number
  readonly peakRssKb: () => number
  readonly workers: number
  /**
   * CPU time (user + system) the service has used, in ms, every process of it counted (primary,
   * workers, workerd): a figure less bent by a busy machine.
   */
  readonly cpuMs: () => number
  /** The service's database counters as of its next stats write (SqlCounters.ts; the stats file is rewritten every second). */
  readonly sqlStats: () => Promise<SqlSnapshot>
  /** The longest event-loop delay of the service's last second, in ms (from the stats file; 0 before its first write). */
  readonly lagMaxMs: () => number
  readonly stop: () => Promise<void>
}

/**
 * The database as the measured build migrates it: with BENCH_SERVICE, that build's own migrations
 * (`migrations/` beside its `dist/`), so an older build is not measured against a newer schema.
 */
export const benchDatabase = (build: string | undefined = process.env.BENCH_SERVICE) =>
  databaseLayer(build ? migrationsOf(build) : MIGRATIONS_DIR)

/** The migrations of a build (a built `dist/server/main.mjs`): `migrations/` beside its `dist/`. */
export const migrationsOf = (build: string) => join(dirname(build), "..", "..", "migrations")

/** The service as `npm start` runs it: bundled once per benchmark run (scripts/build-server.mjs). */
let built: string | undefined
export const builtService = () => {
  // BENCH_SERVICE=path/to/main.mjs runs that build instead (an older one, to compare side by side).
  if (process.env.BENCH_SERVICE) return process.env.BENCH_SERVICE
  if (built === undefined) {
    execFileSync(process.execPath, ["scripts/build-server.mjs"], { cwd: ROOT, stdio: "inherit" })
    built = `${ROOT}dist/server/main.mjs`
  }
  return built
}

/** utime + stime and the parent pid of a process, from /proc/<pid>/stat; undefined once it is gone. */
const statOf = (pid: number | string | undefined) => {
  try {
    // Fields after the command name (which may hold spaces): ppid is the 2nd, utime and stime the 12th and 13th, in 10 ms ticks.
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
    return { ppid: Number(f[1]), cpuMs: (Number(f[11]) + Number(f[12])) * 10, systemMs: Number(f[12]) * 10 }
  } catch {
    return undefined
  }
}

/** CPU time (user + system) a process has used so far, in ms, from /proc/<pid>/stat; 0 once it is gone. */
export const cpuMsOf = (pid: number | undefined) => statOf(pid)?.cpuMs ?? 0

/**
 * The kernel's part of that time (system calls, the TCP stack), in ms. A sampling profiler counts a
 * thread waiting to run again after a system call as time in the call; this is what the kernel
 * actually spent.
 */
export const systemMsOf = (pid: number | undefined) => statOf(pid)?.systemMs ?? 0

/**
 * CPU time (user + system) of a process and every process below it (a primary's workers, the
 * functions' workerd), in ms. A descendant that exits mid-run takes its share with it, so runs that
 * compare figures keep their processes alive.
 */
export const treeCpuMs = (root: number | undefined) => {
  if (root === undefined) return 0
  const children = new Map<number, Array<number>>()
  const cpu = new Map<number, number>()
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue
    const s = statOf(name)
    if (s === undefined) continue
    cpu.set(Number(name), s.cpuMs)
    children.set(s.ppid, [...(children.get(s.ppid) ?? []), Number(name)])
  }
  let total = 0
  const todo = [root]
  while (todo.length > 0) {
    const pid = todo.pop()!
    total += cpu.get(pid) ?? 0
    todo.push(...(children.get(pid) ?? []))
  }
  return total
}

/** Processes in the tree below `root` (itself included). */
export const treeSize = (root: number | undefined) => {
  if (root === undefined) return 0
  const parents = new Map<number, number>()
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue
    const s = statOf(name)
    if (s !== undefined) parents.set(Number(name), s.ppid)
  }
  const inTree = (pid: number): boolean => pid === root || (parents.has(pid) && pid !== 1 && inTree(parents.get(pid)!))
  return [...parents.keys()].filter(inTree).length
}

/**
 * `--workers N` (default `WORKERS`, else 1): service processes of a run; `--workers 1,2` runs the
 * measurement once at each count, so CPU per operation compares in the same few minutes.
 */
export const workersArg = (): ReadonlyArray<number> => {
  const i = process.argv.indexOf("--workers")
  const raw = i > 0 ? process.argv[i + 1]! : (process.env.WORKERS ?? "1")
  const counts = raw.split(",").map((n) => Number(n.trim()))
  if (counts.length === 0 || counts.some((n) => !Number.isInteger(n) || n < 1)) throw new Error(`--workers: a count or a list of counts, got ${raw}`)
  return counts
}

/** One line per worker count: CPU per operation of the whole service tree, and the ratio to the first count. */
export const printCpuByWorkers = (what: string, rows: ReadonlyArray<{ readonly workers: number; readonly cpuMsPerOp: number; readonly rate: number }>) => {
  if (rows.length < 2) return
  const first = rows[0]!
  console.log(`\nservice CPU per ${what}, whole process tree (primary + workers):`)
  for (const r of rows) {
    console.log(`  WORKERS=${r.workers}: ${r.cpuMsPerOp.toFixed(2)} ms per ${what} at ${r.rate.toFixed(0)}/s` +
      (r === first ? "" : ` (${(r.cpuMsPerOp / Math.max(1e-9, first.cpuMsPerOp)).toFixed(2)}× WORKERS=${first.workers}; ${(r.rate / Math.max(1e-9, first.rate)).toFixed(2)}× the rate)`))
  }
  console.log(`  load average ${loadavg().map((l) => l.toFixed(1)).join(" ")} on ${cpus().length} cores`)
}

/**
 * The node flags `npm start` gives the service, read from package.json's `start` script (V8's old
 * space held to `HEAP_LIMIT_MB`, its young space `YOUNG_SPACE_MB`, with the defaults written there,
 * or what this run's environment says), so a benchmark measures the process a user runs.
 */
export const serviceNodeArgs = () => {
  const start: string = JSON.parse(readFileSync(`${ROOT}package.json`, "utf8")).scripts.start
  const flags = /\bnode (.*) dist\/server\/main\.mjs/.exec(start)?.[1]
  if (flags === undefined || !flags.includes("HEAP_LIMIT_MB")) throw new Error(`package.json's start script sets no HEAP_LIMIT_MB default: ${start}`)
  return flags.split(" ").filter((f) => f.length > 0).map((f) =>
    f.replace(/\$\{(\w+):-([^}]*)\}/g, (_, name: string, fallback: string) => process.env[name] ?? fallback)
  )
}

export const startService = async (
  env: Record<string, string>,
  options: { readonly workers?: number; /** A built main.mjs to run instead of `builtService()`. */ readonly build?: string } = {}
): Promise<Service> => {
  const port = await freePort()
  const smtpPort = await freePort()
  // BENCH_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/prof" profiles the service during a run.
  const extra = (process.env.BENCH_NODE_ARGS ?? "").split(" ").filter((a) => a.length > 0)
  // One service process unless the run asks for more (--workers 2, WORKERS=2 …), so figures compare
  // across runs and with the single-process references.
  const workers = String(options.workers ?? env.WORKERS ?? process.env.WORKERS ?? "1")
  // The stats file carries the database counters every benchmark prints per operation (`printBudget`).
  const statsFile = env.MAILROOM_STATS_FILE ?? join(tmpdir(), `mailroom-bench-stats-${process.pid}-${port}.json`)
  const child = spawn(process.execPath, [...serviceNodeArgs(), ...extra, options.build ?? builtService()], {
    env: { ...process.env, ...env, MAILROOM_STATS_FILE: statsFile, WORKERS: workers, PORT: String(port), SMTP_PORT: String(smtpPort), PUBLIC_BASE_URL: `http://127.0.0.1:${port}` },
    stdio: ["ignore", "ignore", "inherit"]
  })
  const baseUrl = `http://127.0.0.1:${port}`
  // BENCH_START_SECONDS: how long a start may take (default 60; a heavily loaded machine needs more).
  const until = Date.now() + Number(process.env.BENCH_START_SECONDS ?? 60) * 1000
  for (;;) {
    try {
      if ((await fetch(`${baseUrl}/v1/health`)).ok) break
    } catch { /* starting */ }
    if (Date.now() > until) {
      child.kill("SIGKILL")
      throw new Error("service did not start")
    }
    await new Promise((r) => setTimeout(r, 200))
  }
  // Every worker up (the primary starts the others once the first listens), so none starts mid-run.
  if (Number(workers) > 1) {
    while (treeSize(child.pid) < Number(workers) + 1 && Date.now() < until) await new Promise((r) => setTimeout(r, 200))
    // A forked worker listens once its service is up: a few seconds on a busy machine.
    await new Promise((r) => setTimeout(r, 5000))
  }
  const status = (field: string) => {
    try {
      const line = readFileSync(`/proc/${child.pid}/status`, "utf8").split("\n").find((l) => l.startsWith(field))
      return Number(line?.split(/\s+/)[1] ?? 0)
    } catch {
      return 0
    }
  }
  return {
    child,
    baseUrl,
    smtpPort,
    rssKb: () => status("VmRSS:"),
    peakRssKb: () => status("VmHWM:"),
    workers: Number(workers),
    cpuMs: () => treeCpuMs(child.pid),
    sqlStats: () => serviceSqlStats(statsFile, Number(workers)),
    lagMaxMs: () => (readStats(statsFile) as { lag_ms?: { max: number } } | undefined)?.lag_ms?.max ?? 0,
    stop: () =>
      new Promise((resolve) => {
        child.once("exit", () => resolve())
        child.kill("SIGTERM")
        // Long enough for a profiled service (BENCH_NODE_ARGS) to write its profile on a busy machine.
        setTimeout(() => child.kill("SIGKILL"), 30_000)
      })
  }
}

/**
 * A minimal SMTP client on one connection: sends messages one after another and reports, for
 * each, the time from the end-of-data dot to the server's reply.
 */
export class RawSmtp {
  private buffer = ""
  private waiters: Array<(line: string) => void> = []
  private constructor(private readonly socket: Socket) {
    socket.setEncoding("utf8")
    socket.on("data", (chunk: string) => {
      this.buffer += chunk
      let i: number
      while ((i = this.buffer.indexOf("\r\n")) >= 0) {
        const line = this.buffer.slice(0, i)
        this.buffer = this.buffer.slice(i + 2)
        // Multi-line replies ("250-…") end with "250 …".
        if (/^\d{3} /.test(line)) this.waiters.shift()?.(line)
      }
    })
  }

  static async open(port: number) {
    const socket = connect(port, "127.0.0.1")
    socket.setNoDelay(true)
    const c = new RawSmtp(socket)
    await c.reply() // greeting
    c.socket.write("EHLO bench.local\r\n")
    await c.reply()
    return c
  }

  private reply() {
    return new Promise<string>((resolve) => this.waiters.push(resolve))
  }

  /** Returns [reply code, milliseconds from end of data to the reply]. */
  async send(from: string, to: string, data: string): Promise<[number, number]> {
    this.socket.write(`MAIL FROM:<${from}>\r\n`)
    await this.reply()
    this.socket.write(`RCPT TO:<${to}>\r\n`)
    const rcpt = await this.reply()
    if (!rcpt.startsWith("250")) return [Number(rcpt.slice(0, 3)), 0]
    this.socket.write("DATA\r\n")
    await this.reply()
    this.socket.write(data.replace(/\n\./g, "\n.."))
    const t0 = performance.now()
    this.socket.write("\r\n.\r\n")
    const done = await this.reply()
    return [Number(done.slice(0, 3)), performance.now() - t0]
  }

  close() {
    this.socket.end("QUIT\r\n")
  }
}

/** A 10 KB-ish message with a unique id. */
export const message = (i: number, from: string, to: string, bodyBytes = 10 * 1024) => {
  const line = "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor.\r\n"
  const body = line.repeat(Math.ceil(bodyBytes / line.length))
  return [
    `From: Bench <${from}>`,
    `To: <${to}>`,
    `Subject: bench ${i}`,
    `Message-ID: <bench-${i}-${process.pid}@bench.local>`,
    `Date: ${new Date().toUTCString()}`,
    `X-Bench-Sent: ${Date.now()}`,
    "MIME-Version: 1.0",
    "Content-Type: text/plain; charset=utf-8",
    "",
    body
  ].join("\r\n")
}

/** Per organization: an endpoint, 5 filters, 60 emails and 60 deliveries (the API benchmarks' data). */
export const seedApiData = async (db: pg.Client, orgIds: ReadonlyArray<string>) => {
  await db.query(`
    INSERT INTO endpoints (org_id, kind, url, enabled)
    SELECT o, 'http', 'http://127.0.0.1:9/hook', true FROM unnest($1::uuid[]) o`, [orgIds])
  await db.query(`
    INSERT INTO filters (org_id, type, pattern, enabled)
    SELECT o, 'blocklist', 'seed' || g || '@bench.example', true FROM unnest($1::uuid[]) o, generate_series(1, 5) g`, [orgIds])
  await db.query(`
    INSERT INTO emails (org_id, recipient, from_address, subject, size_bytes, auth, event_type, status, received_at)
    SELECT o, 'inbox@agents.localhost', 'sender' || g || '@bench.example', 'bench subject ' || g, 2048,
           '{"spf":"none","dkim":"none","dmarc":"none"}',
           'email.received', 'accepted', now() - g * interval '1 minute'
    FROM unnest($1::uuid[]) o, generate_series(1, 60) g`, [orgIds])
  await db.query(`
    INSERT INTO deliveries (org_id, endpoint_id, event_id, event_type, payload, status, attempt_count,
                            email_sender, email_recipient, email_subject, created_at, updated_at)
    SELECT e.org_id, e.id, 'evt_seed_' || g, 'email.received', '{}',
           CASE WHEN g % 10 = 0 THEN 'failed' ELSE 'delivered' END, 1,
           'sender@bench.example', 'inbox@agents.localhost', 'bench subject ' || g,
           now() - g * interval '1 minute', now() - g * interval '1 minute'
    FROM endpoints e, generate_series(1, 60) g WHERE e.org_id = ANY($1::uuid[])`, [orgIds])
}

/**
 * The API benchmarks' set-up: a scratch database with `orgCount` organizations and their seeded
 * data (`seedApiData`), an admin connection to it, and the service started on it. `close` stops and
 * drops everything, also after a failed set-up.
 */
export const startApiBench = async (label: string, orgCount: number) => {
  const s = await scratch(label)
  const db = new pg.Client({ connectionString: s.adminUrl })
  let service: Service | undefined
  const close = async () => {
    await db.end().catch(() => undefined)
    if (service !== undefined) await service.stop()
    await s.cleanup()
  }
  try {
    const orgs = await provision(s.env, orgCount)
    await db.connect()
    await seedApiData(db, orgs.map((o) => o.id))
    service = await startService(s.env)
    return { orgs, db, service, close }
  } catch (e) {
    await close()
    throw e
  }
}

/** What the stats file says about the database (src/platform/SqlCounters.ts `snapshot`). */
export type SqlSnapshot = SqlCounters.Snapshot

const readStats = (file: string): { seq: number; sql?: SqlSnapshot } | undefined => {
  try {
    return JSON.parse(readFileSync(file, "utf8"))
  } catch {
    return undefined
  }
}

/** The counters of several processes of one service, added up. */
export const sumSnapshots = (all: ReadonlyArray<SqlSnapshot>): SqlSnapshot => {
  type Counts = SqlSnapshot["totals"]
  const add = (a: Counts, b: Counts): Counts => ({
    roundTrips: a.roundTrips + b.roundTrips,
    statements: a.statements + b.statements,
    commits: a.commits + b.commits,
    rollbacks: a.rollbacks + b.rollbacks
  })
  if (all.length === 1) return all[0]!
  const paths: Record<string, SqlSnapshot["paths"][string]> = {}
  for (const s of all) {
    for (const [label, p] of Object.entries(s.paths)) {
      const seen = paths[label]
      paths[label] = seen === undefined ? p : { ...add(seen, p), operations: seen.operations + p.operations, finished: seen.finished + p.finished, last: p.last }
    }
  }
  return { totals: all.slice(1).reduce((acc, s) => add(acc, s.totals), all[0]!.totals), paths }
}

/**
 * The database counters of a service of `workers` processes: each worker writes its own stats file
 * (slot 1 the named one, slot N `<file>.N`), and the service's figures are their sum.
 */
export const serviceSqlStats = async (statsFile: string, workers: number): Promise<SqlSnapshot> =>
  sumSnapshots(await Promise.all(Array.from({ length: workers }, (_, i) => freshSqlStats(i === 0 ? statsFile : `${statsFile}.${i + 1}`))))

/** Waits for the service's next stats write (so the figures include everything done before the call). */
export const freshSqlStats = async (file: string): Promise<SqlSnapshot> => {
  const seen = readStats(file)?.seq ?? 0
  for (let i = 0; i < 50; i++) {
    const now = readStats(file)
    if (now !== undefined && now.seq > seen && now.sql !== undefined) return now.sql
    await new Promise((r) => setTimeout(r, 100))
  }
  throw new Error(`no fresh statistics in ${file}: is MAILROOM_STATS_FILE written?`)
}

/** A point to measure from: the service's database counters and its CPU time. */
export interface BudgetMark {
  readonly sql: SqlSnapshot
  readonly cpuMs: number
}

/** What the budget printer needs of a service process (a `Service`, or one a benchmark spawned itself). */
export type Measured = Pick<Service, "cpuMs" | "sqlStats">

export const budgetMark = async (service: Measured): Promise<BudgetMark> => ({ sql: await service.sqlStats(), cpuMs: service.cpuMs() })

const per = (n: number, ops: number) => (n / Math.max(1, ops)).toFixed(2)

/**
 * Prints what `operations` operations (of what `label` names) cost the service since `from`: its
 * CPU time, every round trip it made (totals, background polls included) per operation, and each
 * path whose counters moved with its own operations and figures per operation of that path. The
 * budgets in docs/benchmarks.md are set against these lines.
 */
export const printBudget = async (service: Measured, from: BudgetMark, label: string, operations: number) => {
  const cpuMs = service.cpuMs() - from.cpuMs
  const to = await service.sqlStats()
  const t = to.totals
  const f = from.sql.totals
  console.log(`budget per ${label} (${operations}): service CPU ${per(cpuMs, operations)} ms; all database work ` +
    `${per(t.roundTrips - f.roundTrips, operations)} round trips, ${per(t.statements - f.statements, operations)} statements, ` +
    `${per(t.commits - f.commits, operations)} commits`)
  for (const [path, p] of Object.entries(to.paths)) {
    const q = from.sql.paths[path] ?? { operations: 0, roundTrips: 0, statements: 0, commits: 0, rollbacks: 0 }
    const ops = p.operations - q.operations
    const trips = p.roundTrips - q.roundTrips
    if (ops === 0 && trips === 0) continue
    const base = ops > 0 ? ops : operations
    console.log(`  ${path.padEnd(34)} ${String(ops).padStart(7)} ops  per ${ops > 0 ? "op " : label}: ${per(trips, base)} round trips, ` +
      `${per(p.statements - q.statements, base)} statements, ${per(p.commits - q.commits, base)} commits`)
  }
}

/** An OpenAI-compatible embeddings service on loopback answering at once (the same vector for every text). */
export const startStubEmbeddings = () =>
  new Promise<{ url: string; close: () => void }>((resolve) => {
    const server = createHttpServer((req, res) => {
      let raw = ""
      req.on("data", (c: Buffer) => (raw += c.toString("utf8")))
      req.on("end", () => {
        const input = (JSON.parse(raw) as { input: Array<string> }).input
        res.writeHead(200, { "content-type": "application/json" })
        res.end(JSON.stringify({ data: input.map((_, index) => ({ index, embedding: [1, 0, 0, 0] })) }))
      })
    })
    server.listen(0, "127.0.0.1", () => resolve({ url: `http://127.0.0.1:${(server.address() as { port: number }).port}`, close: () => server.close() }))
  })
