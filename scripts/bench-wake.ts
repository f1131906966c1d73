/**
 * Wake timers under load: --wakes (default 10,000) one-shot wakes due within the same minute,
 * spread over --orgs organizations (one function each), fired by two service processes sharing one
 * PostgreSQL. Prints the firing lateness (the wake email's storage time minus its due time) p50/p99/
 * max, duplicates (a due time stored more than once) and misses (a wake not completed, or
 * completed without its email), and each process's CPU.
 *
 * The functions' endpoints are disabled, so a firing stores its email and goes no further: what is
 * measured is the timers and the firing (compose, sign, the inbound pipeline), not the invocations
 * (scripts/bench-functions.ts measures those).
 *
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test npx tsx scripts/bench-wake.ts [--wakes 10000] [--orgs 20]
 */
import pg from "pg"
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
    const cpuBefore = services.map((s) => s.cpuMs())
    const marks = await Promise.all(services.map(budgetMark))

    const deadline = start + SPREAD_MS + 120_000
    for (;;) {
      const open = Number((await client.query(`SELECT count(*)::int AS n FROM wakes WHERE status = 'scheduled'`)).rows[0].n)
      if (open === 0 || Date.now() > deadline) break
      await new Promise((r) => setTimeout(r, 500))
    }
    const rows = (await client.query<{ message_id: string; created_at: Date }>(
      `SELECT message_id, received_at AS created_at FROM emails WHERE message_id LIKE '<wake.%'`
    )).rows
    const perDue = new Map<string, number>()
    const lateness: Array<number> = []
    for (const r of rows) {
      perDue.set(r.message_id, (perDue.get(r.message_id) ?? 0) + 1)
      const dueMs = Number(/^<wake\.[0-9a-f-]{36}\.(\d+)@/.exec(r.message_id)?.[1])
      lateness.push(r.created_at.getTime() - dueMs)
    }
    lateness.sort((a, b) => a - b)
    const duplicates = [...perDue.values()].filter((n) => n > 1).length
    const completed = Number((await client.query(`SELECT count(*)::int AS n FROM wakes WHERE status = 'completed' AND run_count = 1`)).rows[0].n)
    const misses = WAKES - Math.min(completed, perDue.size)
    console.log(`fired ${perDue.size} of ${WAKES}; duplicates ${duplicates}; misses ${misses}`)
    console.log(`lateness (email stored − due): p50 ${percentile(lateness, 0.5)} ms  p99 ${percentile(lateness, 0.99)} ms  ` +
      `max ${lateness[lateness.length - 1] ?? 0} ms  (target p99 ≤ 2000 ms)`)
    console.log(`service CPU during the firings: ${services.map((s, i) => `${((s.cpuMs() - cpuBefore[i]!) / 1000).toFixed(1)} s`).join(", ")}`)
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
