/**
 * Memory and event-loop benchmark: the service as a child process over a scratch PostgreSQL
 * database, with MAILROOM_STATS_FILE set (it writes its RSS, heap and event-loop delay every second)
 * and a loopback node:http receiver as the organization's fallback endpoint. In one run:
 *   1. ingest only (no endpoint yet): a steady SMTP load; commits per accepted email;
 *   2. the same load with the endpoint, plus the adversarial messages (a 50,000-address header,
 *      10,000 MIME parts, 998-byte lines) sent in between; commits per delivery attempt (what is
 *      left after the ingest share measured in 1);
 *   3. one 30 MB message (a base64 attachment) on a quiet service: its RSS growth and the ratio to
 *      its size (sampled VmRSS every 10 ms, from the 1 s median before to the peak until its webhook
 *      arrived).
 * Prints the service's peak RSS (sampled VmRSS and VmHWM, reset after warm-up), the event-loop delay
 * over phases 1-3 (p50: median of the 1 s windows, p99: the worst window's p99, max: the worst
 * delay), and each figure next to its target. Commits are pg_stat_database.xact_commit deltas of
 * the scratch database. Stops by itself (hard limit 180 s) and drops its database.
 *
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test npx tsx scripts/bench-memory.ts [--rate 50] [--seconds 10] [--big-mb 30]
 */
import { randomBytes } from "node:crypto"
import { readFileSync, writeFileSync } from "node:fs"
import { createServer } from "node:http"
import { loadavg } from "node:os"
import { join } from "node:path"
import pg from "pg"
import { adversarial } from "../test/support/mime.js"
import { arg, message, percentile, provision, RawSmtp, scratch, startService } from "./bench-support.js"

const RATE = arg("rate", 50)
const SECONDS = arg("seconds", 10)
const BIG_MB = arg("big-mb", 30)
const CONNECTIONS = 8
const HARD_LIMIT_MS = 180_000
process.env.DATABASE_URL ??= "postgres://postgres@127.0.0.1:5432/test"

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms))

interface LagWindow {
  readonly seq: number
  readonly rss: number
  readonly lag_ms: { readonly p50: number; readonly p99: number; readonly max: number; readonly samples: number }
}

/** A 30 MB-ish message: a short text part and one base64 attachment in 76-character lines. */
const bigMessage = (to: string, targetBytes: number) => {
  const head = [
    "From: Bench <big@bench.local>", `To: <${to}>`, "Subject: bench big", `Message-ID: <big-${process.pid}@bench.local>`,
    "MIME-Version: 1.0", "Content-Type: multipart/mixed; boundary=\"bench-big\"", "", "--bench-big",
    "Content-Type: text/plain; charset=utf-8", "", "A large attachment follows.", "--bench-big",
    "Content-Type: application/octet-stream; name=\"big.bin\"", "Content-Disposition: attachment; filename=\"big.bin\"",
    "Content-Transfer-Encoding: base64", "", ""
  ].join("\r\n")
  const tail = "\r\n--bench-big--\r\n"
  const contentBytes = Math.floor(((targetBytes - head.length - tail.length) / 78) * 57)
  return head + randomBytes(contentBytes).toString("base64").replace(/.{76}/g, "$&\r\n") + tail
}

const main = async () => {
  const loadStart = loadavg()[0]!
  const db = await scratch("memory")
  const statsFile = join(db.env.DATA_DIR!, "stats.json")
  const [org] = await provision(db.env, 1)
  const to = org!.address
  let received = 0
  const receiver = createServer((req, res) => {
    req.on("data", () => {})
    req.on("end", () => {
      received++
      res.writeHead(200).end("ok")
    })
  })
  await new Promise<void>((r) => receiver.listen(0, "127.0.0.1", r))
  const receiverPort = (receiver.address() as { port: number }).port
  const service = await startService({ ...db.env, MAILROOM_STATS_FILE: statsFile })
  const pid = service.child.pid!
  const hardStop = setTimeout(() => {
    console.error(`bench-memory: stopped after ${HARD_LIMIT_MS / 1000} s`)
    service.child.kill("SIGKILL")
    process.exit(2)
  }, HARD_LIMIT_MS)
  const client = new pg.Client({ connectionString: db.adminUrl })
  await client.connect()
  const scalar = async (q: string) => Number((await client.query(q)).rows[0].n)
  const commits = () => scalar("SELECT xact_commit::bigint AS n FROM pg_stat_database WHERE datname = current_database()")
  const attempts = () => scalar("SELECT count(*)::bigint AS n FROM delivery_attempts")

  // Event-loop windows written by the service, each kept once (by seq).
  const windows = new Map<number, LagWindow>()
  const readStats = () => {
    try {
      const w = JSON.parse(readFileSync(statsFile, "utf8")) as LagWindow
      windows.set(w.seq, w)
    } catch { /* not written yet, or being replaced */ }
  }
  const statsPoll = setInterval(readStats, 250)
  let rssMax = 0
  let rssSampled = 0
  const rssPoll = setInterval(() => {
    rssSampled = service.rssKb()
    rssMax = Math.max(rssMax, rssSampled)
  }, 10)

  try {
    const conns = await Promise.all(Array.from({ length: CONNECTIONS }, () => RawSmtp.open(service.smtpPort)))
    let seq = 0
    const send = async (c: RawSmtp, data: string) => {
      const [code] = await c.send("sender@bench.local", to, data)
      return code
    }
    // Warm-up: JIT, pools, prepared plans.
    await Promise.all(conns.map(async (c) => {
      for (let i = 0; i < 10; i++) await send(c, message(seq++, "sender@bench.local", to))
    }))
    await sleep(1500)
    try {
      writeFileSync(`/proc/${pid}/clear_refs`, "5")
    } catch { /* VmHWM then counts from start */ }
    rssMax = 0
    const firstWindow = Math.max(0, ...windows.keys()) + 1

    /** A steady load of 10 KB messages, one connection after another; extra sends go in between. */
    const steady = async (extra: (i: number) => Promise<unknown> | undefined) => {
      const chains: Array<Promise<unknown>> = conns.map(() => Promise.resolve())
      const pending: Array<Promise<unknown>> = []
      let accepted = 0
      let refused = 0
      const total = RATE * SECONDS
      const t0 = performance.now()
      for (let i = 0; i < total; i++) {
        const wait = t0 + (i * 1000) / RATE - performance.now()
        if (wait > 0) await sleep(wait)
        const k = i % CONNECTIONS
        chains[k] = chains[k]!.then(() => send(conns[k]!, message(seq++, "sender@bench.local", to))).then((code) => {
          if (code === 250) accepted++
          else refused++
        })
        const e = extra(i)
        if (e !== undefined) pending.push(e)
      }
      await Promise.all([...chains, ...pending])
      return { accepted, refused }
    }

    // 1. Ingest only: no endpoint yet, so no delivery is queued.
    const c0 = await commits()
    const ingest = await steady(() => undefined)
    const c1 = await commits()
    const perEmail = (c1 - c0) / Math.max(1, ingest.accepted)

    // 2. With the fallback endpoint, plus the adversarial shapes, each three times.
    const ep = await fetch(`${service.baseUrl}/v1/endpoints`, {
      method: "POST",
      headers: { authorization: `Bearer ${org!.apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({ url: `http://127.0.0.1:${receiverPort}/hook` })
    })
    if (ep.status !== 201) throw new Error(`creating the endpoint answered ${ep.status}: ${await ep.text()}`)
    const shapes = adversarial()
    const hostile = ["50,000-address To header", "10,000 MIME parts", "998-byte lines × 2,000"].map((name) => ({
      name,
      data: shapes[name]!.toString("latin1")
    }))
    const hostileCodes: Array<string> = []
    const every = Math.max(1, Math.floor((RATE * SECONDS) / (hostile.length * 3 + 1)))
    const receivedBefore = received
    const a0 = await attempts()
    const c2 = await commits()
    const withDelivery = await steady((i) => {
      if (i === 0 || i % every !== 0 || i / every > hostile.length * 3) return undefined
      const h = hostile[(i / every - 1) % hostile.length]!
      return RawSmtp.open(service.smtpPort).then(async (c) => {
        hostileCodes.push(`${h.name}: ${await send(c, h.data)}`)
        c.close()
      })
    })
    const expected = withDelivery.accepted + hostileCodes.filter((c) => c.endsWith(": 250")).length
    const until = Date.now() + 60_000
    while (received - receivedBefore < expected && Date.now() < until) await sleep(50)
    await sleep(500)
    const c3 = await commits()
    const a1 = await attempts()
    const deliveryAttempts = a1 - a0
    const perAttempt = (c3 - c2 - perEmail * expected) / Math.max(1, deliveryAttempts)

    // 3. One 30 MB message on a quiet service.
    await sleep(2000)
    const quiet: Array<number> = []
    for (let i = 0; i < 20; i++) {
      quiet.push(service.rssKb())
      await sleep(50)
    }
    quiet.sort((a, b) => a - b)
    const rssBefore = percentile(quiet, 0.5)
    // Decimal megabytes: 30 MB stays under the 30 MiB limit.
    const raw = bigMessage(to, BIG_MB * 1_000_000)
    const bigReceivedBefore = received
    let bigPeak = rssBefore
    const bigPoll = setInterval(() => {
      bigPeak = Math.max(bigPeak, service.rssKb())
    }, 10)
    const bigStarted = performance.now()
    const bigConn = await RawSmtp.open(service.smtpPort)
    const [bigCode] = await bigConn.send("big@bench.local", to, raw)
    const bigAccepted = performance.now() - bigStarted
    bigConn.close()
    const bigUntil = Date.now() + 60_000
    while (bigCode === 250 && received === bigReceivedBefore && Date.now() < bigUntil) await sleep(20)
    const bigDelivered = received > bigReceivedBefore
    await sleep(500)
    clearInterval(bigPoll)
    await sleep(1200)
    readStats()

    const hwm = service.peakRssKb()
    const run = [...windows.values()].filter((w) => w.seq >= firstWindow).sort((a, b) => a.seq - b.seq)
    const p50s = run.map((w) => w.lag_ms.p50).sort((a, b) => a - b)
    const lagP50 = percentile(p50s, 0.5)
    const lagP99 = Math.max(0, ...run.map((w) => w.lag_ms.p99))
    const lagMax = Math.max(0, ...run.map((w) => w.lag_ms.max))
    const mb = (kb: number) => `${(kb / 1024).toFixed(0)} MB`
    const bigMb = raw.length / 1048576
    const growthMb = (bigPeak - rssBefore) / 1024
    const mark = (ok: boolean) => (ok ? "ok" : "MISSED")

    console.log(`\nbench-memory on PostgreSQL (${new URL(process.env.DATABASE_URL!).host}), node ${process.version}, ` +
      `load average at start ${loadStart.toFixed(1)}, at end ${loadavg()[0]!.toFixed(1)} (figures are noisy on a busy machine)`)
    console.log(`1. ingest only, ${RATE} msgs/s for ${SECONDS} s: ${ingest.accepted} accepted, ${ingest.refused} refused`)
    console.log(`   commits per accepted email: ${perEmail.toFixed(2)} (target ≤ 4: ${mark(perEmail <= 4)})`)
    console.log(`2. with webhooks, ${RATE} msgs/s for ${SECONDS} s + adversarial messages: ${withDelivery.accepted} accepted, ` +
      `${withDelivery.refused} refused; ${received - receivedBefore}/${expected} webhooks; ${deliveryAttempts} attempts`)
    console.log(`   adversarial answers: ${hostileCodes.join(", ")}`)
    console.log(`   commits per delivery attempt: ${perAttempt.toFixed(2)} (after ${perEmail.toFixed(2)} per email; target ≤ 2: ${mark(perAttempt <= 2)})`)
    console.log(`3. ${bigMb.toFixed(1)} MB message: answered ${bigCode} after ${bigAccepted.toFixed(0)} ms, webhook ${bigDelivered ? "received" : "NOT received"}`)
    console.log(`   RSS before ${mb(rssBefore)}, peak ${mb(bigPeak)}: +${growthMb.toFixed(0)} MB = ${(growthMb / bigMb).toFixed(2)}× its size ` +
      `(target ≤ 2×: ${mark(growthMb / bigMb <= 2)})`)
    console.log(`service RSS over the run: sampled max ${mb(rssMax)}, VmHWM ${mb(hwm)} (target ≤ 512 MB: ${mark(Math.max(rssMax, hwm) <= 512 * 1024)})`)
    console.log(`event-loop delay over ${run.length} 1 s windows: p50 ${lagP50} ms, p99 ${lagP99} ms (worst window; target ≤ 50: ${mark(lagP99 <= 50)}), ` +
      `max ${lagMax} ms (target ≤ 200: ${mark(lagMax <= 200)})`)
    const worst = [...run].sort((a, b) => b.lag_ms.max - a.lag_ms.max).slice(0, 3)
    console.log(`   worst windows (seq: p99/max ms): ${worst.map((w) => `${w.seq}: ${w.lag_ms.p99}/${w.lag_ms.max}`).join(", ")} of ${run[0]?.seq}-${run.at(-1)?.seq}`)
    for (const c of conns) c.close()
  } finally {
    clearTimeout(hardStop)
    clearInterval(statsPoll)
    clearInterval(rssPoll)
    await client.end()
    await service.stop()
    receiver.close()
    await db.cleanup()
  }
}

main().then(() => process.exit(0), (e) => {
  console.error(e)
  process.exit(1)
})
