/**
 * Inbound benchmark on PostgreSQL, loopback only, in one run:
 *   1. ingest → webhook latency p50/p99 at a steady rate (default 50 msgs/s for 10 s): each message
 *      carries its send time in a header; the receiver parses the signed payload and measures;
 *   2. peak RSS of the service process while it ingests (and delivers) one 25 MB message;
 *   3. the highest sustained end-to-end rate: N concurrent SMTP connections flood the service for
 *      10 s; webhooks received per second, until the backlog is drained;
 *   4. the same flood against a bare `smtp-server` that only counts messages (the ceiling of SMTP on
 *      this machine); the ratio is the figure.
 * The service runs as a child process (`dist/server/main.mjs`, as `npm start` runs it) over a scratch database
 * created on DATABASE_URL's server and dropped afterwards; DNS goes to a local stub answering
 * NXDOMAIN (SPF/DKIM/DMARC lookups happen and fail fast, as for mail from unknown domains).
 *
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test npx tsx scripts/bench-inbound.ts \
 *     [--rate 50] [--seconds 10] [--concurrency 16] [--big-mb 25]
 * One service process (`WORKERS=1`) unless WORKERS says otherwise, so the figure compares with the
 * other benchmarks; its CPU is that of its whole process tree (workers, the model process).
 */
import { benchDatabase, budgetMark, builtService, freshSqlStats, printBudget, serviceNodeArgs, treeCpuMs } from "./bench-support.js"
import dnsPacket from "dns-packet"
import { Effect, Layer } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import { createSocket } from "node:dgram"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import http from "node:http"
import { cpus, loadavg, tmpdir } from "node:os"
import { join } from "node:path"
import nodemailer from "nodemailer"
import pg from "pg"
import { Provisioning } from "../src/identity/Provisioning.js"
import { freePort, testConfigLayer } from "../test/support/harness.js"

const arg = (name: string, fallback: number) => {
  const i = process.argv.indexOf(`--${name}`)
  return i > 0 ? Number(process.argv[i + 1]) : fallback
}
const RATE = arg("rate", 50)
const SECONDS = arg("seconds", 10)
const CONCURRENCY = arg("concurrency", 16)
const BIG_MB = arg("big-mb", 25)
/** The whole run stops by itself after this long, whatever happens. */
const HARD_LIMIT_MS = 240_000
const DATABASE_URL = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test"

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms))
const quantile = (sorted: ReadonlyArray<number>, p: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] ?? NaN

/** A DNS server on loopback answering NXDOMAIN to everything. */
const startDnsStub = () =>
  new Promise<{ port: number; close: () => void }>((resolve) => {
    const socket = createSocket("udp4")
    socket.on("message", (msg, rinfo) => {
      try {
        const q = dnsPacket.decode(msg)
        const out = dnsPacket.encode({ id: q.id, type: "response", flags: dnsPacket.RECURSION_AVAILABLE | 3, questions: q.questions })
        socket.send(out, rinfo.port, rinfo.address)
      } catch { /* not DNS */ }
    })
    socket.bind(0, "127.0.0.1", () => resolve({ port: socket.address().port, close: () => socket.close() }))
  })

interface Hit {
  readonly tag: string
  readonly sentAt: number
  readonly receivedAt: number
}

/** The webhook receiver: parses each payload, reads the bench headers, answers 200. */
const startReceiver = () =>
  new Promise<{ port: number; hits: Array<Hit>; close: () => void }>((resolve) => {
    const hits: Array<Hit> = []
    const server = http.createServer((req, res) => {
      const chunks: Array<Buffer> = []
      req.on("data", (c: Buffer) => chunks.push(c))
      req.on("end", () => {
        const receivedAt = Date.now()
        try {
          const payload = JSON.parse(Buffer.concat(chunks).toString("utf8")) as { email: { headers: Record<string, string> } }
          const sentAt = Number(payload.email.headers["x-bench-sent"])
          hits.push({ tag: payload.email.headers["x-bench-tag"] ?? "", sentAt, receivedAt })
        } catch { /* counted as nothing */ }
        res.writeHead(200, { "content-type": "text/plain" })
        res.end("ok")
      })
    })
    server.keepAliveTimeout = 30_000
    server.listen(0, "127.0.0.1", () => {
      const a = server.address()
      resolve({ port: typeof a === "object" && a !== null ? a.port : 0, hits, close: () => server.close() })
    })
  })

const waitFor = async (url: string, ms = 60_000) => {
  const until = Date.now() + ms
  while (Date.now() < until) {
    try {
      if ((await fetch(url)).ok) return
    } catch { /* not up yet */ }
    await sleep(200)
  }
  throw new Error(`${url} did not come up`)
}

const waitUntil = async (cond: () => boolean, ms: number) => {
  const until = Date.now() + ms
  while (!cond() && Date.now() < until) await sleep(20)
  return cond()
}

const BODY = "Hello,\r\n\r\n" + "This is a benchmark message of ordinary size and shape. ".repeat(20) + "\r\n\r\nRegards\r\n"

const message = (to: string, tag: string) => ({
  from: "Bench Sender <sender@bench.example>",
  to,
  subject: `bench ${tag}`,
  text: BODY,
  html: `<p>${BODY}</p>`,
  headers: { "X-Bench-Sent": String(Date.now()), "X-Bench-Tag": tag }
})

/** Peak resident memory of a process: VmHWM (reset before the measured phase when the kernel allows) and sampled VmRSS. */
const memoryKb = (pid: number, field: "VmRSS" | "VmHWM") => {
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(readFileSync(`/proc/${pid}/status`, "utf8"))
  return m === null ? NaN : Number(m[1])
}

const selfCpu = () => {
  const u = process.cpuUsage()
  return (u.user + u.system) / 1e6
}

/** One flood: `concurrency` SMTP connections sending back to back for `seconds`. */
const flood = async (port: number, to: string, tagPrefix: string, seconds: number, concurrency: number) => {
  const transports = Array.from({ length: concurrency }, () =>
    nodemailer.createTransport({ host: "127.0.0.1", port, secure: false, ignoreTLS: true, pool: true, maxConnections: 1, maxMessages: Infinity }))
  let accepted = 0
  let failed = 0
  const started = Date.now()
  const deadline = started + seconds * 1000
  let n = 0
  await Promise.all(transports.map(async (t) => {
    while (Date.now() < deadline) {
      try {
        await t.sendMail(message(to, `${tagPrefix}-${n++}`))
        accepted++
      } catch {
        failed++
      }
    }
  }))
  const elapsed = (Date.now() - started) / 1000
  for (const t of transports) t.close()
  return { accepted, failed, elapsed, started }
}

const bigMessage = (to: string, targetBytes: number) => {
  const head = [
    "From: Bench Sender <sender@bench.example>",
    `To: ${to}`,
    "Subject: bench big",
    `Message-ID: <big-${Date.now()}@bench.example>`,
    `X-Bench-Sent: ${Date.now()}`,
    "X-Bench-Tag: big",
    "MIME-Version: 1.0",
    "Content-Type: multipart/mixed; boundary=\"bench-big\"",
    "",
    "--bench-big",
    "Content-Type: text/plain; charset=utf-8",
    "",
    "A large attachment follows.",
    "--bench-big",
    "Content-Type: application/octet-stream; name=\"big.bin\"",
    "Content-Disposition: attachment; filename=\"big.bin\"",
    "Content-Transfer-Encoding: base64",
    "",
    ""
  ].join("\r\n")
  const tail = "\r\n--bench-big--\r\n"
  // base64 in 76-character lines: 78 bytes on the wire per 57 bytes of content.
  const contentBytes = Math.floor(((targetBytes - head.length - tail.length) / 78) * 57)
  const b64 = randomBytes(contentBytes).toString("base64").replace(/.{76}/g, "$&\r\n")
  return head + b64 + tail
}

const main = async () => {
  const loadStart = loadavg()[0]!
  const dataDir = mkdtempSync(join(tmpdir(), "mailroom-bench-inbound-"))
  const dbName = `mailroom_bench_inbound_${process.pid}`
  const admin = new pg.Client({ connectionString: DATABASE_URL })
  await admin.connect()
  await admin.query(`CREATE DATABASE ${dbName}`)
  await admin.end()
  const u = new URL(DATABASE_URL)
  u.pathname = `/${dbName}`
  const dbUrl = u.toString()
  const env: Record<string, string> = { DATA_DIR: dataDir, LOG_LEVEL: "none", DATABASE_URL: dbUrl }

  const children: Array<ChildProcess> = []
  const closers: Array<() => void> = []
  const hardStop = setTimeout(() => {
    console.error(`bench-inbound: stopped after ${HARD_LIMIT_MS / 1000} s`)
    for (const c of children) c.kill("SIGKILL")
    process.exit(2)
  }, HARD_LIMIT_MS)

  try {
    // The organization and its key, written straight into the scratch database (the migrations
    // run here first); the service then starts over the same database.
    const org = await Effect.runPromise(
      Effect.gen(function*() {
        const p = yield* Provisioning
        const o = yield* p.createOrganization({ name: "bench-inbound", plan: "developer" })
        return { key: (yield* p.issueApiKey(o.id)).apiKey, address: o.managedInboxAddress as string }
      }).pipe(
        Effect.provide(Provisioning.Default.pipe(Layer.provideMerge(benchDatabase()), Layer.provide(testConfigLayer(env)))),
        Effect.scoped
      )
    )

    const dns = await startDnsStub()
    closers.push(dns.close)
    const receiver = await startReceiver()
    closers.push(receiver.close)

    const port = await freePort()
    const smtpPort = await freePort()
    // BENCH_SERVICE_NODE_ARGS: extra node flags for the service (e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof").
    const extra = (process.env.BENCH_SERVICE_NODE_ARGS ?? "").split(" ").filter((a) => a !== "")
    const statsFile = join(tmpdir(), `mailroom-bench-inbound-stats-${process.pid}.json`)
    const service = spawn(process.execPath, [...serviceNodeArgs(), ...extra, builtService()], {
      env: {
        ...process.env,
        ...env,
        MAILROOM_STATS_FILE: statsFile,
        WORKERS: process.env.WORKERS ?? "1",
        PORT: String(port),
        SMTP_PORT: String(smtpPort),
        WEBHOOK_ALLOW_PRIVATE_URLS: "true",
        DNS_SERVER: process.env.BENCH_DNS_SERVER ?? `127.0.0.1:${dns.port}`
      },
      stdio: ["ignore", "ignore", "inherit"]
    })
    children.push(service)
    const base = `http://127.0.0.1:${port}`
    await waitFor(`${base}/v1/health`)
    const pid = service.pid!

    const ep = await fetch(`${base}/v1/endpoints`, {
      method: "POST",
      headers: { authorization: `Bearer ${org.key}`, "content-type": "application/json" },
      body: JSON.stringify({ url: `http://127.0.0.1:${receiver.port}/hook` })
    })
    if (ep.status !== 201) throw new Error(`creating the endpoint answered ${ep.status}: ${await ep.text()}`)

    const pooled = nodemailer.createTransport({
      host: "127.0.0.1", port: smtpPort, secure: false, ignoreTLS: true, pool: true, maxConnections: 8, maxMessages: Infinity
    })
    const count = (prefix: string) => receiver.hits.filter((h) => h.tag.startsWith(prefix)).length

    // Warm-up: connections, JIT, caches, the dispatcher's first wake-ups.
    await Promise.all(Array.from({ length: 20 }, (_, i) => pooled.sendMail(message(org.address, `warm-${i}`))))
    await waitUntil(() => count("warm-") >= 20, 30_000)

    // 1. Steady rate.
    const total = RATE * SECONDS
    const steadyCpu = { service: treeCpuMs(pid) / 1000, bench: selfCpu(), at: Date.now() }
    const ingest: Array<number> = []
    let steadyErrors = 0
    const t0 = Date.now()
    const sends: Array<Promise<void>> = []
    for (let i = 0; i < total; i++) {
      const due = t0 + (i * 1000) / RATE
      const wait = due - Date.now()
      if (wait > 0) await sleep(wait)
      const started = Date.now()
      sends.push(pooled.sendMail(message(org.address, `steady-${i}`)).then(
        () => { ingest.push(Date.now() - started) },
        () => { steadyErrors++ }
      ))
    }
    await Promise.all(sends)
    const sendSeconds = (Date.now() - t0) / 1000
    await waitUntil(() => count("steady-") >= total - steadyErrors, 30_000)
    const steadyWall = (Date.now() - steadyCpu.at) / 1000
    const steadyUse = {
      service: (treeCpuMs(pid) / 1000 - steadyCpu.service) / steadyWall,
      bench: (selfCpu() - steadyCpu.bench) / steadyWall
    }
    const latencies = receiver.hits.filter((h) => h.tag.startsWith("steady-")).map((h) => h.receivedAt - h.sentAt).sort((a, b) => a - b)
    ingest.sort((a, b) => a - b)

    // 2. Peak RSS around one big message.
    await sleep(1000)
    let hwmReset = true
    try {
      writeFileSync(`/proc/${pid}/clear_refs`, "5")
    } catch {
      hwmReset = false
    }
    const rssBefore = memoryKb(pid, "VmRSS")
    let rssPeak = rssBefore
    const sampler = setInterval(() => {
      const v = memoryKb(pid, "VmRSS")
      if (v > rssPeak) rssPeak = v
    }, 10)
    const raw = bigMessage(org.address, BIG_MB * 1024 * 1024)
    const bigStarted = Date.now()
    const single = nodemailer.createTransport({ host: "127.0.0.1", port: smtpPort, secure: false, ignoreTLS: true })
    let bigAnswer = ""
    try {
      bigAnswer = (await single.sendMail({ envelope: { from: "sender@bench.example", to: [org.address] }, raw })).response
    } catch (e) {
      bigAnswer = `refused: ${(e as { response?: string }).response ?? String(e)}`
    } finally {
      single.close()
    }
    const bigAccepted = Date.now() - bigStarted
    const bigDelivered = await waitUntil(() => count("big") >= 1, 60_000)
    await sleep(500)
    clearInterval(sampler)
    const hwm = memoryKb(pid, "VmHWM")

    // 3. Flood the service.
    const measured = { cpuMs: () => treeCpuMs(pid), sqlStats: () => freshSqlStats(statsFile) }
    const floodMark = await budgetMark(measured)
    const floodCpu = { service: treeCpuMs(pid) / 1000, bench: selfCpu(), at: Date.now() }
    const svc = await flood(smtpPort, org.address, "flood", SECONDS, CONCURRENCY)
    await waitUntil(() => count("flood-") >= svc.accepted, 60_000)
    const floodWall = (Date.now() - floodCpu.at) / 1000
    const floodUse = {
      service: (treeCpuMs(pid) / 1000 - floodCpu.service) / floodWall,
      bench: (selfCpu() - floodCpu.bench) / floodWall
    }
    const floodHits = receiver.hits.filter((h) => h.tag.startsWith("flood-"))
    // Printed at once: each accepted email of the flood, its webhook delivered and recorded.
    await printBudget(measured, floodMark, "inbound email, end to end (flood)", svc.accepted)
    const lastHit = Math.max(...floodHits.map((h) => h.receivedAt))
    const e2eSeconds = (lastHit - svc.started) / 1000
    const inWindow = floodHits.filter((h) => h.receivedAt <= svc.started + svc.elapsed * 1000).length
    pooled.close()

    // 4. The same flood against a bare smtp-server that counts messages.
    const barePort = await freePort()
    const bare = spawn(process.execPath, ["-e", `
      const { SMTPServer } = require("smtp-server");
      let n = 0;
      new SMTPServer({ authOptional: true, disabledCommands: ["AUTH", "STARTTLS"], logger: false,
        onData(stream, session, cb) { stream.on("data", () => {}); stream.on("end", () => { n++; cb() }) } })
        .listen(${barePort}, "127.0.0.1");
      process.on("SIGTERM", () => { process.stdout.write(String(n)); process.exit(0) });`], { stdio: ["ignore", "pipe", "inherit"] })
    children.push(bare)
    let bareCount = ""
    bare.stdout!.on("data", (c: Buffer) => { bareCount += c.toString() })
    await waitUntil(() => false, 500)
    const bareRun = await flood(barePort, "someone@bench.example", "bare", SECONDS, CONCURRENCY)
    bare.kill("SIGTERM")
    await new Promise((r) => bare.once("exit", r))

    const kb = (v: number) => `${(v / 1024).toFixed(0)} MB`
    const svcRate = svc.accepted / svc.elapsed
    const e2eRate = floodHits.length / e2eSeconds
    const bareRate = bareRun.accepted / bareRun.elapsed
    console.log(`\nbench-inbound on PostgreSQL (${new URL(DATABASE_URL).host}), loopback receiver, WORKERS=${process.env.WORKERS ?? "1"}, node ${process.version}, ` +
      `${cpus().length} cores, load average at start ${loadStart.toFixed(1)}, at end ${loadavg()[0]!.toFixed(1)}\n`)
    console.log(`1. steady ${RATE} msgs/s for ${SECONDS} s: ${total} sent in ${sendSeconds.toFixed(1)} s, ${steadyErrors} refused, ${latencies.length} webhooks`)
    console.log(`   ingest→webhook  p50 ${quantile(latencies, 0.5)} ms   p99 ${quantile(latencies, 0.99)} ms   max ${latencies.at(-1)} ms`)
    console.log(`   SMTP DATA→250   p50 ${quantile(ingest, 0.5)} ms   p99 ${quantile(ingest, 0.99)} ms`)
    console.log(`   CPU: service ${(steadyUse.service * 100).toFixed(0)}%, this load generator + receiver ${(steadyUse.bench * 100).toFixed(0)}% (of one core)`)
    console.log(`2. ${(raw.length / 1048576).toFixed(1)} MB message: ${bigAnswer.slice(0, 40)} after ${bigAccepted} ms, webhook ${bigDelivered ? "received" : "NOT received"}`)
    console.log(`   service RSS before ${kb(rssBefore)}, sampled peak ${kb(rssPeak)} (+${kb(rssPeak - rssBefore)}), ` +
      `VmHWM ${kb(hwm)}${hwmReset ? " (reset before the message)" : " (since start: could not reset)"}`)
    console.log(`3. flood, ${CONCURRENCY} SMTP connections for ${SECONDS} s: ${svc.accepted} accepted (${svcRate.toFixed(0)} msgs/s), ${svc.failed} refused`)
    console.log(`   ${floodHits.length} webhooks, last ${e2eSeconds.toFixed(1)} s after the start: end to end ${e2eRate.toFixed(0)} msgs/s ` +
      `(${inWindow} within the sending window)`)
    console.log(`   CPU: service ${(floodUse.service * 100).toFixed(0)}% (${(floodUse.service * floodWall * 1000 / Math.max(1, svc.accepted)).toFixed(2)} ms per email, stored and delivered), ` +
      `this load generator + receiver ${(floodUse.bench * 100).toFixed(0)}% (of one core; ${cpus().length} cores)`)
    console.log(`4. bare smtp-server, same flood: ${bareRun.accepted} accepted (${bareRate.toFixed(0)} msgs/s; it counted ${bareCount || "?"})`)
    console.log(`\nratios: service SMTP accept / bare ${(svcRate / bareRate).toFixed(3)}, end to end / bare ${(e2eRate / bareRate).toFixed(3)}`)
  } finally {
    clearTimeout(hardStop)
    for (const c of children) if (c.exitCode === null) c.kill("SIGTERM")
    for (const close of closers) close()
    await sleep(1500)
    const drop = new pg.Client({ connectionString: DATABASE_URL })
    await drop.connect()
    await drop.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`)
    await drop.end()
    rmSync(dataDir, { recursive: true, force: true })
  }
}

main().then(() => process.exit(0), (e) => {
  console.error(e)
  process.exit(1)
})
