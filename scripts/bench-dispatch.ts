/**
 * Delivery dispatch benchmark: deliveries enqueued straight into the queue table, a
 * loopback receiver that answers after 20 ms. Prints enqueue → first-attempt p50/p99 at a steady
 * 100 deliveries/s, then the sustained deliveries/s draining a backlog, and the commits per
 * delivery attempt (pg_stat_database.xact_commit). PostgreSQL only (DATABASE_URL).
 *
 * The service CPU is that of its whole process tree; `--workers 1,2` runs the measurement at each
 * count in turn and compares CPU per delivery.
 *
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test npx tsx scripts/bench-dispatch.ts [--seconds 10] [--backlog 5000] [--workers 1,2]
 */
import { createServer } from "node:http"
import { cpus, loadavg } from "node:os"
import pg from "pg"
import { arg, budgetMark, percentile, printBudget, printCpuByWorkers, provision, scratch, startService, workersArg } from "./bench-support.js"

const SECONDS = arg("seconds", 10)
const BACKLOG = arg("backlog", 5000)

const run = async (workers: number) => {
  const db = await scratch("dispatch")
  const [org] = await provision(db.env, 1)
  const lat: Array<number> = []
  let received = 0
  const receiver = createServer((req, res) => {
    const chunks: Array<Buffer> = []
    req.on("data", (c: Buffer) => chunks.push(c))
    req.on("end", () => {
      const at = Date.now()
      const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as { enqueued_at?: number }
      if (typeof body.enqueued_at === "number") lat.push(at - body.enqueued_at)
      received++
      setTimeout(() => res.writeHead(200).end("ok"), 20)
    })
  })
  receiver.keepAliveTimeout = 30_000
  await new Promise<void>((r) => receiver.listen(0, "127.0.0.1", () => r()))
  const address = receiver.address()
  const port = typeof address === "object" && address !== null ? address.port : 0
  const service = await startService(db.env, { workers })
  const client = new pg.Client({ connectionString: db.adminUrl })
  await client.connect()
  try {
    const created = await fetch(`${service.baseUrl}/v1/endpoints`, {
      method: "POST",
      headers: { authorization: `Bearer ${org!.apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({ url: `http://127.0.0.1:${port}/hook` })
    }).then((r) => r.json() as Promise<{ data: { id: string } }>)
    const endpointId = created.data.id
    const enqueue = async (n: number) => {
      const now = Date.now()
      const payloads = Array.from({ length: n }, (_, i) => JSON.stringify({ id: `evt_b${now}_${i}`, event: "email.received", enqueued_at: now }))
      await client.query(
        `INSERT INTO deliveries (org_id, endpoint_id, event_id, event_type, payload)
         SELECT $1, $2, 'evt_' || md5(p), 'email.received', p FROM unnest($3::text[]) AS p`,
        [org!.id, endpointId, payloads]
      )
      await client.query(`SELECT pg_notify('mailroom_deliveries', 'due')`)
    }
    const commits = async () =>
      Number((await client.query("SELECT xact_commit::bigint AS n FROM pg_stat_database WHERE datname = current_database()")).rows[0].n)

    // 0. Warm-up (not measured): a freshly started service compiles its hot paths during the first
    // few hundred deliveries, which would otherwise be the steady phase's slowest percent.
    for (let i = 0; i < 20; i++) {
      await enqueue(10)
      await new Promise((r) => setTimeout(r, 100))
    }
    const warmEnd = Date.now() + 30_000
    while (received < 200 && Date.now() < warmEnd) await new Promise((r) => setTimeout(r, 50))
    lat.length = 0
    received = 0
    // 1. Steady 100/s: 10 every 100 ms.
    const c0 = await commits()
    const steadyEnd = Date.now() + SECONDS * 1000
    let sent = 0
    while (Date.now() < steadyEnd) {
      await enqueue(10)
      sent += 10
      await new Promise((r) => setTimeout(r, 100))
    }
    while (received < sent && Date.now() < steadyEnd + 30_000) await new Promise((r) => setTimeout(r, 50))
    const c1 = await commits()
    const steady = [...lat].sort((a, b) => a - b)
    // 2. Backlog drain.
    lat.length = 0
    received = 0
    const t0 = Date.now()
    const mark = await budgetMark(service)
    const cpu0 = service.cpuMs()
    await enqueue(BACKLOG)
    while (received < BACKLOG && Date.now() - t0 < 300_000) await new Promise((r) => setTimeout(r, 20))
    const drainS = (Date.now() - t0) / 1000
    const cpuPer = (service.cpuMs() - cpu0) / Math.max(1, received)
    console.log(`\nbench-dispatch: receiver answers in 20 ms, PostgreSQL, WORKERS=${workers}`)
    console.log(`steady 100/s for ${SECONDS} s: enqueue→first attempt p50 ${percentile(steady, 0.5)} ms, p99 ${percentile(steady, 0.99)} ms (targets ≤ 20, ≤ 100)`)
    console.log(`commits per delivery attempt: ${((c1 - c0 - sent / 10 * 2) / Math.max(1, sent)).toFixed(2)} (target ≤ 2; the benchmark's own inserts excluded)`)
    console.log(`backlog of ${BACKLOG}: ${received} delivered in ${drainS.toFixed(1)} s → ${(received / drainS).toFixed(0)} deliveries/s (target ≥ 1000)`)
    console.log(`service CPU per delivery while draining: ${cpuPer.toFixed(2)} ms, every process of the service (1000/s needs under 1 ms of one core)`)
    console.log(`load average ${loadavg().map((l) => l.toFixed(1)).join(" ")} on ${cpus().length} cores (figures mean little on a busy machine)`)
    console.log(`service RSS ${(service.rssKb() / 1024).toFixed(0)} MB, peak ${(service.peakRssKb() / 1024).toFixed(0)} MB${workers > 1 ? " (the primary's)" : ""}`)
    await printBudget(service, mark, "delivery attempt (backlog drain)", received)
    return { workers, cpuMsPerOp: cpuPer, rate: received / drainS }
  } finally {
    await client.end()
    await service.stop()
    receiver.close()
    await db.cleanup()
  }
}

const main = async () => {
  if (!process.env.DATABASE_URL) throw new Error("set DATABASE_URL: the dispatch benchmark runs on PostgreSQL")
  const rows = []
  for (const workers of workersArg()) rows.push(await run(workers))
  printCpuByWorkers("delivery", rows)
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
