/**
 * Fault-injection helpers: the service as a real child process (so `kill -9` is a real crash), a
 * recording webhook receiver, the operator command, and the scale flag.
 *
 * `FAULTS_SCALE=ci` runs fewer rounds and deliveries (what `.ci/run` uses); unset is the full run.
 * `FAULTS_WORKERS=2` runs each service as a primary with two workers (PostgreSQL only: the embedded
 * database belongs to one process); unset or 1, each service is one process.
 */
import { type ChildProcess, execFile, execFileSync, spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import { createServer, type Server } from "node:http"
import { existsSync, readdirSync, readFileSync } from "node:fs"
import pg from "pg"
import { Effect, Layer } from "effect"
import { Provisioning } from "../../src/identity/Provisioning.js"
import { DatabaseLive } from "../../src/platform/Database.js"
import { freePort, testConfigLayer } from "../support/harness.js"
import { openTcpProxy } from "../support/tcpProxy.js"

export const ciScale = () => process.env.FAULTS_SCALE === "ci"

/** Worker processes per service in this run: `FAULTS_WORKERS` on PostgreSQL, else 1. */
export const faultWorkers = () => {
  const n = Number(process.env.FAULTS_WORKERS ?? "1")
  if (!Number.isInteger(n) || n < 1) throw new Error(`FAULTS_WORKERS must be a count, got ${process.env.FAULTS_WORKERS}`)
  return (process.env.DATABASE_URL ?? "") === "" ? 1 : n
}

export const scaled = (full: number, ci: number) => (ciScale() ? ci : full)

const ROOT = new URL("../../", import.meta.url).pathname

export interface ServiceProcess {
  readonly child: ChildProcess
  readonly pid: number
  readonly port: number
  readonly smtpPort: number
  readonly baseUrl: string
  readonly exited: Promise<number | null>
  readonly stderr: () => string
}

/** Processes sharing one database share the master key, as an operator's would (each has its own DATA_DIR). */
const MASTER_KEY = randomBytes(32).toString("hex")

export const baseEnv = (dataDir: string, databaseUrl: string | undefined, extra: Record<string, string> = {}) => ({
  // One process, whose pid is the service's, unless the run asks for workers (FAULTS_WORKERS): then
  // the pid is the primary's, and `workerPids` names its workers.
  WORKERS: String(databaseUrl !== undefined ? faultWorkers() : 1),
  DATA_DIR: dataDir,
  MAILROOM_SECRET_KEY: MASTER_KEY,
  WEBHOOK_ALLOW_PRIVATE_URLS: "true",
  LOG_LEVEL: "none",
  DNS_SERVER: "127.0.0.1:9",
  ...(databaseUrl !== undefined ? { DATABASE_URL: databaseUrl } : {}),
  ...extra
})

const childEnv = (env: Record<string, string>) => {
  const out: Record<string, string> = {}
  for (const [k, v] of Object.entries(process.env)) {
    if (v !== undefined && k !== "DATABASE_URL" && !k.startsWith("VITEST") && k !== "NODE_OPTIONS") out[k] = v
  }
  return { ...out, ...env }
}

/** The service as `npm start` runs it, bundled once per test file (scripts/build-server.mjs). */
let built = false
const builtService = () => {
  if (!built) {
    execFileSync(process.execPath, ["scripts/build-server.mjs"], { cwd: ROOT, stdio: "pipe" })
    built = true
  }
  return "dist/server/main.mjs"
}

/** Starts the built service (`node dist/server/main.mjs`) and waits until its health probe answers 200. */
export const startService = async (env: Record<string, string>, ports?: { port: number; smtpPort: number }) => {
  const port = ports?.port ?? await freePort()
  const smtpPort = ports?.smtpPort ?? await freePort()
  const child = spawn(process.execPath, [builtService()], {
    cwd: ROOT,
    env: childEnv({ ...env, PORT: String(port), SMTP_PORT: String(smtpPort), PUBLIC_BASE_URL: `http://127.0.0.1:${port}` }),
    stdio: ["ignore", "pipe", "pipe"]
  })
  // Both streams' tail: at LOG_LEVEL=none stdout is quiet, but an unexpected failure's cause (the
  // runtime's own report at exit) is printed there, and a failing assertion should show it.
  let err = ""
  const keep = (c: Buffer) => {
    err = (err + c.toString("utf8")).slice(-8000)
  }
  child.stdout?.on("data", keep)
  child.stderr?.on("data", keep)
  const exited = new Promise<number | null>((resolve) =>
    child.once("exit", (code, signal) => {
      keep(Buffer.from(`[service exited: code ${code}, signal ${signal}]\n`))
      resolve(code)
    }))
  const baseUrl = `http://127.0.0.1:${port}`
  // A primary starts its workers one after another (Workers.ts): on a busy machine that takes a while.
  const until = Date.now() + (Number(env.WORKERS ?? "1") > 1 ? 180_000 : 60_000)
  let dead = false
  void exited.then(() => {
    dead = true
  })
  for (;;) {
    if (dead) throw new Error(`service exited during start-up: ${err}`)
    try {
      const r = await fetch(`${baseUrl}/v1/health`)
      if (r.status === 200) break
    } catch {
      // not listening yet
    }
    if (Date.now() > until) {
      child.kill("SIGKILL")
      throw new Error(`service did not become healthy: ${err}`)
    }
    await sleep(100)
  }
  const workers = Number(env.WORKERS ?? "1")
  if (workers > 1) {
    // Health answers once worker 1 listens; the primary starts the others then.
    while (workerPids(child.pid!).length < workers) {
      if (dead) throw new Error(`service exited during start-up: ${err}`)
      if (Date.now() > until) {
        child.kill("SIGKILL")
        throw new Error(`service did not start its ${workers} workers: ${err}`)
      }
      await sleep(100)
    }
  }
  const service: ServiceProcess = { child, pid: child.pid!, port, smtpPort, baseUrl, exited, stderr: () => err }
  return service
}

/** Parent pid of a live process (Linux /proc); undefined once it is gone. */
const parentOf = (pid: number) => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1])
  } catch {
    return undefined
  }
}

/** The live worker processes of a primary (its direct children). */
export const workerPids = (primary: number) =>
  readdirSync("/proc").filter((n) => /^\d+$/.test(n)).map(Number).filter((pid) => parentOf(pid) === primary)

const gone = async (pids: ReadonlyArray<number>, ms: number) => {
  const until = Date.now() + ms
  while (pids.some((p) => parentOf(p) !== undefined) && Date.now() < until) await sleep(50)
  return pids.every((p) => parentOf(p) === undefined)
}

/**
 * kill -9 of the service's process: the lone process, or the primary. A primary's workers lose
 * their channel to it and exit on their own, as after a real crash of the primary; they are waited
 * for (and killed if they linger) so that the next start meets none of them.
 */
export const kill9 = async (s: ServiceProcess) => {
  const workers = workerPids(s.pid)
  s.child.kill("SIGKILL")
  await s.exited
  if (workers.length > 0 && !(await gone(workers, 10_000))) {
    for (const pid of workers) {
      try {
        process.kill(pid, "SIGKILL")
      } catch { /* gone meanwhile */ }
    }
    await gone(workers, 5000)
  }
}

/**
 * kill -9 of one of a primary's workers (`which`: its index among them); the primary starts it again.
 * Answers the killed pid once it is gone.
 */
export const kill9Worker = async (s: ServiceProcess, which = 0) => {
  const workers = workerPids(s.pid)
  const pid = workers[which % Math.max(1, workers.length)]
  if (pid === undefined) throw new Error(`service ${s.pid} has no workers`)
  process.kill(pid, "SIGKILL")
  await gone([pid], 10_000)
  return pid
}

/** Waits until the primary runs `count` workers again (after one was killed); false past `ms`. */
export const workersBack = async (s: ServiceProcess, count: number, ms = 60_000) => {
  const until = Date.now() + ms
  while (workerPids(s.pid).length < count) {
    if (Date.now() > until) return false
    await sleep(100)
  }
  return true
}

export const stopGracefully = async (s: ServiceProcess) => {
  s.child.kill("SIGTERM")
  const t = setTimeout(() => s.child.kill("SIGKILL"), 15_000)
  await s.exited
  clearTimeout(t)
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms))

/** The operator command: creates an organization and returns its id, inbox address and API key. */
export const createOrg = (env: Record<string, string>, name: string) =>
  new Promise<{ orgId: string; address: string; apiKey: string }>((resolve, reject) => {
    execFile(process.execPath, ["--import", "tsx", "src/admin.ts", "create-org", name, "--plan", "developer"], {
      cwd: ROOT,
      env: childEnv(env)
    }, (error, stdout, stderr) => {
      if (error) return reject(new Error(`${error.message}\n${stderr}`))
      const kv = Object.fromEntries(stdout.split(/\s+/).filter((l) => l.includes("=")).map((l) => l.split("=") as [string, string]))
      resolve({ orgId: kv.org_id!, address: kv.managed_inbox_address!, apiKey: kv.api_key! })
    })
  })

export interface ReceivedHit {
  readonly at: number
  readonly deliveryId: string
  readonly eventId: string
  readonly attempt: number
  readonly body: { id: string; email?: { subject?: string; message_id?: string | null } }
}

/** A webhook receiver recording every POST; answers 200 after `delayMs`. */
export const startReceiver = async (delayMs = 0) => {
  const hits: Array<ReceivedHit> = []
  const server: Server = createServer((req, res) => {
    const chunks: Array<Buffer> = []
    req.on("data", (c: Buffer) => chunks.push(c))
    req.on("end", () => {
      let body: ReceivedHit["body"] = { id: "" }
      try {
        body = JSON.parse(Buffer.concat(chunks).toString("utf8"))
      } catch {
        // recorded with an empty body
      }
      hits.push({
        at: Date.now(),
        deliveryId: String(req.headers["mailroom-delivery-id"] ?? ""),
        eventId: String(req.headers["mailroom-event-id"] ?? ""),
        attempt: Number(req.headers["mailroom-attempt"] ?? 0),
        body
      })
      const answer = () => res.writeHead(200).end("ok")
      if (delayMs > 0) setTimeout(answer, delayMs)
      else answer()
    })
  })
  server.keepAliveTimeout = 1000
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()))
  const a = server.address()
  const port = typeof a === "object" && a !== null ? a.port : 0
  return {
    url: (path: string) => `http://127.0.0.1:${port}${path}`,
    hits,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections()
        server.close(() => r())
      })
  }
}

/** A scratch database on the DATABASE_URL server (or undefined on PGlite) and its dropper. */
export const scratchDb = async () => {
  const url = process.env.DATABASE_URL
  if (url === undefined || url === "") return { url: undefined, drop: async () => {} }
  const name = `mailroom_f_${process.pid}_${Math.random().toString(36).slice(2, 10)}`
  const admin = new pg.Client({ connectionString: url })
  await admin.connect()
  await admin.query(`CREATE DATABASE ${name}`)
  await admin.end()
  const u = new URL(url)
  u.pathname = `/${name}`
  return {
    url: u.toString(),
    drop: async () => {
      const c = new pg.Client({ connectionString: url })
      await c.connect()
      await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
      await c.end()
    }
  }
}

/** Resident set size of a process in bytes (Linux /proc). */
export const rssOf = (pid: number) => {
  const m = /VmRSS:\s+(\d+)\s+kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))
  return m ? Number(m[1]) * 1024 : 0
}

/** Read-only queries on the service's database after it stopped (PGlite files) or any time (server). */
export const openDb = async (dataDir: string, databaseUrl: string | undefined) => {
  if (databaseUrl !== undefined) {
    const c = new pg.Client({ connectionString: databaseUrl })
    await c.connect()
    return {
      query: async <R>(text: string, params: Array<unknown> = []) => (await c.query(text, params)).rows as Array<R>,
      close: () => c.end()
    }
  }
  const { PGlite } = await import("@electric-sql/pglite")
  const db = await PGlite.create(`${dataDir}/pglite`)
  return {
    query: async <R>(text: string, params: Array<unknown> = []) => (await db.query<R>(text, params)).rows,
    close: () => db.close()
  }
}

/** A TCP proxy in front of the database: `down()` drops every connection and refuses new ones. */
export const startProxy = openTcpProxy

/**
 * Organizations with an API key each, created in-process straight in the service's database (which
 * this migrates) before any service process opens it.
 */
export const provisionOrgs = (env: Record<string, string>, count: number) =>
  Effect.runPromise(
    Effect.gen(function*() {
      const p = yield* Provisioning
      return yield* Effect.forEach(Array.from({ length: count }, (_, i) => i), (i) =>
        Effect.gen(function*() {
          const org = yield* p.createOrganization({ name: `Org ${i}`, plan: "developer" })
          return { id: org.id, apiKey: (yield* p.issueApiKey(org.id)).apiKey }
        }))
    }).pipe(
      Effect.provide(Provisioning.Default.pipe(Layer.provideMerge(DatabaseLive), Layer.provide(testConfigLayer(env)))),
      Effect.scoped
    )
  )

/**
 * Control of the local PostgreSQL cluster behind `databaseUrl`, when this process may use it (root,
 * Debian's pg_ctlcluster, one cluster, a loopback URL: as in CI); undefined otherwise, or when
 * `FAULTS_SERVER_RESTART=off` (a server shared with other work, which a restart would disturb).
 * `stop` is immediate mode: the server goes away like a crash and recovers from its WAL at `start`.
 */
export const localCluster = (databaseUrl: string) => {
  if (process.env.FAULTS_SERVER_RESTART === "off") return undefined
  const host = new URL(databaseUrl).hostname
  if (process.getuid?.() !== 0 || !existsSync("/usr/bin/pg_ctlcluster") || !existsSync("/etc/postgresql")) return undefined
  if (!["127.0.0.1", "localhost", "::1", "[::1]"].includes(host)) return undefined
  const versions = readdirSync("/etc/postgresql")
  if (versions.length !== 1) return undefined
  const ctl = (...args: Array<string>) =>
    execFileSync("pg_ctlcluster", ["--skip-systemctl-redirect", versions[0]!, "main", ...args], { stdio: "pipe" })
  return {
    stop: () => ctl("stop", "-m", "immediate"),
    start: () => ctl("start")
  }
}
