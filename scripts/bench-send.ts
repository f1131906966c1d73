/**
 * Outbound sending, in one run against a loopback SMTP relay that accepts and counts every message:
 *
 * 1. Immediate sends: --messages (default 2,000) `POST /v1/send-mail` with 16 concurrent clients
 *    (requests rotating over --orgs pro organizations, default 64, so no organization reaches the
 *    API's 120 requests a minute or its send quotas), every send relayed inside its request
 *    (validation, sender check, quota under the organization's lock, record, MIME, DKIM, relay, the
 *    outcome written). Next to it, nodemailer sends the same messages straight to the same relay
 *    with 16 concurrent sends over a pool of 8 connections (the service's pool), without and with a
 *    DKIM signature. Prints messages/s of each and the ratio service / nodemailer (target ≥ 0.5).
 * 2. Scheduled sends: --scheduled (default 1,000) sends with `send_at` spread over the same
 *    10 seconds (starting once all are submitted), over the same organizations. The relay reads each
 *    message's `X-Bench-Due` header on arrival: prints lateness (arrival − send_at) p50/p99/max
 *    (target p99 ≤ 1 s), and messages missing or duplicated.
 *
 * Every sent email also becomes a search document that the in-process embedding model (a worker
 * thread of the service) embeds in the background; `--stub-embeddings` points the service at a
 * loopback embeddings service that answers at once instead, to see the send path alone.
 *
 *   [DATABASE_URL=postgres://postgres@127.0.0.1:5432/test] npx tsx scripts/bench-send.ts [--messages 2000] [--scheduled 1000] [--stub-embeddings]
 */
import { generateKeyPairSync } from "node:crypto"
import { createServer, type Server, type Socket } from "node:net"
import nodemailer from "nodemailer"
import pg from "pg"
import { arg, budgetMark, cpuMsOf, percentile, printBudget, provision, scratch, startService, startStubEmbeddings } from "./bench-support.js"

const MESSAGES = arg("messages", 2000)
const SCHEDULED = arg("scheduled", 1000)
const CLIENTS = 16
/** Requests rotate over this many pro organizations: each stays under the API's 120 requests a minute and its send quotas. */
const ORGS = arg("orgs", 64)
const WARMUP = 64
const SPREAD_MS = 10_000
/** `--stub-embeddings`: an embeddings service on loopback answering at once, so sent mail is not embedded by the in-process model. */
const STUB_EMBEDDINGS = process.argv.includes("--stub-embeddings")

/** A minimal SMTP relay: accepts everything, counts messages, notes when each `X-Bench-Due` arrived. */
const startRelay = () =>
  new Promise<{ server: Server; port: number; count: () => number; due: Map<string, Array<number>> }>((resolve) => {
    let count = 0
    const due = new Map<string, Array<number>>()
    const sockets = new Set<Socket>()
    const server = createServer((socket) => {
      sockets.add(socket)
      socket.on("close", () => sockets.delete(socket)).on("error", () => socket.destroy())
      let buffer = ""
      let inData = false
      socket.write("220 relay.bench ESMTP\r\n")
      socket.on("data", (chunk) => {
        buffer += chunk.toString("latin1")
        for (;;) {
          if (inData) {
            const end = buffer.indexOf("\r\n.\r\n")
            if (end < 0) return
            const data = buffer.slice(0, end)
            buffer = buffer.slice(end + 5)
            inData = false
            count++
            const m = /\r\nX-Bench-Due: (\d+) (\S+)/i.exec(`\r\n${data}`)
            if (m !== null) {
              const at = Date.now()
              const list = due.get(m[2]!) ?? []
              list.push(at - Number(m[1]))
              due.set(m[2]!, list)
            }
            socket.write("250 2.0.0 queued\r\n")
            continue
          }
          const nl = buffer.indexOf("\r\n")
          if (nl < 0) return
          const line = buffer.slice(0, nl)
          buffer = buffer.slice(nl + 2)
          const verb = line.slice(0, 4).toUpperCase()
          if (verb === "EHLO" || verb === "HELO") socket.write("250-relay.bench\r\n250-8BITMIME\r\n250 SMTPUTF8\r\n")
          else if (verb === "DATA") {
            inData = true
            socket.write("354 go ahead\r\n")
          } else if (verb === "QUIT") socket.end("221 bye\r\n")
          else socket.write("250 ok\r\n")
        }
      })
    })
    server.listen(0, "127.0.0.1", () => {
      resolve({ server, port: (server.address() as { port: number }).port, count: () => count, due })
    })
  })

const TEXT = "Hello,\n\nthe quarterly figures are attached below in words rather than numbers. ".repeat(8)

const body = (from: string, i: number) => ({
  from: `Bench <${from}>`,
  to: [`Reader <reader-${i % 97}@example.com>`],
  subject: `bench message ${i}`,
  text: TEXT,
  html: `<p>${TEXT}</p>`
})

/** Runs `total` jobs with `clients` workers, each taking the next index. */
const pool = async (total: number, clients: number, job: (i: number, worker: number) => Promise<void>) => {
  let next = 0
  await Promise.all(Array.from({ length: clients }, async (_, w) => {
    for (;;) {
      const i = next++
      if (i >= total) return
      await job(i, w)
    }
  }))
}

/**
 * The scratch database's commits so far (`pg_stat_database.xact_commit`: a statement outside a
 * transaction is one) and the CPU time of the PostgreSQL backends serving the service; PostgreSQL only.
 */
const database = async (url: string | undefined) => {
  if (url === undefined) return undefined
  const c = new pg.Client({ connectionString: url })
  await c.connect()
  const commits = await c.query("SELECT xact_commit::bigint AS n FROM pg_stat_database WHERE datname = current_database()")
  const backends = await c.query("SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'mailroom'")
  await c.end()
  return {
    commits: Number(commits.rows[0].n),
    backends: new Map<number, number>(backends.rows.map((row: { pid: number }) => [row.pid, cpuMsOf(row.pid)]))
  }
}

const post = async (baseUrl: string, apiKey: string, payload: unknown) => {
  const r = await fetch(`${baseUrl}/v1/send-mail`, {
    method: "POST",
    headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
    body: JSON.stringify(payload)
  })
  const text = await r.text()
  if (r.status !== 201) throw new Error(`send-mail: ${r.status} ${text}`)
  return JSON.parse(text) as { data: { status: string } }
}

const main = async () => {
  const relay = await startRelay()
  const db = await scratch("send")
  const stub = STUB_EMBEDDINGS ? await startStubEmbeddings() : undefined
  const env = {
    ...db.env,
    OUTBOUND_SMTP_URL: `smtp://127.0.0.1:${relay.port}`,
    ...(stub !== undefined ? { EMBEDDINGS_URL: stub.url, EMBEDDINGS_MODEL: "bench-stub" } : {})
  }
  const orgs = await provision(env, ORGS, "pro")
  const service = await startService(env)
  const backend = process.env.DATABASE_URL ? "PostgreSQL" : "PGlite"
  try {
    // --- 1. immediate sends through the API, then nodemailer straight to the relay --------------
    const orgOf = (i: number) => orgs[i % orgs.length]!
    await pool(WARMUP, CLIENTS, async (i) => {
      await post(service.baseUrl, orgOf(i).apiKey, body(orgOf(i).address, 1_000_000 + i))
    })
    const before = relay.count()
    const db0 = await database(db.adminUrl)
    const mark = await budgetMark(service)
    const cpu0 = service.cpuMs()
    let t0 = performance.now()
    const latencies: Array<number> = []
    await pool(MESSAGES, CLIENTS, async (i) => {
      const s = performance.now()
      const r = await post(service.baseUrl, orgOf(i).apiKey, body(orgOf(i).address, i))
      if (r.data.status !== "sent") throw new Error(`not sent: ${JSON.stringify(r.data)}`)
      latencies.push(performance.now() - s)
    })
    const apiSeconds = (performance.now() - t0) / 1000
    const cpuPerSend = (service.cpuMs() - cpu0) / MESSAGES
    const db1 = await database(db.adminUrl)
    // The backends alive at the start, each measured again now (one that left counts its time until then).
    const pgCpu = db0 === undefined || db1 === undefined ? undefined
      : [...db0.backends].reduce((sum, [pid, ms]) => sum + Math.max(0, (cpuMsOf(pid) || ms) - ms), 0)
    if (relay.count() - before !== MESSAGES) throw new Error(`relay counted ${relay.count() - before} of ${MESSAGES}`)
    await printBudget(service, mark, "send", MESSAGES)
    const apiRate = MESSAGES / apiSeconds

    const direct = async (dkim: boolean) => {
      const { privateKey } = generateKeyPairSync("rsa", { modulusLength: 2048, privateKeyEncoding: { type: "pkcs8", format: "pem" }, publicKeyEncoding: { type: "spki", format: "pem" } })
      const transport = nodemailer.createTransport({
        host: "127.0.0.1",
        port: relay.port,
        secure: false,
        ignoreTLS: true,
        pool: true,
        maxConnections: 8,
        maxMessages: Infinity,
        ...(dkim ? { dkim: { domainName: "agents.localhost", keySelector: "mailroom", privateKey } } : {})
      })
      const from = orgs[0]!.address
      const sendOne = (i: number) => {
        const b = body(from, i)
        return transport.sendMail({ ...b, messageId: `<${i}-${Date.now()}@agents.localhost>` })
      }
      await pool(WARMUP, CLIENTS, (i) => sendOne(i).then(() => undefined))
      const start = relay.count()
      const t = performance.now()
      await pool(MESSAGES, CLIENTS, (i) => sendOne(i).then(() => undefined))
      const seconds = (performance.now() - t) / 1000
      transport.close()
      if (relay.count() - start !== MESSAGES) throw new Error(`relay counted ${relay.count() - start} of ${MESSAGES}`)
      return MESSAGES / seconds
    }
    const plainRate = await direct(false)
    const dkimRate = await direct(true)
    const sorted = [...latencies].sort((a, b) => a - b)
    console.log(`immediate sends (${backend}${stub !== undefined ? ", embeddings stubbed" : ", sent mail embedded by the in-process model"}, ${MESSAGES} messages, ${CLIENTS} concurrent clients, ~1.6 KB text + HTML):`)
    console.log(`  POST /v1/send-mail:      ${apiRate.toFixed(0)} sends/s; p50 ${percentile(sorted, 0.5).toFixed(1)} ms, ` +
      `p99 ${percentile(sorted, 0.99).toFixed(1)} ms; service CPU ${cpuPerSend.toFixed(2)} ms/send (target ≤ 2 ms)`)
    if (db0 !== undefined && db1 !== undefined) {
      // The two reads of pg_stat_database add a commit each; the service's background timers a few.
      console.log(`  PostgreSQL per send:     ${((db1.commits - db0.commits) / MESSAGES).toFixed(2)} commits ` +
        `(a statement outside a transaction is one), backends' CPU ${((pgCpu ?? 0) / MESSAGES).toFixed(2)} ms`)
    }
    console.log(`  nodemailer, no DKIM:     ${plainRate.toFixed(0)} sends/s`)
    console.log(`  nodemailer, DKIM-signed: ${dkimRate.toFixed(0)} sends/s`)
    console.log(`  ratio service / nodemailer: ${(apiRate / plainRate).toFixed(2)} (no DKIM), ` +
      `${(apiRate / dkimRate).toFixed(2)} (DKIM) — target ≥ 0.5`)

    // --- 2. scheduled sends all due within the same 10 seconds ----------------------------------
    const run = `s${process.pid}`
    // Submitting takes a while: the due times start after a generous estimate of it (from the
    // rate measured above), so every send is submitted before the first is due.
    const lead = Math.max(10_000, Math.ceil((SCHEDULED / apiRate) * 1000 * 2) + 5_000)
    const start = Date.now() + lead
    const dueOf = (i: number) => start + Math.floor((i / SCHEDULED) * SPREAD_MS)
    t0 = performance.now()
    await pool(SCHEDULED, CLIENTS, async (i) => {
      const org = orgOf(i)
      const due = dueOf(i)
      const r = await post(service.baseUrl, org.apiKey, {
        ...body(org.address, 2_000_000 + i),
        headers: { "X-Bench-Due": `${due} ${run}` },
        send_at: new Date(due).toISOString()
      })
      if (r.data.status !== "scheduled") throw new Error(`not scheduled: ${JSON.stringify(r.data)}`)
    })
    const submitted = Date.now()
    console.log(`scheduled sends: ${SCHEDULED} submitted in ${((performance.now() - t0) / 1000).toFixed(1)} s ` +
      `(${(SCHEDULED / ((performance.now() - t0) / 1000)).toFixed(0)}/s); the first due ${start - submitted} ms after ` +
      `the last submit, all within ${SPREAD_MS / 1000} s`)
    if (submitted > start) console.log("  WARNING: submitting took longer than the lead; the first sends were due before the last was submitted")
    const until = start + SPREAD_MS + 60_000
    while ((relay.due.get(run)?.length ?? 0) < SCHEDULED && Date.now() < until) await new Promise((r) => setTimeout(r, 200))
    await new Promise((r) => setTimeout(r, 1000))
    const late = [...(relay.due.get(run) ?? [])].sort((a, b) => a - b)
    console.log(`  lateness (arrival at the relay − send_at): p50 ${percentile(late, 0.5)} ms, p99 ${percentile(late, 0.99)} ms, ` +
      `max ${late.at(-1) ?? "-"} ms, min ${late[0] ?? "-"} ms — target p99 ≤ 1000 ms`)
    console.log(`  arrived ${late.length} of ${SCHEDULED}${late.length > SCHEDULED ? " (duplicates!)" : ""}`)
  } finally {
    await service.stop()
    relay.server.close()
    stub?.close()
    await db.cleanup()
  }
}

main().then(() => process.exit(0), (e) => {
  console.error(e)
  process.exit(1)
})
