/**
 * Mixed API load on PostgreSQL, against the API latency targets, in one run:
 *   1. an OPEN-loop schedule of `--rate` requests/s for `--seconds` across `--orgs` organizations:
 *      70% reads (account, endpoints, filters, deliveries, emails, domains, routes) and 30% POSTs
 *      with an Idempotency-Key (new filters and disabled endpoints with fresh keys, plus replays of
 *      earlier keys). Request i starts at t0 + i/rate whether or not earlier ones have answered, and
 *      its latency is measured from that scheduled instant, so queueing in the service shows up
 *      instead of being hidden by a client that waits (coordinated omission).
 *   2. GET /v1/webhooks/deliveries against `--deliveries` rows seeded in ONE organization: first
 *      page, filtered pages (status, email_id, a one-day date window) and a deep cursor page.
 *   3. with `--overload <rate>` (e.g. 1000, beyond capacity): the same mix at that rate for
 *      `--overload-seconds`, then back to `--rate` for `--recovery-seconds`. The service sheds what it
 *      cannot take (503 `service_unavailable` + Retry-After, MAX_INFLIGHT_REQUESTS); printed: requests
 *      slower than 2 s (target 0), shed and failed counts, and the recovery time: from the moment the
 *      rate returns to the end of the first 1-s window after which every 1-s window (by scheduled
 *      start) has p99 ≤ 50 ms (target ≤ 5 s).
 * Target figures: p50 ≤ 10 ms and p99 ≤ 50 ms for the mix, p99 ≤ 50 ms for the list, RSS ≤ 512 MB.
 *
 * Organizations and per-org data (endpoints, filters, deliveries, emails) are seeded in SQL before
 * the service starts. The organization-wide limit is 120 requests per sliding 60 s: the schedule is
 * round-robin over organizations, so 500/s over 100 orgs is 5/s each, 100 per org in 20 s; the
 * warm-up's hits are cleared from `rate_limit_windows` before measuring, and the list part clears
 * its one organization's window every 100 requests. Any non-2xx is counted as an error.
 *
 *   DATABASE_URL=postgres://… npx tsx scripts/bench-api-mixed.ts
 *     [--rate 500] [--seconds 20] [--orgs 100] [--warmup 3] [--deliveries 1000000] [--list-requests 300]
 *     [--overload 0] [--overload-seconds 10] [--recovery-seconds 15]
 * (With --overload, use enough organizations that no window fills: e.g. --orgs 250.)
 */
import http from "node:http"
import pg from "pg"
import { encodeCursor } from "../src/contract/Paging.js"
import { arg, percentile, type Service, startApiBench } from "./bench-support.js"

const RATE = arg("rate", 500)
const SECONDS = arg("seconds", 20)
const ORGS = arg("orgs", 100)
const WARMUP = arg("warmup", 3)
const DELIVERIES = arg("deliveries", 1_000_000)
const LIST_REQUESTS = arg("list-requests", 300)
const OVERLOAD = arg("overload", 0)
const OVERLOAD_SECONDS = arg("overload-seconds", 10)
const RECOVERY_SECONDS = arg("recovery-seconds", 15)
const HARD_LIMIT_MS = 600_000

const TARGET = { p50: 10, p99: 50, listP99: 50, rssMb: 512 }

// LIFO reuse keeps the busy sockets busy and lets the rest idle out on the server's side.
const agent = new http.Agent({ keepAlive: true, maxSockets: 512, scheduling: "lifo" })
let transportRetries = 0

interface Answer {
  readonly status: number
  readonly code: string | undefined
  readonly replayed: boolean
  readonly body: string
}

/**
 * A keep-alive socket the server closed (idle timeout) just as a request went out on it fails with
 * ECONNRESET before any answer: the request never reached the service, so it is sent again (what
 * undici and browsers do; Node documents `reusedSocket` for exactly this). Counted and printed.
 */
const request = (base: string, method: string, path: string, headers: Record<string, string>, body?: string): Promise<Answer> =>
  once(base, method, path, headers, body).catch((e: unknown) => {
    if (e instanceof StaleSocket) {
      transportRetries++
      return once(base, method, path, headers, body)
    }
    throw e
  })

class StaleSocket extends Error {}

const once = (base: string, method: string, path: string, headers: Record<string, string>, body?: string) =>
  new Promise<Answer>((resolve, reject) => {
    const req = http.request(new URL(path, base), {
      agent,
      method,
      headers: body === undefined ? headers : { ...headers, "content-type": "application/json" }
    }, (res) => {
      const chunks: Array<Buffer> = []
      res.on("data", (c: Buffer) => chunks.push(c))
      res.on("end", () => {
        const text = Buffer.concat(chunks).toString("utf8")
        const status = res.statusCode ?? 0
        let code: string | undefined
        if (status >= 300) {
          try {
            code = (JSON.parse(text) as { error?: { code?: string } }).error?.code
          } catch { /* not an envelope */ }
        }
        resolve({ status, code, replayed: res.headers["idempotent-replayed"] === "true", body: text })
      })
    })
    req.on("error", (e: NodeJS.ErrnoException) =>
      reject(req.reusedSocket && (e.code === "ECONNRESET" || e.message === "socket hang up") ? new StaleSocket(e.message) : e)
    )
    req.end(body)
  })

interface Op {
  readonly cls: string
  readonly method: string
  readonly path: string
  readonly body?: string
  readonly key?: string
  /** A replay must come back with `Idempotent-Replayed: true`. */
  readonly expectReplay?: boolean
}

const READS = [
  "/v1/account",
  "/v1/endpoints",
  "/v1/filters",
  "/v1/webhooks/deliveries",
  "/v1/webhooks/deliveries?status=failed&limit=20",
  "/v1/emails",
  "/v1/domains",
  "/v1/routes"
]

/** Per-organization state for building POSTs: earlier keys to replay. */
interface OrgState {
  readonly key: string
  seq: number
  readonly done: Array<{ key: string; path: string; body: string }>
}

const nextOp = (i: number, org: OrgState, run: string): Op => {
  // 10 slots: 7 reads, 3 POSTs. Request i goes to organization i % ORGS as its k-th request; the
  // slot turns with both, so every organization sees the 7/3 mix over its own requests and any 10
  // consecutive requests hold 3 POSTs. (Turning with k alone sent the POSTs as bursts of 3 × ORGS
  // back to back, 0.6 s of POSTs only at 500/s, every 2 s: a different load from a mix.)
  const slot = (Math.floor(i / ORGS) + (i % ORGS)) % 10
  if (slot < 7) {
    const path = READS[(Math.floor(i / ORGS / 10) * 7 + slot + i) % READS.length]!
    return { cls: `GET ${path.split("?")[0]}`, method: "GET", path }
  }
  const n = org.seq++
  // Every 6th POST repeats an earlier key of this organization with the same body: a replay.
  if (n % 6 === 5 && org.done.length > 0) {
    const prior = org.done[(n * 7) % org.done.length]!
    return { cls: "POST replay", method: "POST", path: prior.path, body: prior.body, key: prior.key, expectReplay: true }
  }
  const key = `bench-${run}-${i}`
  if (n % 4 === 3) {
    const body = JSON.stringify({ url: `http://127.0.0.1:9/hook/${run}/${i}`, enabled: false })
    return { cls: "POST /v1/endpoints", method: "POST", path: "/v1/endpoints", body, key }
  }
  const body = JSON.stringify({ type: "blocklist", pattern: `s${i}-${run}@bench.example` })
  return { cls: "POST /v1/filters", method: "POST", path: "/v1/filters", body, key }
}

interface Sample {
  /** Scheduled start, ms after the schedule's t0. */
  readonly at: number
  readonly status: number
  readonly cls: string
  readonly latency: number
  readonly ok: boolean
  readonly label: string
  readonly body: string
}

/** Runs the open-loop schedule; returns one sample per request. */
const openLoop = (base: string, orgs: ReadonlyArray<OrgState>, rate: number, seconds: number, run: string) =>
  phasedLoop(base, orgs, [{ rate, seconds }], run)

/** Phases run back to back: request i of a phase starts at the phase's start + i/rate. */
const phasedLoop = async (base: string, orgs: ReadonlyArray<OrgState>, phases: ReadonlyArray<{ rate: number; seconds: number }>, run: string) => {
  const starts: Array<number> = []
  const offsets: Array<number> = []
  let acc = 0
  for (const p of phases) {
    for (let k = 0; k < Math.round(p.rate * p.seconds); k++) offsets.push(acc + (k * 1000) / p.rate)
    starts.push(acc)
    acc += p.seconds * 1000
  }
  const total = offsets.length
  const samples: Array<Sample> = []
  const inflight: Array<Promise<void>> = []
  const t0 = performance.now() + 50
  let next = 0
  let maxLag = 0
  while (next < total) {
    const now = performance.now()
    while (next < total && t0 + offsets[next]! <= now) {
      const i = next++
      const scheduled = t0 + offsets[i]!
      const at = offsets[i]!
      maxLag = Math.max(maxLag, now - scheduled)
      const org = orgs[i % orgs.length]!
      const op = nextOp(i, org, run)
      const headers: Record<string, string> = { authorization: `Bearer ${org.key}` }
      if (op.key !== undefined) headers["idempotency-key"] = op.key
      inflight.push(
        request(base, op.method, op.path, headers, op.body).then(
          (a) => {
            const ok = a.status >= 200 && a.status < 300 && (op.expectReplay !== true || a.replayed)
            if (ok && op.key !== undefined && op.body !== undefined && op.expectReplay !== true) {
              org.done.push({ key: op.key, path: op.path, body: op.body })
            }
            const label = ok ? "" : `${op.cls} → ${a.status} ${a.code ?? (op.expectReplay ? "not replayed" : "")}`
            samples.push({ at, status: a.status, cls: op.cls, latency: performance.now() - scheduled, ok, label, body: ok ? "" : a.body.slice(0, 300) })
          },
          (e: unknown) => {
            samples.push({ at, status: 0, cls: op.cls, latency: performance.now() - scheduled, ok: false, label: `${op.cls} → ${String(e)}`, body: "" })
          }
        )
      )
    }
    await new Promise((r) => setTimeout(r, 1))
  }
  await Promise.all(inflight)
  return { samples, elapsed: (performance.now() - t0) / 1000, maxLag, starts }
}

/** Part 3: overload, then the ordinary rate again; how the service holds and how fast it recovers. */
const overload = async (base: string, db: pg.Client, states: ReadonlyArray<OrgState>) => {
  await db.query(`DELETE FROM rate_limit_windows`)
  const { samples, starts } = await phasedLoop(
    base,
    states,
    [{ rate: OVERLOAD, seconds: OVERLOAD_SECONDS }, { rate: RATE, seconds: RECOVERY_SECONDS }],
    "o"
  )
  const back = starts[1]!
  const during = samples.filter((x) => x.at < back)
  const after = samples.filter((x) => x.at >= back)
  const shed = (xs: ReadonlyArray<Sample>) => xs.filter((x) => x.status === 503).length
  const failed = (xs: ReadonlyArray<Sample>) => xs.filter((x) => !x.ok && x.status !== 503).length
  const slow = samples.filter((x) => x.latency > 2000).length
  console.log(`\noverload: ${OVERLOAD} req/s for ${OVERLOAD_SECONDS} s, then ${RATE} req/s for ${RECOVERY_SECONDS} s`)
  console.log("phase                                 count   p50 ms    p99 ms    max ms   shed 503   other errors")
  for (const [name, xs] of [[`at ${OVERLOAD} req/s`, during], [`back at ${RATE} req/s`, after]] as const) {
    const served = xs.filter((x) => x.status !== 503).map((x) => x.latency)
    console.log(`${row(summarize(`${name} (answered, not shed)`, served))} ${String(shed(xs)).padStart(10)} ${String(failed(xs)).padStart(14)}`)
  }
  // 1-s windows by scheduled start after the rate returns; recovered at the end of the first
  // window from which every later window has p99 ≤ the target.
  const windows: Array<number> = []
  for (let w = 0; w < RECOVERY_SECONDS; w++) {
    const lat = after.filter((x) => x.at >= back + w * 1000 && x.at < back + (w + 1) * 1000).map((x) => x.latency)
    windows.push(summarize("", lat).p99)
  }
  let from = windows.length
  while (from > 0 && windows[from - 1]! <= TARGET.p99) from--
  console.log(`p99 per second after the rate returns (ms): ${windows.map((p) => p.toFixed(0)).join(" ")}`)
  console.log(`requests slower than 2 s: ${slow} (target 0); ` +
    (from < windows.length ? `recovered to p99 ≤ ${TARGET.p99} ms ${from === 0 ? "within the first second" : `after ${from} s`} (target ≤ 5 s)` : "not recovered within the run"))
  const errs = new Map<string, number>()
  for (const x of samples) if (!x.ok && x.status !== 503) errs.set(x.label, (errs.get(x.label) ?? 0) + 1)
  for (const [label, n] of errs) console.log(`  ${String(n).padStart(6)}  ${label}`)
}

const summarize = (label: string, latencies: Array<number>) => {
  latencies.sort((a, b) => a - b)
  return { label, n: latencies.length, p50: percentile(latencies, 0.5), p99: percentile(latencies, 0.99), max: latencies.at(-1) ?? 0 }
}

const row = (s: ReturnType<typeof summarize>) =>
  `${s.label.padEnd(36)} ${String(s.n).padStart(7)} ${s.p50.toFixed(2).padStart(9)} ${s.p99.toFixed(2).padStart(9)} ${
    s.max.toFixed(1).padStart(9)
  }`

/** Samples the service's VmRSS every 100 ms, and its event-loop delay of each second, while `during` runs. */
const watchRss = async <A>(svc: Service, during: () => Promise<A>) => {
  let max = 0
  let lagMax = 0
  const timer = setInterval(() => {
    max = Math.max(max, svc.rssKb())
    lagMax = Math.max(lagMax, svc.lagMaxMs())
  }, 100)
  try {
    const out = await during()
    return { out, maxRssKb: Math.max(max, svc.rssKb()), lagMaxMs: lagMax }
  } finally {
    clearInterval(timer)
  }
}

/** ONE organization with `count` deliveries over 30 days; pending ones are due far ahead (no worker takes them). */
const seedDeliveries = async (db: pg.Client, orgId: string, count: number) => {
  const endpoint = (await db.query<{ id: string }>(`SELECT id FROM endpoints WHERE org_id = $1 LIMIT 1`, [orgId])).rows[0]!.id
  const emails = (await db.query<{ id: string }>(`SELECT id FROM emails WHERE org_id = $1 ORDER BY id`, [orgId])).rows.map((r) => r.id)
  const step = (30 * 86400 * 1000) / count
  for (let from = 0; from < count; from += 250_000) {
    const to = Math.min(count, from + 250_000)
    await db.query(`
      INSERT INTO deliveries (org_id, endpoint_id, email_id, event_id, event_type, payload, status, attempt_count,
                              next_attempt_at, email_sender, email_recipient, email_subject, created_at, updated_at)
      SELECT $1, $2, CASE WHEN g % 1000 = 0 THEN ($6::uuid[])[1 + g / 1000 % cardinality($6::uuid[])] END,
             'evt_big_' || g, 'email.received', '{}',
             (ARRAY['delivered','delivered','delivered','delivered','delivered','delivered','delivered','delivered',
                    'failed','pending','delivered','delivered','delivered','delivered','delivered','delivered',
                    'delivered','delivered','delivered','header_confirmed'])[1 + g % 20],
             1, now() + interval '30 days', 'sender@bench.example', 'inbox@agents.localhost', 'bench ' || g,
             date_trunc('milliseconds', now() - (g * $3::float8) * interval '1 millisecond'),
             now()
      FROM generate_series($4::int, $5::int) g`, [orgId, endpoint, step, from + 1, to, emails])
  }
  await db.query(`VACUUM ANALYZE deliveries`)
  return emails
}

const main = async () => {
  if (!process.env.DATABASE_URL) {
    console.error("bench-api-mixed measures PostgreSQL: set DATABASE_URL=postgres://…")
    process.exit(2)
  }
  const hard = setTimeout(() => {
    console.error(`bench-api-mixed: hard limit ${HARD_LIMIT_MS / 1000} s reached`)
    process.exit(1)
  }, HARD_LIMIT_MS)
  hard.unref()

  const { orgs, db, service, close } = await startApiBench("apimix", ORGS)
  try {
    const base = service.baseUrl
    const states: Array<OrgState> = orgs.map((o) => ({ key: o.apiKey, seq: 0, done: [] }))

    // Warm-up at the full rate (JIT, pools, sockets), then forget its rate-limit hits.
    await openLoop(base, states, RATE, WARMUP, "w")
    await db.query(`DELETE FROM rate_limit_windows`)
    const cpu0 = service.cpuMs() / 1000
    const { out: mix, maxRssKb, lagMaxMs } = await watchRss(service, () => openLoop(base, states, RATE, SECONDS, "m"))
    const cpu = service.cpuMs() / 1000 - cpu0

    const byClass = new Map<string, Array<number>>()
    const errors = new Map<string, number>()
    const firstBody = new Map<string, string>()
    for (const x of mix.samples) {
      const list = byClass.get(x.cls) ?? []
      list.push(x.latency)
      byClass.set(x.cls, list)
      if (!x.ok) errors.set(x.label, (errors.get(x.label) ?? 0) + 1)
      if (!x.ok && !firstBody.has(x.label)) firstBody.set(x.label, x.body)
    }
    const overall = summarize("overall", mix.samples.map((x) => x.latency))
    const reads = summarize("reads (70%)", mix.samples.filter((x) => x.cls.startsWith("GET")).map((x) => x.latency))
    const posts = summarize("POSTs (30%)", mix.samples.filter((x) => x.cls.startsWith("POST")).map((x) => x.latency))
    const errorCount = [...errors.values()].reduce((a, b) => a + b, 0)

    console.log(`\nbench-api-mixed: open loop ${RATE} req/s for ${SECONDS} s over ${ORGS} organizations, PostgreSQL`)
    console.log(`achieved ${(mix.samples.length / mix.elapsed).toFixed(0)} req/s (${mix.samples.length} requests in ${mix.elapsed.toFixed(1)} s), ` +
      `generator max lag ${mix.maxLag.toFixed(1)} ms, service CPU ${(cpu / mix.elapsed * 100).toFixed(0)}% of one core ` +
      `(${(cpu * 1000 / mix.samples.length).toFixed(2)} ms CPU per request)\n`)
    console.log("class                                 count   p50 ms    p99 ms    max ms")
    for (const [cls, lat] of [...byClass].sort(([a], [b]) => a.localeCompare(b))) console.log(row(summarize(cls, lat)))
    console.log(row(reads))
    console.log(row(posts))
    console.log(row(overall))
    // Where the slow requests were: the second of the schedule whose requests waited longest, and
    // whether the service's own event loop stalled then (a stall outside it is the database or the machine).
    const bySecond = new Map<number, Array<number>>()
    for (const x of mix.samples) bySecond.set(Math.floor(x.at / 1000), [...(bySecond.get(Math.floor(x.at / 1000)) ?? []), x.latency])
    const worst = [...bySecond].map(([second, lat]) => ({ second, s: summarize(`second ${second}`, lat) })).sort((a, b) => b.s.max - a.s.max)[0]
    if (worst !== undefined) {
      console.log(`\nslowest second of the schedule: +${worst.second} s (${worst.s.n} requests, p50 ${worst.s.p50.toFixed(1)} ms, max ${worst.s.max.toFixed(0)} ms); ` +
        `seconds with a request over 1 s: ${[...bySecond.values()].filter((l) => Math.max(...l) > 1000).length} of ${bySecond.size}; ` +
        `the service's longest event-loop delay in the run: ${lagMaxMs.toFixed(0)} ms`)
    }
    console.log(`\nerrors: ${errorCount} (stale keep-alive sockets re-sent: ${transportRetries})`)
    for (const [label, n] of errors) console.log(`  ${String(n).padStart(6)}  ${label}  ${firstBody.get(label) ?? ""}`)
    const rssMb = maxRssKb / 1024
    const hwmMb = service.peakRssKb() / 1024
    console.log(`service RSS: max sampled ${rssMb.toFixed(0)} MB, VmHWM ${hwmMb.toFixed(0)} MB`)
    console.log(`ratios to targets: p50 ${(overall.p50 / TARGET.p50).toFixed(2)}, p99 ${(overall.p99 / TARGET.p99).toFixed(2)}, ` +
      `RSS ${(hwmMb / TARGET.rssMb).toFixed(2)} (≤ 1 meets the target)`)

    if (OVERLOAD > 0) await overload(base, db, states)

    // Part 2: one organization with DELIVERIES rows.
    if (DELIVERIES > 0) {
      const big = orgs[0]!
      const t = performance.now()
      const emailIds = await seedDeliveries(db, big.id, DELIVERIES)
      console.log(`\nseeded ${DELIVERIES} deliveries in one organization in ${((performance.now() - t) / 1000).toFixed(1)} s`)
      const deep = (await db.query<{ created_at: Date; id: string }>(
        `SELECT created_at, id FROM deliveries WHERE org_id = $1 ORDER BY created_at DESC, id DESC OFFSET $2 LIMIT 1`,
        [big.id, Math.floor(DELIVERIES * 0.9)]
      )).rows[0]!
      const day = new Date(Date.now() - 10 * 86400_000)
      const lists = [
        "/v1/webhooks/deliveries",
        "/v1/webhooks/deliveries?limit=100",
        "/v1/webhooks/deliveries?status=failed",
        "/v1/webhooks/deliveries?status=header_confirmed",
        "/v1/webhooks/deliveries?status=pending&limit=100",
        `/v1/webhooks/deliveries?email_id=${emailIds[7]}`,
        `/v1/webhooks/deliveries?date_from=${new Date(day.getTime() - 86400_000).toISOString()}&date_to=${day.toISOString()}`,
        `/v1/webhooks/deliveries?status=delivered&date_from=${new Date(day.getTime() - 3 * 86400_000).toISOString()}`,
        `/v1/webhooks/deliveries?cursor=${encodeCursor({ createdAt: deep.created_at, id: deep.id })}`
      ]
      const headers = { authorization: `Bearer ${big.apiKey}` }
      const perList = new Map<string, Array<number>>()
      const listErrors = new Map<string, number>()
      const { maxRssKb: listRss } = await watchRss(service, async () => {
        for (let i = 0; i < lists.length * 3; i++) await request(base, "GET", lists[i % lists.length]!, headers) // warm-up
        for (let i = 0; i < LIST_REQUESTS; i++) {
          if (i % 100 === 0) await db.query(`DELETE FROM rate_limit_windows WHERE key = $1`, [`api:org:${big.id}`])
          const path = lists[i % lists.length]!
          const t0 = performance.now()
          const a = await request(base, "GET", path, headers)
          const ms = performance.now() - t0
          if (a.status !== 200) listErrors.set(`${a.status} ${a.code ?? ""}`, (listErrors.get(`${a.status} ${a.code ?? ""}`) ?? 0) + 1)
          const l = perList.get(path) ?? []
          l.push(ms)
          perList.set(path, l)
        }
      })
      console.log(`GET /v1/webhooks/deliveries over ${DELIVERIES} rows in one organization, ${LIST_REQUESTS} requests one at a time\n`)
      console.log("query                                 count   p50 ms    p99 ms    max ms")
      const all: Array<number> = []
      for (const [path, l] of perList) {
        all.push(...l)
        const q = path.includes("?") ? path.slice(path.indexOf("?") + 1) : "first page"
        console.log(row(summarize(q.startsWith("cursor=") ? "deep cursor (90% in)" : q.slice(0, 36), l)))
      }
      const listAll = summarize("all list requests", all)
      console.log(row(listAll))
      console.log(`errors: ${[...listErrors.values()].reduce((a, b) => a + b, 0)} ${[...listErrors].map(([k, v]) => `${k}×${v}`).join(", ")}`)
      console.log(`service RSS: max sampled ${(listRss / 1024).toFixed(0)} MB, VmHWM ${(service.peakRssKb() / 1024).toFixed(0)} MB`)
      console.log(`ratio to target: list p99 ${(listAll.p99 / TARGET.listP99).toFixed(2)} (≤ 1 meets the target)`)
    }
  } finally {
    agent.destroy()
    await close()
  }
}

main().then(() => process.exit(0), (e: unknown) => {
  console.error(e)
  process.exit(1)
})
