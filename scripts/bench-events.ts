/**
 * Event stream benchmark: the time from an email's SMTP 250 to its `email.received` on a
 * `GET /v1/events` stream (p50/p99), with mail arriving at a steady rate (default 50 messages/s)
 * over a few SMTP connections, on one service built as `npm start` builds it.
 *
 *   npx tsx scripts/bench-events.ts [--rate 50] [--seconds 10] [--connections 4]
 */
import { arg, message, percentile, provision, RawSmtp, scratch, startService } from "./bench-support.js"

const RATE = arg("rate", 50)
const SECONDS = arg("seconds", 10)
const CONNECTIONS = arg("connections", 4)

const main = async () => {
  const s = await scratch("events")
  const [org] = await provision(s.env, 1)
  const service = await startService(s.env)
  const abort = new AbortController()
  try {
    const res = await fetch(`${service.baseUrl}/v1/events?types=email.received`, {
      headers: { accept: "text/event-stream", authorization: `Bearer ${org!.apiKey}` },
      signal: abort.signal
    })
    if (res.status !== 200 || res.body === null) throw new Error(`stream: ${res.status} ${await res.text()}`)
    const arrived = new Map<number, number>()
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader()
    void (async () => {
      let buffer = ""
      for (;;) {
        const { done, value } = await reader.read().catch(() => ({ done: true, value: undefined }))
        if (done) return
        buffer += value
        let end: number
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, end)
          buffer = buffer.slice(end + 2)
          const m = /"subject":"bench (\d+)"/.exec(block)
          if (m) arrived.set(Number(m[1]), performance.now())
        }
      }
    })()
    const smtp = await Promise.all(Array.from({ length: CONNECTIONS }, () => RawSmtp.open(service.smtpPort)))
    const accepted = new Map<number, number>()
    const total = RATE * SECONDS
    const started = performance.now()
    const lanes = smtp.map(async (c, lane) => {
      for (let i = lane; i < total; i += CONNECTIONS) {
        // A steady schedule: message i is due at i / RATE seconds.
        const due = started + (i * 1000) / RATE
        const wait = due - performance.now()
        if (wait > 0) await new Promise((r) => setTimeout(r, wait))
        const [code] = await c.send("bench@example.com", org!.address, message(i, "bench@example.com", org!.address, 4096))
        if (code === 250) accepted.set(i, performance.now())
      }
    })
    await Promise.all(lanes)
    const sendSeconds = (performance.now() - started) / 1000
    const deadline = performance.now() + 30_000
    while (arrived.size < accepted.size && performance.now() < deadline) await new Promise((r) => setTimeout(r, 100))
    smtp.forEach((c) => c.close())
    const latencies = [...accepted].flatMap(([i, t]) => (arrived.has(i) ? [arrived.get(i)! - t] : [])).sort((a, b) => a - b)
    console.log(`event stream, ${process.env.DATABASE_URL ? "PostgreSQL" : "PGlite"}: ${accepted.size} mails accepted in ${sendSeconds.toFixed(1)} s ` +
      `(target ${RATE}/s), ${latencies.length} streamed, ${accepted.size - latencies.length} missing`)
    console.log(`250 → email.received on the stream: p50 ${percentile(latencies, 0.5).toFixed(0)} ms, p99 ${percentile(latencies, 0.99).toFixed(0)} ms, ` +
      `max ${(latencies.at(-1) ?? 0).toFixed(0)} ms (target: within 1 s)`)
  } finally {
    abort.abort()
    await service.stop()
    await s.cleanup()
  }
}

await main()
