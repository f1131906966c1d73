/**
 * Wake timers under load: --wakes (default 10,000) one-shot wakes due within the same minute,
 * spread over --orgs organizations (one function each), fired by two service processes sharing one
 * PostgreSQL. Prints the firing lateness (the wake email's storage time minus its due time) p50/p99/
 * max, duplicates (a due time stored more than once) and misses (a wake not completed, or
 * completed without its email), the commits per firing (pg_stat_database.xact_commit) and the
 * service CPU per firing, net of what the processes use idle (measured before the first is due).
 *
 * The functions' endpoints are disabled, so a firing stores its email and goes no further: what is
 * measured is the timers and the firing (compose, sign, the inbound pipeline), not the invocations
 * (scripts/bench-functions.ts measures those).
 *
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test npx tsx scripts/bench-wake.ts [--wakes 10000] [--orgs 20]
 */
import pg from "pg"
import { cpus, loadavg } from "node:os"
import { arg, budgetMark, percentile, printBudget, provision, scratch, startService } from "./bench-support.js"

const WAKES = arg("wakes", 10_000)
const ORGS = arg("orgs", 20)
/** The due times start this long after the wakes are written and spread over one minute. */
const LEAD_MS = 20_000
const SPREAD_MS = 60_000
const TRIVIAL = `export default { async fetch() { return new Response("ok") } }`

const main = async () => {
  if (!process.env.DATABASE_URL) throw new Error("set DATABASE_URL: two processes share one PostgreSQL")
  const db = await scratch("wake")
  const orgs = await provision(db.env, ORGS)
  const services = [await startService(db.env), await startService(db.env)]
  const client = new pg.Client({ connectionString: db.adminUrl })
  await client.connect()
  try {
    // One function per organization, each with its (disabled) endpoint.
    const functionIds: Array<string> = []
    for (const org of orgs) {
      const r = await fetch(`${services[0]!.baseUrl}/v1/functions`, {
        method: "POST",
        headers: { authorization: `Bearer ${org.apiKey}`, "content-type": "application/json" },
        body: JSON.stringify({ name: "bench-wake", code: TRIVIAL })
      })
      const fn = (await r.json()) as { data: { id: string } }
      if (!r.ok) throw new Error(`function: ${r.status} ${JSON.stringify(fn)}`)
      functionIds.push(fn.data.id)
      await client.query(
        `INSERT INTO endpoints (org_id, kind, function_id, enabled, is_route_target) VALUES ($1, 'function', $2, false, true)`,
        [org.id, fn.data.id]
      )
    }
    const start = Date.now() + LEAD_MS
    const due = Array.from({ length: WAKES }, (_, i) => new Date(start + Math.floor((i / WAKES) * SPREAD_MS)))
    const t0 = performance.now()
    await client.query(
      `INSERT INTO wakes (org_id, function_id, command_type, schedule_kind, schedule_value, next_run_at)
       SELECT o, f, 'bench', 'at', to_char(d AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'), d
         FROM unnest($1::uuid[], $2::uuid[], $3::timestamptz[]) AS t(o, f, d)`,
      [due.map((_, i) => orgs[i % ORGS]!.id), due.map((_, i) => functionIds[i % ORGS]!), due]
    )
    console.log(`${WAKES} wakes over ${ORGS} organizations written in ${(performance.now() - t0).toFixed(0)} ms; ` +
      `due from ${new Date(start).toISOString()} over ${SPREAD_MS / 1000} s; 2 service processes`)
    const commits = async () =>
      Number((await client.query("SELECT xact_commit::bigint AS n FROM pg_stat_database WHERE datname = current_database()")).rows[0].n)
    // Idle CPU (timers, pollers) over most of the lead, to take out of the firings' figure.
    const idleFrom = Date.now()
    const idleCpu0 = services.reduce((n, s) => n + s.cpuMs(), 0)
    await new Promise((r) => setTimeout(r, Math.max(0, start - 2000 - Date.now())))
    const idleCpuPerS = (services.reduce((n, s) => n + s.cpuMs(), 0) - idleCpu0) / ((Date.now() - idleFrom) / 1000)
    const cpuBefore = services.map((s) => s.cpuMs())
    const commits0 = await commits()
    const firingFrom = Date.now()
    const marks = await Promise.all(services.map(budgetMark))

    const deadline = start + SPREAD_MS + 120_000
    for (;;) {
      const open = Number((await client.query(`SELECT count(*)::int AS n FROM wakes WHERE status = 'scheduled'`)).rows[0].n)
      if (open === 0 || Date.now() > deadline) break
      await new Promise((r) => setTimeout(r, 500))
    }
    const firingS = (Date.now() - firingFrom) / 1000
    const cpuUsed = services.reduce((n, s, i) => n + s.cpuMs() - cpuBefore[i]!, 0)
    // The polls of this loop commit too (one per half second): negligible beside the firings.
    const commitsUsed = (await commits()) - commits0
    const rows = (await client.query<{ message_id: string; created_at: Date }>(
      `SELECT message_id, received_at AS created_at FROM emails WHERE message_id LIKE '<wake.%'`
    )).rows
    const perDue = new Map<string, number>()
    const lateness: Array<number> = []
    // Lateness by when the firing was due (10 s windows): whether the tail is the first seconds'
    // cold code or spread over the minute.
    const byWindow = new Map<number, Array<number>>()
    for (const r of rows) {
      perDue.set(r.message_id, (perDue.get(r.message_id) ?? 0) + 1)
      const dueMs = Number(/^<wake\.[0-9a-f-]{36}\.(\d+)@/.exec(r.message_id)?.[1])
      const late = r.created_at.getTime() - dueMs
      lateness.push(late)
      const window = Math.floor((dueMs - start) / 10_000)
      const inWindow = byWindow.get(window)
      if (inWindow === undefined) byWindow.set(window, [late])
      else inWindow.push(late)
    }
    lateness.sort((a, b) => a - b)
    const duplicates = [...perDue.values()].filter((n) => n > 1).length
    const completed = Number((await client.query(`SELECT count(*)::int AS n FROM wakes WHERE status = 'completed' AND run_count = 1`)).rows[0].n)
    const misses = WAKES - Math.min(completed, perDue.size)
    console.log(`fired ${perDue.size} of ${WAKES}; duplicates ${duplicates}; misses ${misses}`)
    console.log(`lateness (email stored − due): p50 ${percentile(lateness, 0.5)} ms  p99 ${percentile(lateness, 0.99)} ms  ` +
      `max ${lateness[lateness.length - 1] ?? 0} ms  (target p99 ≤ 1000 ms)`)
    console.log(`lateness by due time: ${[...byWindow].sort(([a], [b]) => a - b).map(([w, ls]) => {
      ls.sort((a, b) => a - b)
      return `${w * 10}–${w * 10 + 10} s p50 ${percentile(ls, 0.5)} / p99 ${percentile(ls, 0.99)} ms`
    }).join("; ")}`)
    const fired = Math.max(1, perDue.size)
    console.log(`commits per firing: ${(commitsUsed / fired).toFixed(2)}`)
    console.log(`service CPU during the firings: ${services.map((s, i) => `${((s.cpuMs() - cpuBefore[i]!) / 1000).toFixed(1)} s`).join(", ")}; ` +
      `${(cpuUsed / fired).toFixed(2)} ms per firing, ${((cpuUsed - idleCpuPerS * firingS) / fired).toFixed(2)} ms net of idle ` +
      `(idle ${idleCpuPerS.toFixed(0)} ms/s for both)`)
    console.log(`load average ${loadavg().map((l) => l.toFixed(1)).join(" ")} on ${cpus().length} cores`)
    // Each process prints its own: the wakes it fired are the operations of its `wake` path.
    for (const [i, s] of services.entries()) {
      const fired = (await s.sqlStats()).paths["wake"]?.operations ?? 0
      await printBudget(s, marks[i]!, `wake firing (process ${i + 1})`, fired - (marks[i]!.sql.paths["wake"]?.operations ?? 0))
    }
  } finally {
    await client.end()
    for (const s of services) await s.stop()
    await db.cleanup()
  }
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
