/**
 * SMTP ingest benchmark: 10 KB messages over 50 concurrent SMTP sessions, each
 * answered 250 only after its durable commit. Prints sustained messages/s and the p50/p99 of
 * end-of-DATA → 250, the commits per accepted email (pg_stat_database.xact_commit, PostgreSQL
 * only) and the service's RSS. No endpoint is configured, so this measures ingestion alone.
 *
 * The service CPU is that of its whole process tree; `--workers 1,2` runs the measurement at each
 * count in turn and compares CPU per accepted email.
 *
 * `--drain` points the service at an embeddings service on loopback that answers at once and, after
 * the flood, waits for the embedding backlog to take every stored message: the database's and the
 * service's CPU per embedded document is then what the backlog itself costs (claim, lease,
 * completion), not the model.
 *
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test npx tsx scripts/bench-smtp-ingest.ts [--seconds 15] [--sessions 50] [--body-bytes 10240] [--workers 1,2] [--drain]
 */
import pg from "pg"
import { arg, budgetMark, cpuMsOf, message, percentile, printBudget, printCpuByWorkers, provision, RawSmtp, scratch, startService, startStubEmbeddings, workersArg } from "./bench-support.js"
import { loadavg } from "node:os"

const SECONDS = arg("seconds", 15)
const SESSIONS = arg("sessions", 50)
/** The body's size in bytes (10 KB by default). */
const BODY_BYTES = arg("body-bytes", 10 * 1024)
const DRAIN = process.argv.includes("--drain")

/**
 * Search documents not embedded yet. Builds before migration 0196 kept the backlog in
 * search_documents itself (`embedded_at` null), so an older build (BENCH_SERVICE) is measured too.
 */
const pendingDocuments = async (url: string) => {
  const c = new pg.Client({ connectionString: url })
  await c.connect()
  try {
    const narrow = (await c.query("SELECT to_regclass('search_backlog') IS NOT NULL AS yes")).rows[0].yes as boolean
    const r = await c.query(narrow
      ? "SELECT count(*)::int AS n FROM search_backlog"
      : "SELECT count(*)::int AS n FROM search_documents WHERE embedded_at IS NULL")
    return r.rows[0].n as number
  } finally {
    await c.end()
  }
}

const commits = async (url: string | undefined) => {
  if (url === undefined) return undefined
  const c = new pg.Client({ connectionString: url })
  await c.connect()
  const r = await c.query("SELECT xact_commit::bigint AS n FROM pg_stat_database WHERE datname = current_database()")
  await c.end()
  return Number(r.rows[0].n)
}

/** The CPU time so far of each PostgreSQL backend serving the service (its pooled connections). */
const backendsCpuMs = async (url: string | undefined) => {
  if (url === undefined) return undefined
  const c = new pg.Client({ connectionString: url })
  await c.connect()
  const r = await c.query("SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'mailroom'")
  await c.end()
  return new Map(r.rows.map((row: { pid: number }) => [row.pid, cpuMsOf(row.pid)]))
}

const run = async (workers: number) => {
  const db = await scratch("ingest")
  const stub = DRAIN ? await startStubEmbeddings() : undefined
  const env = stub === undefined ? db.env : { ...db.env, EMBEDDINGS_URL: stub.url, EMBEDDINGS_MODEL: "bench-stub" }
  const [org] = await provision(env, 1)
  const service = await startService(env, { workers })
  try {
    // Warm-up: JIT, pools, prepared plans.
    const warm = await RawSmtp.open(service.smtpPort)
    for (let i = 0; i < 50; i++) await warm.send("warm@bench.local", org!.address, message(i, "warm@bench.local", org!.address, BODY_BYTES))
    warm.close()

    const mark = await budgetMark(service)
    const before = await commits(db.adminUrl)
    const cpuBefore = service.cpuMs()
    const pgBefore = await backendsCpuMs(db.adminUrl)
    const latencies: Array<number> = []
    let refused = 0
    let seq = 0
    const deadline = performance.now() + SECONDS * 1000
    const started = performance.now()
    await Promise.all(Array.from({ length: SESSIONS }, async () => {
      const c = await RawSmtp.open(service.smtpPort)
      while (performance.now() < deadline) {
        const i = seq++
        const [code, ms] = await c.send("sender@bench.local", org!.address, message(i, "sender@bench.local", org!.address, BODY_BYTES))
        if (code === 250) latencies.push(ms)
        else refused++
      }
      c.close()
    }))
    const elapsed = (performance.now() - started) / 1000
    const cpuUsed = service.cpuMs() - cpuBefore
    const pgAfter = await backendsCpuMs(db.adminUrl)
    const after = await commits(db.adminUrl)
    latencies.sort((a, b) => a - b)
    const rate = latencies.length / elapsed
    console.log(`\nbench-smtp-ingest: ${SESSIONS} sessions, 10 KB messages, ${elapsed.toFixed(1)} s, ${db.adminUrl ? "PostgreSQL" : "embedded PGlite"}, WORKERS=${workers}`)
    console.log(`accepted ${latencies.length} (refused ${refused}) → ${rate.toFixed(0)} msgs/s (target ≥ 500: ${(rate / 500).toFixed(2)}×)`)
    console.log(`end-of-DATA → 250: p50 ${percentile(latencies, 0.5).toFixed(1)} ms, p99 ${percentile(latencies, 0.99).toFixed(1)} ms, max ${percentile(latencies, 1).toFixed(1)} ms`)
    if (before !== undefined && after !== undefined) {
      console.log(`commits per accepted email: ${((after - before) / Math.max(1, latencies.length)).toFixed(2)} (target ≤ 4)`)
    }
    console.log(`service CPU ${(cpuUsed / Math.max(1, latencies.length)).toFixed(2)} ms per accepted email (${(cpuUsed / 10 / elapsed).toFixed(0)}% of one core; every process of the service)`)
    if (pgBefore !== undefined && pgAfter !== undefined) {
      // Connections opened during the run count from zero.
      const used = [...pgAfter].reduce((n, [pid, ms]) => n + ms - (pgBefore.get(pid) ?? 0), 0)
      console.log(`PostgreSQL backends CPU ${(used / Math.max(1, latencies.length)).toFixed(2)} ms per accepted email`)
    }
    console.log(`service RSS ${(service.rssKb() / 1024).toFixed(0)} MB, peak ${(service.peakRssKb() / 1024).toFixed(0)} MB (target ≤ 512 MB${workers > 1 ? "; the primary's" : ""})`)
    await printBudget(service, mark, "accepted email", latencies.length)
    console.log(`load average ${loadavg().map((l) => l.toFixed(1)).join(" ")}`)
    if (DRAIN && db.adminUrl !== undefined) {
      const pending = await pendingDocuments(db.adminUrl)
      const drainCpu = service.cpuMs()
      const drainPg = await backendsCpuMs(db.adminUrl)
      const drainStart = performance.now()
      let left = pending
      while (left > 0 && performance.now() - drainStart < 600_000) {
        await new Promise((r) => setTimeout(r, 250))
        left = await pendingDocuments(db.adminUrl)
      }
      const took = (performance.now() - drainStart) / 1000
      const done = pending - left
      const pgEnd = await backendsCpuMs(db.adminUrl)
      const pgUsed = [...pgEnd!].reduce((n, [pid, ms]) => n + ms - (drainPg!.get(pid) ?? 0), 0)
      const svcUsed = service.cpuMs() - drainCpu
      console.log(
        `embedding backlog drain (embeddings answered by a loopback stub): ${done} of ${pending} documents in ${took.toFixed(1)} s; ` +
          `PostgreSQL backends CPU ${(pgUsed / Math.max(1, done)).toFixed(3)} ms and service CPU ${(svcUsed / Math.max(1, done)).toFixed(3)} ms per document`
      )
    }
    return { workers, cpuMsPerOp: cpuUsed / Math.max(1, latencies.length), rate }
  } finally {
    await service.stop()
    stub?.close()
    await db.cleanup()
  }
}

const main = async () => {
  const rows = []
  for (const workers of workersArg()) rows.push(await run(workers))
  printCpuByWorkers("accepted email", rows)
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
