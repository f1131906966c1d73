/**
 * No lost mail: the service (a child process) is killed with SIGKILL at random points of an SMTP
 * burst from several concurrent connections, restarted, and the burst resumes; 24 rounds (5 with
 * FAULTS_SCALE=ci). Afterwards every message that was answered `250` has been delivered to the
 * organization's webhook, and no stored email is half-written.
 *
 * With FAULTS_WORKERS=2 (PostgreSQL) the service is a primary with two workers, and the kills
 * alternate: one worker (the primary starts it again while the other keeps serving), then the
 * primary (its workers go with it; the service is started again).
 */
import { describe, expect, it } from "@effect/vitest"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import nodemailer from "nodemailer"
import { parseEmail } from "../../src/mail/Parse.js"
import { fetchReply } from "../support/http.js"
import {
  baseEnv,
  createOrg,
  faultWorkers,
  kill9,
  kill9Worker,
  openDb,
  scaled,
  scratchDb,
  type ServiceProcess,
  sleep,
  startReceiver,
  startService,
  stopGracefully,
  workersBack
} from "./support.js"

const CONNECTIONS = 6
const WORKERS = faultWorkers()
const database = `${process.env.DATABASE_URL ? "PostgreSQL" : "PGlite"}${WORKERS > 1 ? `, ${WORKERS} workers` : ""}`

/** One SMTP connection sending messages back to back until told to stop or the server dies. */
const sender = async (
  port: number,
  to: string,
  round: number,
  conn: number,
  stop: { now: boolean },
  accepted: Map<string, string>,
  attempted: { n: number }
) => {
  const transport = nodemailer.createTransport({
    host: "127.0.0.1",
    port,
    secure: false,
    ignoreTLS: true,
    pool: true,
    maxConnections: 1,
    connectionTimeout: 3000,
    socketTimeout: 10_000
  })
  try {
    for (let i = 0; !stop.now; i++) {
      const subject = `r${round}-c${conn}-m${i}`
      const messageId = `<${subject}.${Math.random().toString(36).slice(2)}@faults.test>`
      attempted.n++
      try {
        const info = await transport.sendMail({
          from: "burst@example.com",
          to,
          subject,
          messageId,
          text: `message ${subject}\n${"lorem ipsum ".repeat(100 + (i % 7) * 50)}`,
          ...(i % 5 === 0 ? { attachments: [{ filename: "a.bin", content: Buffer.alloc(8000 + i, i % 251) }] } : {})
        })
        if (/^250 /.test(info.response)) accepted.set(subject, messageId)
      } catch {
        // The server died (or answered 4xx): not accepted, the sender would retry later.
        if (stop.now) return
        await sleep(20)
      }
    }
  } finally {
    transport.close()
  }
}

describe(`no lost mail (${database})`, () => {
  it(`kill -9 during SMTP bursts, ${scaled(24, 5)} rounds: every 250 is delivered, nothing half-written`, async () => {
    const db = await scratchDb()
    const dir = mkdtempSync(join(tmpdir(), "mailroom-faults-"))
    const receiver = await startReceiver()
    let svc: ServiceProcess | undefined
    try {
      const env = baseEnv(dir, db.url, { DELIVERY_RETRY_DELAYS: "200ms,500ms,1s,2s,5s,10s", DELIVERY_TIMEOUT: "2s" })
      const org = await createOrg(env, "Burst")
      svc = await startService(env)
      const endpoint = await fetchReply(`${svc.baseUrl}/v1/endpoints`, "POST", {
        token: org.apiKey,
        body: { url: receiver.url("/hook") }
      })
      expect(endpoint.status).toBe(201)

      const accepted = new Map<string, string>()
      const attempted = { n: 0 }
      const rounds = scaled(24, 5)
      const killDelays: Array<string> = []
      for (let round = 0; round < rounds; round++) {
        if (svc === undefined) svc = await startService(env)
        const stop = { now: false }
        const s = svc
        const senders = Array.from({ length: CONNECTIONS }, (_, c) =>
          sender(s.smtpPort, org.address, round, c, stop, accepted, attempted))
        const delay = 150 + Math.floor(Math.random() * 1500)
        await sleep(delay)
        if (WORKERS > 1 && round % 2 === 0) {
          // A worker dies mid-burst; the primary starts it again and the service never stops.
          killDelays.push(`worker@${delay}`)
          await kill9Worker(s, round / 2)
          stop.now = true
          await Promise.all(senders)
          expect(await workersBack(s, WORKERS), s.stderr()).toBe(true)
          continue
        }
        killDelays.push(WORKERS > 1 ? `primary@${delay}` : String(delay))
        await kill9(s)
        stop.now = true
        await Promise.all(senders)
        svc = undefined
      }
      // (Still running when the last round killed a worker.)
      if (svc === undefined) svc = await startService(env)

      // Every accepted message reaches the receiver after the restarts.
      const deliveredSubjects = () => new Set(receiver.hits.map((h) => h.body.email?.subject ?? ""))
      const until = Date.now() + 90_000
      let missing: Array<string> = []
      for (;;) {
        const got = deliveredSubjects()
        missing = [...accepted.keys()].filter((s) => !got.has(s))
        if (missing.length === 0 || Date.now() > until) break
        await sleep(250)
      }
      console.log(
        `no-lost-mail (${database}): ${rounds} kills at ${killDelays.join(",")} ms; ${attempted.n} attempted, ` +
          `${accepted.size} answered 250, ${receiver.hits.length} webhook hits, ${missing.length} missing`
      )
      expect(missing).toEqual([])
      // Delivered with the right Message-ID, too.
      const byMessageId = new Map(receiver.hits.map((h) => [h.body.email?.subject ?? "", h.body.email?.message_id ?? null]))
      for (const [subject, messageId] of accepted) expect(byMessageId.get(subject)).toBe(messageId)

      await stopGracefully(svc)
      svc = undefined
      const conn = await openDb(dir, db.url)
      try {
        const rows = await conn.query<{
          id: string
          subject: string | null
          size_bytes: number
          parse_error: string | null
          raw: Uint8Array | null
          deliveries: number
        }>(
          `SELECT e.id, e.subject, e.size_bytes, e.parse_error, c.raw,
                  (SELECT count(*)::int FROM deliveries d WHERE d.email_id = e.id) AS deliveries
           FROM emails e LEFT JOIN email_contents c ON c.email_id = e.id`
        )
        expect(rows.length).toBeGreaterThanOrEqual(accepted.size)
        const stored = new Set(rows.map((r) => r.subject))
        for (const subject of accepted.keys()) expect(stored.has(subject)).toBe(true)
        for (const row of rows) {
          expect(row.raw, `email ${row.id} has its content`).not.toBeNull()
          const raw = Buffer.from(row.raw!)
          expect(raw.length).toBe(row.size_bytes)
          expect(row.parse_error).toBeNull()
          expect(row.deliveries).toBeGreaterThanOrEqual(1)
          const parsed = await parseEmail(raw)
          expect(parsed.subject).toBe(row.subject)
        }
      } finally {
        await conn.close()
      }
    } finally {
      if (svc !== undefined) await kill9(svc)
      await receiver.close()
      await db.drop()
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
