/**
 * Hosted functions benchmark, in one run:
 *  1. the floor: spawn workerd over the same generated config, post the event, kill it (no service);
 *  2. a trivial function through the whole delivery path (queue row → claim → workerd → recorded),
 *     one delivery at a time: p50/p99 of enqueue → completion, next to the floor;
 *  3. invocations/s draining a backlog at the concurrency cap (two organizations: 4 each is the
 *     per-organization cap, 8 the process's), with the recorded durations' p50/p99, the CPU per
 *     invocation and the peak RSS of the service and its workerd processes together;
 *  4. the service's RSS over --total invocations (default 10,000): no growth expected;
 *  5. a memory get+put round trip from inside a function.
 * Deliveries are enqueued straight into the queue table and NOTIFY wakes the workers, so it runs on
 * PostgreSQL (DATABASE_URL).
 *
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test npx tsx scripts/bench-functions.ts [--sequential 200] [--total 10000]
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { cpus, loadavg, tmpdir } from "node:os"
import { join } from "node:path"
import pg from "pg"
import { runOnce } from "../src/functions/Process.js"
import { arg, budgetMark, percentile, printBudget, provision, scratch, startService } from "./bench-support.js"

const SEQUENTIAL = arg("sequential", 200)
const TOTAL = arg("total", 10_000)
const BARE = arg("bare", 200)

const TRIVIAL = `export default { async fetch(request) { await request.text(); return new Response("ok") } }`

const statusKb = (pid: number, field: string) => {
  try {
    const line = readFileSync(`/proc/${pid}/status`, "utf8").split("\n").find((l) => l.startsWith(field))
    return Number(line?.split(/\s+/)[1] ?? 0)
  } catch {
    return 0
  }
}

/** Fields of /proc/<pid>/stat after the command name (state is [0], ppid [1], utime [11] …). */
const statFields = (pid: number | string) => {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
  return stat.slice(stat.lastIndexOf(")") + 2).split(" ")
}

/** The processes below `pid` (children, their children …). */
const descendants = (pid: number) => {
  const parent = new Map<number, number>()
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue
    try {
      parent.set(Number(entry), Number(statFields(entry)[1]))
    } catch { /* gone */ }
  }
  const out: Array<number> = []
  let frontier = [pid]
  while (frontier.length > 0) {
    const next: Array<number> = []
    for (const [child, ppid] of parent) if (frontier.includes(ppid)) next.push(child)
    out.push(...next)
    frontier = next
  }
  return out
}

/** Sum of VmRSS (kB) of the processes below `pid`. */
const childrenRssKb = (pid: number) => descendants(pid).reduce((n, p) => n + statusKb(p, "VmRSS:"), 0)

/**
 * CPU (ms) used by the service and every workerd process it started: its own time, the time of
 * children it has reaped, and that of the ones still running.
 */
const treeCpuMs = (pid: number) => {
  try {
    const f = statFields(pid)
    let ticks = Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])
    for (const child of descendants(pid)) {
      try {
        const c = statFields(child)
        ticks += Number(c[11]) + Number(c[12])
      } catch { /* gone */ }
    }
    return ticks * 10
  } catch {
    return 0
  }
}

const ms = (n: number) => `${n.toFixed(1)} ms`

const main = async () => {
  if (!process.env.DATABASE_URL) throw new Error("set DATABASE_URL: the delivery path is measured on PostgreSQL")
  console.log(`functions benchmark on ${cpus().length} cores, load average ${loadavg().map((l) => l.toFixed(2)).join(" ")}`)

  // 1. The floor.
  const stateDir = mkdtempSync(join(tmpdir(), "mailroom-bench-fn-"))
  const payload = JSON.stringify({ id: "evt_bench", event: "email.received", email: { subject: "bench" } })
  const bare: Array<number> = []
  for (let i = 0; i < BARE; i++) {
    const t0 = performance.now()
    const r = await runOnce({
      code: TRIVIAL, secrets: { A_SECRET: "value" }, webhookSecret: "whsec", stateDir, memorySocket: join(stateDir, "none.sock"),
      serviceSocket: join(stateDir, "none.sock"), processToken: "t"
    }, payload, { "content-type": "application/json" })
    if (r.outcome !== "ok") throw new Error(`bare run failed: ${r.outcome} ${r.error}`)
    bare.push(performance.now() - t0)
  }
  rmSync(stateDir, { recursive: true, force: true })
  bare.sort((a, b) => a - b)
  const bareP50 = percentile(bare, 0.5)
  const bareP99 = percentile(bare, 0.99)
  console.log(`bare spawn+invoke+kill (${BARE}): p50 ${ms(bareP50)}  p99 ${ms(bareP99)}`)

  const db = await scratch("functions")
  const statsFile = join(tmpdir(), `mailroom-bench-fn-stats-${process.pid}.json`)
  db.env.MAILROOM_STATS_FILE = statsFile
  const heapMb = () => {
    try {
      const s = JSON.parse(readFileSync(statsFile, "utf8")) as { heap_used: number; external: number }
      return `heap ${(s.heap_used / 1048576).toFixed(0)} MB, external ${(s.external / 1048576).toFixed(0)} MB`
    } catch {
      return "heap n/a"
    }
  }
  const orgs = await provision(db.env, 2)
  const service = await startService(db.env)
  const client = new pg.Client({ connectionString: db.adminUrl })
  await client.connect()
  const api = async (method: string, path: string, body?: unknown, apiKey = orgs[0]!.apiKey) => {
    const r = await fetch(`${service.baseUrl}/v1${path}`, {
      method,
      headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json", "idempotency-key": crypto.randomUUID() },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {})
    })
    const json = await r.json() as { data: Record<string, unknown> }
    if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${JSON.stringify(json)}`)
    return json.data
  }
  try {
    // The same trivial function and its endpoint in each organization.
    const targets: Array<{ orgId: string; endpointId: string }> = []
    for (const org of orgs) {
      const fn = await api("POST", "/functions", { name: "trivial", code: TRIVIAL, secrets: { A_SECRET: "value" } }, org.apiKey)
      const ep = await api("POST", "/endpoints", { kind: "function", function_id: fn.id }, org.apiKey)
      targets.push({ orgId: org.id, endpointId: String(ep.id) })
    }
    /** `n` deliveries, alternating between the organizations (`only`: the first one's alone). */
    const enqueue = async (n: number, only = false) => {
      const now = Date.now()
      const payloads = Array.from({ length: n }, (_, i) => JSON.stringify({ id: `evt_${now}_${i}`, event: "email.received", email: {} }))
      const pick = (i: number) => targets[only ? 0 : i % targets.length]!
      const rows = await client.query<{ id: string }>(
        `INSERT INTO deliveries (org_id, endpoint_id, event_id, event_type, payload)
         SELECT o, e, 'evt_' || md5(p), 'email.received', p FROM unnest($1::uuid[], $2::uuid[], $3::text[]) AS t(o, e, p) RETURNING id`,
        [payloads.map((_, i) => pick(i).orgId), payloads.map((_, i) => pick(i).endpointId), payloads]
      )
      await client.query(`SELECT pg_notify('mailroom_deliveries', 'due')`)
      return rows.rows.map((r) => r.id)
    }
    const pending = async () =>
      Number((await client.query(`SELECT count(*)::int AS n FROM deliveries WHERE status = 'pending'`)).rows[0].n)

    // 2. One at a time through the whole path: enqueue → claim → invocation → recorded.
    const overhead: Array<number> = []
    for (let i = 0; i < SEQUENTIAL; i++) {
      const t0 = performance.now()
      const [id] = await enqueue(1, true)
      for (;;) {
        const r = await client.query<{ status: string }>(`SELECT status FROM deliveries WHERE id = $1`, [id])
        if (r.rows[0]!.status !== "pending") {
          if (r.rows[0]!.status !== "delivered") throw new Error(`delivery ended ${r.rows[0]!.status}`)
          break
        }
        await new Promise((r) => setTimeout(r, 1))
      }
      overhead.push(performance.now() - t0)
    }
    overhead.sort((a, b) => a - b)
    const p50 = percentile(overhead, 0.5)
    const p99 = percentile(overhead, 0.99)
    console.log(`delivery path, one at a time (${SEQUENTIAL}): p50 ${ms(p50)}  p99 ${ms(p99)}  ` +
      `(${(p50 / bareP50).toFixed(2)}× the bare p50, ${(p99 / bareP99).toFixed(2)}× the bare p99; target ≤ 2×)`)

    // 3 and 4. Backlogs at the concurrency cap; RSS of the service alone and with its workerd processes.
    const pid = service.child.pid!
    let peakTotalKb = 0
    const sampler = setInterval(() => {
      peakTotalKb = Math.max(peakTotalKb, statusKb(pid, "VmRSS:") + childrenRssKb(pid))
    }, 100)
    const rssAtStart = service.rssKb()
    const cpuAtStart = treeCpuMs(pid)
    const drainStarted = performance.now()
    const invocationsBefore = Number((await client.query(`SELECT count(*)::int AS n FROM function_invocations`)).rows[0].n)
    const rate: Array<number> = []
    const rssAfter: Array<[number, number, string]> = []
    const batch = 1000
    const drainMark = await budgetMark(service)
    for (let done = 0; done < TOTAL; done += batch) {
      const t0 = performance.now()
      await enqueue(batch)
      while (await pending() > 0) await new Promise((r) => setTimeout(r, 50))
      rate.push(batch / ((performance.now() - t0) / 1000))
      // The stats file is rewritten every second: wait for a fresh one after the batch.
      await new Promise((r) => setTimeout(r, 1100))
      rssAfter.push([done + batch, service.rssKb(), heapMb()])
    }
    clearInterval(sampler)
    // Each invocation here is one function delivery (the `delivery` path).
    await printBudget(service, drainMark, "function invocation (backlog drain)", TOTAL)
    const cpuPerInvocation = (treeCpuMs(pid) - cpuAtStart) / TOTAL
    const drainSeconds = (performance.now() - drainStarted) / 1000
    const cap = (await client.query<{ p50: number; p99: number }>(
      `SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_ms) AS p50, percentile_cont(0.99) WITHIN GROUP (ORDER BY duration_ms) AS p99
       FROM (SELECT duration_ms FROM function_invocations ORDER BY started_at OFFSET $1) t`, [invocationsBefore])).rows[0]!
    const failed = Number((await client.query(`SELECT count(*)::int AS n FROM deliveries WHERE status <> 'delivered'`)).rows[0].n)
    console.log(`backlog drain at the cap: ${rate.map((r) => r.toFixed(0)).join(", ")} invocations/s per ${batch} ` +
      `(mean ${(rate.reduce((a, b) => a + b, 0) / rate.length).toFixed(1)}; target ≥ 70); not delivered: ${failed}`)
    console.log(`invocation duration at the cap (as recorded, ${TOTAL}): p50 ${ms(Number(cap.p50))}  p99 ${ms(Number(cap.p99))}`)
    console.log(`CPU per invocation at the cap, service + workerd processes: ${cpuPerInvocation.toFixed(2)} ms ` +
      `(${(cpuPerInvocation * TOTAL / 1000 / drainSeconds / cpus().length * 100).toFixed(0)}% of the machine's cores over the drain)`)
    console.log(`peak RSS at the cap, service + workerd processes (sum of VmRSS, sampled every 100 ms): ${(peakTotalKb / 1024).toFixed(0)} MB; ` +
      `load average ${loadavg().map((l) => l.toFixed(2)).join(" ")}`)
    console.log(`service RSS: start ${(rssAtStart / 1024).toFixed(0)} MB; after ` +
      rssAfter.map(([n, kb, heap]) => `${n}: ${(kb / 1024).toFixed(0)} MB (${heap})`).join("; "))

    // 5. Memory round trips measured inside the function.
    const memFn = await api("POST", "/functions", {
      name: "memory-bench",
      code: `export default { async fetch(request, env) {
        const n = 200;
        const t0 = Date.now();
        for (let i = 0; i < n; i++) {
          await env.MEMORY.put("k" + (i % 20), JSON.stringify({ i, at: t0 }));
          await env.MEMORY.get("k" + (i % 20), "json");
        }
        return new Response(JSON.stringify({ perPairMs: (Date.now() - t0) / n }));
      } }`
    })
    const result = await api("POST", `/functions/${memFn.id}/invoke`, {})
    const perPair = (JSON.parse(String(result.response_body)) as { perPairMs: number }).perPairMs
    console.log(`memory put+get round trip from inside a function: ${ms(perPair)} per pair (200 pairs)`)
  } finally {
    await client.end()
    await service.stop()
    await db.cleanup()
  }
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
