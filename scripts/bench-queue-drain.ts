/**
 * Queue drain benchmark: a large backlog of queued deliveries (500k by default, inserted
 * with generate_series) drained by the real service (a child process) to a node:http receiver that
 * answers at once. Every 10 s it prints the requests the receiver got and the attempts the ledger
 * recorded in that window, with the table's dead and live tuples and the size of the pending-rows
 * index; at the end, the first minute against the last full minute and their ratio. A queue whose
 * claims slow down as dead rows pile up shows here as a falling rate. PostgreSQL only.
 *
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test npx tsx scripts/bench-queue-drain.ts \
 *     [--rows 500000] [--max-seconds 2400] [--window 10]
 */
import { createServer } from "node:http"
import { cpus, loadavg } from "node:os"
import pg from "pg"
import { arg, provision, scratch, startService } from "./bench-support.js"

const ROWS = arg("rows", 500_000)
const MAX_SECONDS = arg("max-seconds", 2400)
const WINDOW_S = arg("window", 10)

interface Sample {
  readonly at: number
  readonly requests: number
  readonly recorded: number
  readonly cpuMs: number
}

/** The service's CPU time per recorded attempt between two samples: how much work a delivery costs. */
const cpuPer = (a: Sample, b: Sample) => (b.cpuMs - a.cpuMs) / Math.max(1, b.recorded - a.recorded)

const main = async () => {
  if (!process.env.DATABASE_URL) throw new Error("set DATABASE_URL: the drain benchmark runs on PostgreSQL")
  const hardStop = Date.now() + MAX_SECONDS * 1000
  const db = await scratch("drain")
  const [org] = await provision(db.env, 1)
  let requests = 0
  const receiver = createServer((req, res) => {
    req.resume()
    req.on("end", () => {
      requests++
      res.writeHead(200).end("ok")
    })
  })
  receiver.keepAliveTimeout = 30_000
  await new Promise<void>((r) => receiver.listen(0, "127.0.0.1", () => r()))
  const address = receiver.address()
  const port = typeof address === "object" && address !== null ? address.port : 0
  const service = await startService(db.env)
  const client = new pg.Client({ connectionString: db.adminUrl })
  await client.connect()
  const one = async <R>(text: string, params: Array<unknown> = []) => (await client.query(text, params)).rows[0] as R
  try {
    const created = await fetch(`${service.baseUrl}/v1/endpoints`, {
      method: "POST",
      headers: { authorization: `Bearer ${org!.apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({ url: `http://127.0.0.1:${port}/hook` })
    }).then((r) => r.json() as Promise<{ data: { id: string } }>)
    const t0insert = Date.now()
    // One statement: the service sees the whole backlog at once, as after an outage.
    await client.query(
      `INSERT INTO deliveries (org_id, endpoint_id, event_id, event_type, payload, email_subject)
       SELECT $1, $2, 'evt_drain_' || i, 'email.received',
              json_build_object('id', 'evt_drain_' || i, 'event', 'email.received', 'seq', i)::text, 'drain ' || i
       FROM generate_series(1, $3::int) AS i`,
      [org!.id, created.data.id, ROWS]
    )
    await client.query(`SELECT pg_notify('mailroom_deliveries', 'due')`)
    const started = Date.now()
    console.log(`bench-queue-drain: ${ROWS} deliveries queued in ${((started - t0insert) / 1000).toFixed(1)} s; draining ` +
      `(hard limit ${MAX_SECONDS} s, window ${WINDOW_S} s)`)
    const commits0 = Number((await one<{ n: string }>(
      "SELECT xact_commit AS n FROM pg_stat_database WHERE datname = current_database()"
    )).n)
    const cpu0 = service.cpuMs()
    const samples: Array<Sample> = [{ at: started, requests: 0, recorded: 0, cpuMs: cpu0 }]
    let recorded = 0
    while (recorded < ROWS && Date.now() < hardStop) {
      await new Promise((r) => setTimeout(r, Math.max(0, samples[samples.length - 1]!.at + WINDOW_S * 1000 - Date.now())))
      recorded = Number((await one<{ n: string }>("SELECT count(*) AS n FROM delivery_attempts")).n)
      const at = Date.now()
      const prev = samples[samples.length - 1]!
      samples.push({ at, requests, recorded, cpuMs: service.cpuMs() })
      const s = (at - prev.at) / 1000
      const t = await one<{ dead: string; live: string; vacuums: string; hot: string; upd: string }>(
        `SELECT n_dead_tup AS dead, n_live_tup AS live, autovacuum_count + vacuum_count AS vacuums,
                n_tup_hot_upd AS hot, n_tup_upd AS upd
         FROM pg_stat_user_tables WHERE relname = 'deliveries'`
      )
      const idx = await one<{ size: string }>(`SELECT pg_relation_size('deliveries_due') AS size`)
      console.log(`${((at - started) / 1000).toFixed(0).padStart(5)} s  requests/s ${((requests - prev.requests) / s).toFixed(0).padStart(5)}` +
        `  recorded/s ${((recorded - prev.recorded) / s).toFixed(0).padStart(5)}  left ${String(ROWS - recorded).padStart(7)}` +
        `  dead tuples ${t.dead.padStart(7)}  live ${t.live.padStart(7)}  vacuums ${t.vacuums}` +
        `  HOT ${((Number(t.hot) / Math.max(1, Number(t.upd))) * 100).toFixed(0)}%  pending index ${(Number(idx.size) / 1048576).toFixed(1)} MB` +
        `  CPU/delivery ${cpuPer(prev, samples[samples.length - 1]!).toFixed(2)} ms  load ${loadavg()[0]!.toFixed(1)}`)
    }
    const commits1 = Number((await one<{ n: string }>(
      "SELECT xact_commit AS n FROM pg_stat_database WHERE datname = current_database()"
    )).n)
    const drained = recorded >= ROWS
    const elapsed = (samples[samples.length - 1]!.at - started) / 1000
    // Full windows while the backlog lasted (the window in which it ran dry is partial).
    const full = drained ? samples.slice(0, -1) : samples
    const per = Math.round(60 / WINDOW_S)
    const rate = (a: Sample, b: Sample) => (b.recorded - a.recorded) / ((b.at - a.at) / 1000)
    console.log(`\n${drained ? "drained" : `NOT drained (hard limit): ${ROWS - recorded} left`}: ${recorded} attempts recorded, ` +
      `${requests} requests received in ${elapsed.toFixed(0)} s → ${(recorded / elapsed).toFixed(0)}/s overall`)
    console.log(`service CPU per delivery: ${((service.cpuMs() - cpu0) / Math.max(1, recorded)).toFixed(2)} ms; ` +
      `load average ${loadavg().map((l) => l.toFixed(1)).join(" ")} on ${cpus().length} cores`)
    console.log(`commits per delivery attempt: ${((commits1 - commits0) / Math.max(1, recorded)).toFixed(2)} (the benchmark's own samples included)`)
    if (full.length < per + 1) {
      console.log(`too short for a first/last minute comparison (${full.length - 1} full windows); use more --rows`)
    } else {
      const first = rate(full[0]!, full[per]!)
      const last = rate(full[full.length - 1 - per]!, full[full.length - 1]!)
      const overlap = full.length - 1 < 2 * per ? " (the minutes overlap: a short run)" : ""
      console.log(`first minute ${first.toFixed(0)}/s, last full minute ${last.toFixed(0)}/s: ratio ${(last / first).toFixed(2)} (target ≥ 0.70)${overlap}`)
      // On a shared machine the rate follows the load; the cost of a delivery does not.
      const c1 = cpuPer(full[0]!, full[per]!)
      const c2 = cpuPer(full[full.length - 1 - per]!, full[full.length - 1]!)
      console.log(`service CPU per delivery: first minute ${c1.toFixed(2)} ms, last full minute ${c2.toFixed(2)} ms (last/first ${(c2 / c1).toFixed(2)}: above 1 means a delivery got dearer)`)
    }
    console.log(`service RSS ${(service.rssKb() / 1024).toFixed(0)} MB, peak ${(service.peakRssKb() / 1024).toFixed(0)} MB`)
  } finally {
    await client.end()
    await service.stop()
    receiver.close()
    await db.cleanup()
  }
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
