/**
 * Soak benchmark: the service (one process, search indexing on, the built-in embedding model) under
 * a steady mixed load for `--minutes` (default 15), its memory printed every minute:
 *   - SMTP ingest: `--rate` messages/s (default 20) over 8 connections, to 8 organizations; half of
 *     them deliver each email to a hosted function (one invocation per email, in workerd), the
 *     other half to a loopback webhook receiver;
 *   - sends: `--sends`/s (default 3) `POST /v1/send-mail`, relayed to a loopback SMTP relay;
 *   - searches: `--searches`/s (default 2) hybrid `GET /v1/search` (each embeds its query).
 * Every received and sent email becomes a search document the embedding backlog embeds.
 * Each minute: the service's RSS (sampled every second: now and the minute's max) and VmHWM, the
 * embedding model process's RSS, the workerd processes' RSS, and what was done (accepted, sent,
 * searched, invoked, embeddings pending). At the end: peaks against the target (service ≤ 512 MB).
 *
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test npx tsx scripts/bench-soak.ts [--minutes 15] [--rate 20] [--sends 3] [--searches 2]
 */
import { readdirSync, readFileSync, writeFileSync } from "node:fs"
import { createServer as createHttpServer } from "node:http"
import { createServer } from "node:net"
import { loadavg } from "node:os"
import pg from "pg"
import { arg, message, provision, RawSmtp, scratch, startService } from "./bench-support.js"

const MINUTES = arg("minutes", 15)
const RATE = arg("rate", 20)
const SENDS = arg("sends", 3)
const SEARCHES = arg("searches", 2)
const ORGS = 8
const CONNECTIONS = 8
const TARGET_KB = 512 * 1024
process.env.DATABASE_URL ??= "postgres://postgres@127.0.0.1:5432/test"

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms))
const mb = (kb: number) => `${(kb / 1024).toFixed(0)} MB`

const FUNCTION = `export default { async fetch(request) { const e = await request.json(); return new Response(String(e.event)) } }`
const QUERIES = ["quarterly figures", "bench message", "invoice overdue", "meeting tomorrow", "numbers in words", "hello reader"]
const TEXT = "Hello,\n\nthe quarterly figures are attached below in words rather than numbers. ".repeat(8)

const statusKb = (pid: number, field: string) => {
  try {
    const line = readFileSync(`/proc/${pid}/status`, "utf8").split("\n").find((l) => l.startsWith(field))
    return Number(line?.split(/\s+/)[1] ?? 0)
  } catch {
    return 0
  }
}

/** RSS (kB) of the processes whose parent is `pid`: the embedding model's and the workerd ones, apart. */
const childrenRss = (pid: number) => {
  let model = 0
  let workerd = 0
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8")
      if (Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]) !== pid) continue
      if (stat.includes("(workerd)")) workerd += statusKb(Number(entry), "VmRSS:")
      else if (readFileSync(`/proc/${entry}/cmdline`, "utf8").includes("ModelWorker")) model += statusKb(Number(entry), "VmRSS:")
    } catch { /* gone */ }
  }
  return { model, workerd }
}

/** A loopback SMTP relay that accepts and counts every message. */
const startRelay = () =>
  new Promise<{ port: number; count: () => number; close: () => void }>((resolve) => {
    let count = 0
    const server = createServer((socket) => {
      let data = false
      let buffer = ""
      socket.write("220 relay.bench ESMTP\r\n")
      socket.on("data", (chunk) => {
        buffer += chunk.toString("latin1")
        for (;;) {
          if (data) {
            const end = buffer.indexOf("\r\n.\r\n")
            if (end < 0) return
            buffer = buffer.slice(end + 5)
            data = false
            count++
            socket.write("250 OK\r\n")
            continue
          }
          const nl = buffer.indexOf("\r\n")
          if (nl < 0) return
          const line = buffer.slice(0, nl)
          buffer = buffer.slice(nl + 2)
          const verb = line.slice(0, 4).toUpperCase()
          if (verb === "EHLO" || verb === "HELO") socket.write("250-relay.bench\r\n250-8BITMIME\r\n250 SMTPUTF8\r\n")
          else if (verb === "DATA") {
            data = true
            socket.write("354 go\r\n")
          } else if (verb === "QUIT") socket.end("221 bye\r\n")
          else socket.write("250 OK\r\n")
        }
      })
      socket.on("error", () => {})
    })
    server.listen(0, "127.0.0.1", () => resolve({ port: (server.address() as { port: number }).port, count: () => count, close: () => server.close() }))
  })

const main = async () => {
  const loadStart = loadavg()[0]!
  const relay = await startRelay()
  let hooks = 0
  const receiver = createHttpServer((req, res) => {
    req.on("data", () => {})
    req.on("end", () => {
      hooks++
      res.writeHead(200).end("ok")
    })
  })
  await new Promise<void>((r) => receiver.listen(0, "127.0.0.1", r))
  const receiverPort = (receiver.address() as { port: number }).port
  const db = await scratch("soak")
  const env = { ...db.env, OUTBOUND_SMTP_URL: `smtp://127.0.0.1:${relay.port}`, SEARCH_INDEXING: "true" }
  const orgs = await provision(env, ORGS, "pro")
  const service = await startService(env)
  const pid = service.child.pid!
  const hardStop = setTimeout(() => {
    console.error("bench-soak: over its time; stopping")
    service.child.kill("SIGKILL")
    process.exit(2)
  }, (MINUTES + 5) * 60_000)
  const client = new pg.Client({ connectionString: db.adminUrl })
  await client.connect()
  const count = async (q: string) => Number((await client.query(q)).rows[0].n)
  const api = async (method: string, path: string, apiKey: string, body?: unknown) => {
    const r = await fetch(`${service.baseUrl}/v1${path}`, {
      method,
      headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {})
    })
    return { status: r.status, body: await r.json() as { data: Record<string, unknown> } }
  }
  const timers: Array<ReturnType<typeof setInterval>> = []
  try {
    // Half the organizations deliver to a function, half to the loopback receiver.
    for (const [i, org] of orgs.entries()) {
      let ep
      const fn = i % 2 === 0 ? await api("POST", "/functions", org.apiKey, { name: "soak", code: FUNCTION }) : undefined
      // On a machine too busy for workerd to load the module in time, that organization gets a webhook instead.
      if (fn !== undefined && fn.status !== 201) console.log(`creating a function answered ${fn.status} ${JSON.stringify(fn.body)}; a webhook instead`)
      if (fn !== undefined && fn.status === 201) {
        ep = await api("POST", "/endpoints", org.apiKey, { kind: "function", function_id: fn.body.data.id })
      } else {
        ep = await api("POST", "/endpoints", org.apiKey, { url: `http://127.0.0.1:${receiverPort}/hook` })
      }
      if (ep.status !== 201) throw new Error(`creating the endpoint: ${ep.status} ${JSON.stringify(ep.body)}`)
    }
    const conns = await Promise.all(Array.from({ length: CONNECTIONS }, () => RawSmtp.open(service.smtpPort)))
    const chains: Array<Promise<unknown>> = conns.map(() => Promise.resolve())
    const busy = conns.map(() => false)
    const done = { accepted: 0, refused: 0, sent: 0, sendErrors: 0, searches: 0, searchErrors: 0, skipped: 0, statuses: new Map<number, number>() }
    // Open loop with a bound: a tick whose connection (or whose kind's requests in flight) is still
    // busy is skipped and counted, so a slow machine gets a lighter load rather than a growing queue.
    const MAX_IN_FLIGHT = 8
    let inFlight = 0
    let seq = 0
    const ingestOne = (force = false) => {
      const k = seq % CONNECTIONS
      if (busy[k] && !force) return void done.skipped++
      const org = orgs[seq % ORGS]!
      const i = seq++
      busy[k] = true
      chains[k] = chains[k]!.then(() => conns[k]!.send("sender@bench.local", org.address, message(i, "sender@bench.local", org.address, 4 * 1024)))
        .then(([code]) => { if (code === 250) done.accepted++; else done.refused++ }, () => { done.refused++ })
        .finally(() => { busy[k] = false })
    }
    const request = (method: string, path: string, apiKey: string, body: unknown, ok: () => void, failed: () => void) => {
      if (inFlight >= MAX_IN_FLIGHT) return void done.skipped++
      inFlight++
      void api(method, path, apiKey, body).then((r) => {
        if (r.status === 200 || r.status === 201) ok()
        else {
          failed()
          done.statuses.set(r.status, (done.statuses.get(r.status) ?? 0) + 1)
        }
      }, failed).finally(() => { inFlight-- })
    }
    const sendOne = () => {
      const i = seq++
      const org = orgs[i % ORGS]!
      request("POST", "/send-mail", org.apiKey, {
        from: `Bench <${org.address}>`, to: [`Reader <reader-${i % 97}@example.com>`], subject: `soak send ${i}`, text: TEXT
      }, () => { done.sent++ }, () => { done.sendErrors++ })
    }
    const searchOne = () => {
      const i = seq++
      const org = orgs[i % ORGS]!
      request("GET", `/search?${new URLSearchParams({ q: QUERIES[i % QUERIES.length]!, mode: "hybrid" })}`, org.apiKey, undefined,
        () => { done.searches++ }, () => { done.searchErrors++ })
    }
    /** `perSecond` calls of `f`, evenly spread. */
    const every = (perSecond: number, f: () => void) => { if (perSecond > 0) timers.push(setInterval(f, 1000 / perSecond)) }

    // Warm-up, then VmHWM counts from here.
    for (let i = 0; i < 40; i++) ingestOne(true)
    await Promise.all(chains)
    await sleep(2000)
    try {
      writeFileSync(`/proc/${pid}/clear_refs`, "5")
    } catch { /* VmHWM then counts from the start */ }

    console.log(`bench-soak on PostgreSQL, ${MINUTES} min: ${RATE} msgs/s SMTP to ${ORGS} organizations (half to a function, half to a webhook), ` +
      `${SENDS} sends/s, ${SEARCHES} hybrid searches/s; load average at start ${loadStart.toFixed(1)}`)
    console.log("min | service RSS now / max / VmHWM | model process RSS now / max | workerd RSS now / max | accepted sent searched invoked hooks (failed, skipped) | embeddings pending | load")
    let serviceMax = 0
    let modelMax = 0
    let workerdMax = 0
    let sumMax = 0
    let minute = { service: 0, model: 0, workerd: 0 }
    const sample = () => {
      const s = statusKb(pid, "VmRSS:")
      const c = childrenRss(pid)
      minute = { service: Math.max(minute.service, s), model: Math.max(minute.model, c.model), workerd: Math.max(minute.workerd, c.workerd) }
      serviceMax = Math.max(serviceMax, s)
      modelMax = Math.max(modelMax, c.model)
      workerdMax = Math.max(workerdMax, c.workerd)
      sumMax = Math.max(sumMax, s + c.workerd)
      return { service: s, ...c }
    }
    timers.push(setInterval(sample, 1000))
    every(RATE, () => ingestOne())
    every(SENDS, sendOne)
    every(SEARCHES, searchOne)
    const invoked = () => count("SELECT count(*)::bigint AS n FROM function_invocations")
    const pending = () => count("SELECT count(*)::bigint AS n FROM search_backlog")
    for (let m = 1; m <= MINUTES; m++) {
      await sleep(60_000)
      const now = sample()
      console.log(`${String(m).padStart(3)} | ${mb(now.service)} / ${mb(minute.service)} / ${mb(statusKb(pid, "VmHWM:"))} | ` +
        `${mb(now.model)} / ${mb(minute.model)} | ${mb(now.workerd)} / ${mb(minute.workerd)} | ` +
        `${done.accepted} ${done.sent} ${done.searches} ${await invoked()} ${hooks} ` +
        `(${done.refused + done.sendErrors + done.searchErrors}, ${done.skipped}) | ${await pending()} | ${loadavg()[0]!.toFixed(1)}`)
      minute = { service: 0, model: 0, workerd: 0 }
    }
    for (const t of timers) clearInterval(t)
    timers.length = 0
    await Promise.race([Promise.all(chains), sleep(60_000)])
    // The backlog catches up once the load stops.
    const drainStart = Date.now()
    let left = await pending()
    while (left > 0 && Date.now() - drainStart < 120_000) {
      await sleep(1000)
      left = await pending()
    }
    const hwm = statusKb(pid, "VmHWM:")
    const peak = Math.max(serviceMax, hwm)
    console.log(`done: ${done.accepted} accepted (${done.refused} refused), ${done.sent} sent (${done.sendErrors} failed; relay counted ${relay.count()}), ` +
      `${done.searches} searches (${done.searchErrors} failed), ${await invoked()} invocations, ${hooks} webhooks; ` +
      `${done.skipped} ticks skipped (busy); failed requests by status: ${JSON.stringify([...done.statuses])}`)
    console.log(`embedding backlog after the load: ${left} pending (${((Date.now() - drainStart) / 1000).toFixed(0)} s to drain)`)
    console.log(`service RSS: sampled max ${mb(serviceMax)}, VmHWM ${mb(hwm)} (target ≤ 512 MB: ${peak <= TARGET_KB ? "ok" : "MISSED"})`)
    console.log(`embedding model process RSS: max ${mb(modelMax)} (its own process; not in the service's figure)`)
    console.log(`workerd RSS: max ${mb(workerdMax)}; service + workerd sampled max ${mb(sumMax)}`)
    console.log(`load average at end ${loadavg()[0]!.toFixed(1)}`)
    for (const c of conns) c.close()
  } finally {
    for (const t of timers) clearInterval(t)
    clearTimeout(hardStop)
    await client.end()
    await service.stop()
    receiver.close()
    relay.close()
    await db.cleanup()
  }
}

main().then(() => process.exit(0), (e) => {
  console.error(e)
  process.exit(1)
})
