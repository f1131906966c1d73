/**
 * Local delivery end to end, with no relay: organizations A send to organizations B of the same
 * service at a steady --rate (default 50 sends/s) for --seconds (default 20); every send is stored
 * through the inbound pipeline inside its request and delivered to B's webhook (a loopback HTTP
 * receiver). Prints, over all sends, p50/p99/max of
 * - the send: `POST /v1/send-mail` issued → 201,
 * - end to end: send issued → B's webhook received,
 * - after acceptance: 201 → webhook (negative when the webhook beat the 201 back to the client),
 * the service's CPU time per accepted send (a figure less bent by a busy machine), and sends
 * refused or never delivered.
 *
 * Senders rotate over --senders pro organizations (default 40, so each stays under the API's 120
 * requests a minute and the plan's send quota), receivers over 4 organizations, each with one endpoint.
 *
 *   [DATABASE_URL=postgres://postgres@127.0.0.1:5432/test] npx tsx scripts/bench-local-delivery.ts [--rate 50] [--seconds 20] [--stub-embeddings]
 */
import { createServer } from "node:http"
import { arg, percentile, provision, scratch, startService, startStubEmbeddings } from "./bench-support.js"

const RATE = arg("rate", 50)
const SECONDS = arg("seconds", 20)
const SENDERS = arg("senders", 40)
const RECEIVERS = 4
/** `--stub-embeddings`: a loopback embeddings service answering at once, so the in-process model does not embed every sent and received email. */
const STUB_EMBEDDINGS = process.argv.includes("--stub-embeddings")

const startReceiver = () =>
  new Promise<{ url: string; arrived: Map<string, number>; close: () => void }>((resolve) => {
    const arrived = new Map<string, number>()
    const server = createServer((req, res) => {
      let raw = ""
      req.on("data", (c: Buffer) => (raw += c.toString("utf8")))
      req.on("end", () => {
        const at = performance.now()
        try {
          const subject = (JSON.parse(raw) as { email?: { subject?: string } }).email?.subject ?? ""
          const m = /^bench (\d+)$/.exec(subject)
          if (m !== null && !arrived.has(m[1]!)) arrived.set(m[1]!, at)
        } catch { /* not ours */ }
        res.writeHead(200).end("ok")
      })
    })
    server.keepAliveTimeout = 60_000
    server.listen(0, "127.0.0.1", () =>
      resolve({ url: `http://127.0.0.1:${(server.address() as { port: number }).port}/hook`, arrived, close: () => server.close() }))
  })

const stats = (label: string, values: ReadonlyArray<number>) => {
  const sorted = [...values].sort((a, b) => a - b)
  const f = (n: number) => `${n.toFixed(1)} ms`
  console.log(`${label.padEnd(34)} p50 ${f(percentile(sorted, 0.5))}  p99 ${f(percentile(sorted, 0.99))}  max ${f(sorted.at(-1) ?? 0)}  (n=${sorted.length})`)
}

const main = async () => {
  const db = await scratch("localdelivery")
  const receiver = await startReceiver()
  const stub = STUB_EMBEDDINGS ? await startStubEmbeddings() : undefined
  // No OUTBOUND_SMTP_URL: every recipient is an inbox of this service.
  const env = { ...db.env, ...(stub !== undefined ? { EMBEDDINGS_URL: stub.url, EMBEDDINGS_MODEL: "bench-stub" } : {}) }
  const senders = await provision(env, SENDERS, "pro")
  const receivers = await provision(env, RECEIVERS, "pro")
  const service = await startService(env)
  const backend = process.env.DATABASE_URL ? "PostgreSQL" : "PGlite"
  try {
    for (const b of receivers) {
      const r = await fetch(`${service.baseUrl}/v1/endpoints`, {
        method: "POST",
        headers: { authorization: `Bearer ${b.apiKey}`, "content-type": "application/json" },
        body: JSON.stringify({ url: receiver.url })
      })
      if (r.status !== 201) throw new Error(`endpoint: ${r.status} ${await r.text()}`)
    }
    const issued = new Map<string, number>()
    const accepted = new Map<string, number>()
    const refused: Array<string> = []
    const send = async (i: number) => {
      const a = senders[i % senders.length]!
      const b = receivers[i % receivers.length]!
      const id = String(i)
      issued.set(id, performance.now())
      const r = await fetch(`${service.baseUrl}/v1/send-mail`, {
        method: "POST",
        headers: { authorization: `Bearer ${a.apiKey}`, "content-type": "application/json", "idempotency-key": `bench-${i}` },
        body: JSON.stringify({ from: a.address, to: b.address, subject: `bench ${i}`, text: `local delivery bench message ${i}` })
      })
      const body = await r.text()
      if (r.status === 201) accepted.set(id, performance.now())
      else refused.push(`${r.status} ${body.slice(0, 200)}`)
    }
    // Warm-up (JIT, connections, the managed domain's DKIM key), not measured.
    await Promise.all(Array.from({ length: 10 }, (_, i) => send(1_000_000 + i)))
    for (const k of [...issued.keys()]) {
      issued.delete(k)
      accepted.delete(k)
    }
    const total = RATE * SECONDS
    const cpuBefore = service.cpuMs()
    const started = performance.now()
    const inflight: Array<Promise<void>> = []
    for (let i = 0; i < total; i++) {
      const due = started + (i * 1000) / RATE
      const wait = due - performance.now()
      if (wait > 0) await new Promise((r) => setTimeout(r, wait))
      inflight.push(send(i))
    }
    await Promise.all(inflight)
    const deadline = performance.now() + 30_000
    while (performance.now() < deadline && [...accepted.keys()].some((k) => !receiver.arrived.has(k))) {
      await new Promise((r) => setTimeout(r, 100))
    }
    const cpu = service.cpuMs() - cpuBefore
    const sendMs: Array<number> = []
    const endToEnd: Array<number> = []
    const afterAccept: Array<number> = []
    let lost = 0
    for (const [id, at] of accepted) {
      sendMs.push(at - issued.get(id)!)
      const hook = receiver.arrived.get(id)
      if (hook === undefined) {
        lost++
        continue
      }
      endToEnd.push(hook - issued.get(id)!)
      afterAccept.push(hook - at)
    }
    console.log(`local delivery A → B, ${backend}${stub ? ", embeddings stubbed" : ""}, no relay: ${total} sends at ${RATE}/s over ${SECONDS} s`)
    stats("send (issued → 201)", sendMs)
    stats("end to end (issued → B's webhook)", endToEnd)
    stats("accepted (201) → B's webhook", afterAccept)
    console.log(`service CPU per accepted send (send + local delivery + webhook): ${(cpu / Math.max(1, accepted.size)).toFixed(1)} ms`)
    console.log(`refused: ${refused.length}${refused.length > 0 ? ` (first: ${refused[0]})` : ""}; accepted but not delivered within 30 s: ${lost}`)
  } finally {
    await service.stop()
    receiver.close()
    stub?.close()
    await db.cleanup()
  }
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
