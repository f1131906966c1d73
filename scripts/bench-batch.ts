/**
 * `POST /v1/send-mail/batch` against single sends, in one run against a loopback SMTP relay that
 * accepts and counts every message: --messages (default 100, at most 100: one batch) messages sent
 * (1) as one batch request, (2) as that many `POST /v1/send-mail` requests one after another (a
 * caller looping), and (3) as single requests with 8 concurrent clients. Each mode uses its own pro
 * organization (the API allows 120 requests a minute per organization). Prints the wall time and
 * messages/s of each and the ratios batch / single. --rounds repeats the whole comparison.
 *
 *   [DATABASE_URL=postgres://postgres@127.0.0.1:5432/test] npx tsx scripts/bench-batch.ts [--messages 100] [--rounds 1]
 */
import { createServer, type Socket } from "node:net"
import { arg, provision, scratch, startService } from "./bench-support.js"

const MESSAGES = Math.min(100, arg("messages", 100))
const ROUNDS = arg("rounds", 1)
const CONCURRENT = 8

/** A minimal SMTP relay: accepts everything and counts messages. */
const startRelay = () =>
  new Promise<{ port: number; count: () => number; close: () => void }>((resolve) => {
    let count = 0
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
            buffer = buffer.slice(end + 5)
            inData = false
            count++
            socket.write("250 2.0.0 queued\r\n")
            continue
          }
          const nl = buffer.indexOf("\r\n")
          if (nl < 0) return
          const verb = buffer.slice(0, 4).toUpperCase()
          buffer = buffer.slice(nl + 2)
          if (verb === "EHLO" || verb === "HELO") socket.write("250-relay.bench\r\n250-8BITMIME\r\n250 SMTPUTF8\r\n")
          else if (verb === "DATA") {
            inData = true
            socket.write("354 go ahead\r\n")
          } else if (verb === "QUIT") socket.end("221 bye\r\n")
          else socket.write("250 ok\r\n")
        }
      })
    })
    server.listen(0, "127.0.0.1", () =>
      resolve({
        port: (server.address() as { port: number }).port,
        count: () => count,
        close: () => {
          for (const s of sockets) s.destroy()
          server.close()
        }
      }))
  })

const TEXT = "Hello,\n\nthe quarterly figures are attached below in words rather than numbers. ".repeat(8)

const message = (from: string, i: number, run: string) => ({
  from: `Bench <${from}>`,
  to: [`Reader <reader-${i % 97}@example.com>`],
  subject: `batch bench ${run} ${i}`,
  text: TEXT,
  html: `<p>${TEXT}</p>`
})

const post = async (baseUrl: string, apiKey: string, path: string, payload: unknown, expected: number) => {
  const r = await fetch(`${baseUrl}/v1${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
    body: JSON.stringify(payload)
  })
  const text = await r.text()
  if (r.status !== expected) throw new Error(`${path}: ${r.status} ${text}`)
  return JSON.parse(text) as { data: any }
}

const main = async () => {
  const relay = await startRelay()
  const db = await scratch("batch")
  const env = { ...db.env, OUTBOUND_SMTP_URL: `smtp://127.0.0.1:${relay.port}` }
  // Per round: one organization per mode, and one to warm up.
  const orgs = await provision(env, 1 + 3 * ROUNDS, "pro")
  const service = await startService(env)
  const backend = process.env.DATABASE_URL ? "PostgreSQL" : "PGlite"
  try {
    const warm = orgs[0]!
    for (let i = 0; i < 10; i++) await post(service.baseUrl, warm.apiKey, "/send-mail", message(warm.address, i, "warm"), 201)
    await post(service.baseUrl, warm.apiKey, "/send-mail/batch", { messages: [message(warm.address, 99, "warm")] }, 200)
    for (let round = 0; round < ROUNDS; round++) {
      const [batchOrg, seqOrg, concOrg] = [orgs[1 + 3 * round]!, orgs[2 + 3 * round]!, orgs[3 + 3 * round]!]
      const run = `r${round}`
      const timed = async (f: () => Promise<void>) => {
        const before = relay.count()
        const t = performance.now()
        await f()
        const seconds = (performance.now() - t) / 1000
        if (relay.count() - before !== MESSAGES) throw new Error(`relay counted ${relay.count() - before} of ${MESSAGES}`)
        return seconds
      }
      const batch = await timed(async () => {
        const r = await post(service.baseUrl, batchOrg.apiKey, "/send-mail/batch", {
          messages: Array.from({ length: MESSAGES }, (_, i) => message(batchOrg.address, i, run))
        }, 200)
        const failed = (r.data.results as Array<{ error?: unknown }>).filter((x) => x.error !== undefined)
        if (failed.length > 0) throw new Error(`batch: ${failed.length} refused: ${JSON.stringify(failed[0])}`)
      })
      const sequential = await timed(async () => {
        for (let i = 0; i < MESSAGES; i++) await post(service.baseUrl, seqOrg.apiKey, "/send-mail", message(seqOrg.address, i, run), 201)
      })
      const concurrent = await timed(async () => {
        let next = 0
        await Promise.all(Array.from({ length: CONCURRENT }, async () => {
          for (let i = next++; i < MESSAGES; i = next++) await post(service.baseUrl, concOrg.apiKey, "/send-mail", message(concOrg.address, i, run), 201)
        }))
      })
      const rate = (s: number) => `${(MESSAGES / s).toFixed(0)} messages/s`
      console.log(`round ${round + 1} (${backend}, ${MESSAGES} messages, ~1.6 KB text + HTML each, relayed to a loopback SMTP relay):`)
      console.log(`  one batch request:                    ${(batch * 1000).toFixed(0)} ms, ${rate(batch)}`)
      console.log(`  ${MESSAGES} single requests, one by one:     ${(sequential * 1000).toFixed(0)} ms, ${rate(sequential)}`)
      console.log(`  ${MESSAGES} single requests, ${CONCURRENT} concurrent:  ${(concurrent * 1000).toFixed(0)} ms, ${rate(concurrent)}`)
      console.log(`  ratio batch / single: ${(sequential / batch).toFixed(2)}× one by one, ${(concurrent / batch).toFixed(2)}× ${CONCURRENT} concurrent`)
    }
  } finally {
    await service.stop()
    relay.close()
    await db.cleanup()
  }
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
