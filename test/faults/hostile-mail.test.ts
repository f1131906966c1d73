/**
 * Hostile mail at volume: 100,000 generated and mutated MIME messages (10,000 with FAULTS_SCALE=ci)
 * through the ingestion functions (parse, classify, spam score; every message's parse timed), a
 * share of them through real SMTP into a service child process; and the SMTP limits enforced while
 * streaming: a 1 GB DATA stream is refused with 552 while the service's RSS grows by at most 10 MB
 * (spooled to disk past 1 MiB, nothing kept past the limit) and its spool file is removed, and the
 * 101st distinct recipient is refused with 452.
 */
import { describe, expect, it } from "@effect/vitest"
import { mkdtempSync, readdirSync, rmSync } from "node:fs"
import { connect, type Socket } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import nodemailer from "nodemailer"
import { NO_AUTH } from "../../src/inbound/Authenticity.js"
import { classify } from "../../src/inbound/Classify.js"
import { parseEmail } from "../../src/mail/Parse.js"
import { MAX_MESSAGE_BYTES, MAX_RECIPIENTS } from "../../src/inbound/SmtpServer.js"
import { scoreSpam } from "../../src/inbound/SpamScore.js"
import { adversarial } from "../support/mime.js"
import { baseEnv, createOrg, openDb, rssOf, scaled, scratchDb, sleep, startService, stopGracefully } from "./support.js"

/** A small deterministic PRNG so a failing message can be regenerated from its index. */
const rng = (seed: number) => () => {
  seed = (seed * 1103515245 + 12345) & 0x7fffffff
  return seed / 0x7fffffff
}

const pick = <A>(r: () => number, xs: ReadonlyArray<A>) => xs[Math.floor(r() * xs.length)]!

const HEADERS = ["From", "To", "Cc", "Subject", "Date", "Message-ID", "In-Reply-To", "References", "Content-Type",
  "Content-Transfer-Encoding", "Content-Disposition", "MIME-Version", "Reply-To", "Feedback-Type", "TLS-Report-Domain"]
const VALUES = ["a@example.com", "\"Q\" <q@x.io>", "undisclosed-recipients:;", "=?utf-8?B?8J+mhA==?=", "=?iso-8859-1?Q?caf=E9?=",
  "multipart/mixed; boundary=zz", "multipart/report; report-type=delivery-status; boundary=zz", "text/plain; charset=utf-8",
  "text/html", "base64", "quoted-printable", "8bit", "attachment; filename=\"a!b!1700000000!1700086400.xml.gz\"",
  "<id@x>", "Mon, 32 Foo 99999 25:61:61 +9999", "", " ", "\u0000", "🦄".repeat(20), "x".repeat(2000), "auth-failure"]
const BODIES = ["hello", "--zz\r\nContent-Type: text/plain\r\n\r\npart\r\n--zz\r\nContent-Type: message/delivery-status\r\n\r\nStatus: 5.1.1\r\n--zz--",
  "PGh0bWw+PC9odG1sPg==", "=E9=\r\n=ZZ", "--zz\r\n--zz--\r\n--zz", "\xff\xfe\x00\x01", "<html><body>" + "<div>".repeat(500)]

/** A generated message, then (most of the time) mutated at the byte level. */
const generate = (i: number): Buffer => {
  const r = rng(i + 1)
  const lines: Array<string> = []
  const n = 1 + Math.floor(r() * 10)
  for (let k = 0; k < n; k++) lines.push(`${pick(r, HEADERS)}: ${pick(r, VALUES)}`)
  lines.push(`Subject: fuzz ${i}`)
  let text = `${lines.join(r() < 0.9 ? "\r\n" : "\n")}\r\n\r\n${pick(r, BODIES)}\r\n`
  let buf = Buffer.from(text, "utf8")
  const mutations = r() < 0.7 ? 1 + Math.floor(r() * 4) : 0
  for (let m = 0; m < mutations; m++) {
    const at = Math.floor(r() * buf.length)
    switch (Math.floor(r() * 6)) {
      case 0: // flip a byte
        buf = Buffer.from(buf)
        if (buf.length > 0) buf[at] = Math.floor(r() * 256)
        break
      case 1: // truncate
        buf = buf.subarray(0, at)
        break
      case 2: // duplicate a slice
        buf = Buffer.concat([buf.subarray(0, at), buf.subarray(at, at + 200), buf.subarray(at)])
        break
      case 3: // insert line noise
        buf = Buffer.concat([buf.subarray(0, at), Buffer.from(pick(r, ["\r\n", "\n\n", "\r", ":", "--zz\r\n", "=?", "\u0000"])), buf.subarray(at)])
        break
      case 4: // delete a slice
        buf = Buffer.concat([buf.subarray(0, at), buf.subarray(at + Math.floor(r() * 50))])
        break
      default: // a long folded header
        buf = Buffer.concat([Buffer.from(`X-Long: ${"a ".repeat(Math.floor(r() * 5000))}\r\n`), buf])
    }
  }
  text = ""
  return buf
}

/** One raw SMTP conversation step: writes a line, resolves with the next full reply. */
const smtpSession = (port: number) =>
  new Promise<{ socket: Socket; reply: (line?: string) => Promise<string> }>((resolve, reject) => {
    const socket = connect(port, "127.0.0.1")
    let buffer = ""
    const waiting: Array<(s: string) => void> = []
    socket.on("data", (d: Buffer) => {
      buffer += d.toString("latin1")
      for (;;) {
        // A reply ends with a line "ddd " (no dash).
        const m = /(^|\r\n)(\d{3}) [^\r\n]*\r\n/.exec(buffer)
        if (!m) break
        const end = m.index + m[0].length
        const reply = buffer.slice(0, end)
        buffer = buffer.slice(end)
        waiting.shift()?.(reply.trim())
      }
    })
    socket.once("error", reject)
    const reply = (line?: string) =>
      new Promise<string>((res) => {
        waiting.push(res)
        if (line !== undefined) socket.write(`${line}\r\n`)
      })
    void reply().then(() => resolve({ socket, reply }))
  })

const database = process.env.DATABASE_URL ? "PostgreSQL" : "PGlite"

describe(`hostile mail (${database})`, () => {
  it(`${scaled(100_000, 10_000)} generated and mutated messages through parse, classify and score: no crash, none over 1 s`, async () => {
    const total = scaled(100_000, 10_000)
    const adversaries = Object.values(adversarial())
    let errors = 0
    let max = 0
    let maxAt = -1
    let sum = 0
    const started = performance.now()
    for (let i = 0; i < total; i++) {
      const raw = i % 1000 === 999 ? adversaries[(i / 1000) % adversaries.length | 0]! : generate(i)
      const t = performance.now()
      try {
        const parsed = await parseEmail(raw)
        classify(parsed, raw)
        scoreSpam(parsed, NO_AUTH)
      } catch (e) {
        expect(e).toBeInstanceOf(Error)
        errors++
      }
      const ms = performance.now() - t
      sum += ms
      if (ms > max) {
        max = ms
        maxAt = i
      }
    }
    const seconds = (performance.now() - started) / 1000
    console.log(
      `mime fuzz: ${total} messages in ${seconds.toFixed(1)} s (${(total / seconds).toFixed(0)}/s), ` +
        `${errors} parse errors (quarantined), mean ${(sum / total).toFixed(2)} ms, max ${max.toFixed(0)} ms (message ${maxAt})`
    )
    expect(max).toBeLessThan(1000)
  })

  it(`SMTP: ${scaled(2000, 300)} fuzzed messages into a service process; 1 GB stream refused without keeping it; spool files removed; 101st recipient refused`, async () => {
    const db = await scratchDb()
    const dir = mkdtempSync(join(tmpdir(), "mailroom-hostile-"))
    let svc: Awaited<ReturnType<typeof startService>> | undefined
    try {
      // The stream's memory is measured alone: with indexing on, the fuzzed messages would load the
      // in-process embedding model (~260 MB, a worker thread of the service) in the middle of the
      // measurement (search's own tests and benchmark cover indexing).
      const env = baseEnv(dir, db.url, { SEARCH_INDEXING: "false" })
      const org = await createOrg(env, "Hostile")
      svc = await startService(env)
      const port = svc.smtpPort
      const count = scaled(2000, 300)
      let accepted = 0
      const refused: Array<string> = []
      const worker = async (w: number) => {
        const t = nodemailer.createTransport({ host: "127.0.0.1", port, secure: false, ignoreTLS: true, pool: true, maxConnections: 1 })
        try {
          for (let i = w; i < count; i += 4) {
            // Generated messages plus every adversarial shape now and then.
            const raw = i % 100 === 50 ? Object.values(adversarial())[(i / 100) % 14 | 0]! : generate(1_000_000 + i)
            try {
              const info = await t.sendMail({ envelope: { from: "f@example.com", to: [org.address] }, raw })
              if (/^250 /.test(info.response)) accepted++
            } catch (e) {
              refused.push(`${i}: ${(e as Error).message.slice(0, 120)}`)
            }
          }
        } finally {
          t.close()
        }
      }
      const pushStarted = Date.now()
      await Promise.all([0, 1, 2, 3].map(worker))
      console.log(`smtp fuzz: ${accepted}/${count} accepted in ${((Date.now() - pushStarted) / 1000).toFixed(1)} s; refused: ${refused.slice(0, 5).join(" | ")}`)
      // Nodemailer refuses to send a few shapes itself (e.g. an empty message); the service accepts the rest.
      expect(accepted).toBeGreaterThanOrEqual(count - refused.filter((r) => /empty|no data|ENOENT/i.test(r)).length - 2)
      const health = await fetch(`${svc.baseUrl}/v1/health`)
      expect(health.status).toBe(200)

      // The recipient limit, enforced per RCPT as they arrive, on distinct addresses (`+tag` forms);
      // an address given again is the same recipient and never counts twice.
      {
        const [local, domain] = org.address.split("@")
        const s = await smtpSession(port)
        expect(await s.reply("EHLO test")).toMatch(/^250/)
        expect(await s.reply("MAIL FROM:<a@example.com>")).toMatch(/^250/)
        for (let i = 0; i < MAX_RECIPIENTS; i++) expect(await s.reply(`RCPT TO:<${local}+r${i}@${domain}>`)).toMatch(/^250/)
        expect(await s.reply(`RCPT TO:<${local}+r${MAX_RECIPIENTS}@${domain}>`)).toMatch(/^452 /)
        expect(await s.reply(`RCPT TO:<${local.toUpperCase()}+R0@${domain}>`)).toMatch(/^250/)
        s.socket.destroy()
      }

      // Declared too large up front: refused before any data.
      {
        const s = await smtpSession(port)
        expect(await s.reply("EHLO test")).toMatch(/^250/)
        expect(await s.reply(`MAIL FROM:<a@example.com> SIZE=${1024 ** 3}`)).toMatch(/^552 /)
        s.socket.destroy()
      }

      // A 1 GB DATA stream without SIZE, generated lazily, refused at the end; RSS sampled every 50 ms.
      const s = await smtpSession(port)
      expect(await s.reply("EHLO test")).toMatch(/^250/)
      expect(await s.reply("MAIL FROM:<a@example.com>")).toMatch(/^250/)
      expect(await s.reply(`RCPT TO:<${org.address}>`)).toMatch(/^250/)
      expect(await s.reply("DATA")).toMatch(/^354/)
      await sleep(200)
      const pid = svc.pid
      const before = rssOf(pid)
      let peak = before
      // Up to the limit (30 MB) the service must keep what it receives; past it, nothing more.
      let pastLimit = 0
      let peakPastLimit = 0
      const sampler = setInterval(() => {
        const now = rssOf(pid)
        peak = Math.max(peak, now)
        if (pastLimit > 0) peakPastLimit = Math.max(peakPastLimit, now)
      }, 50)
      const chunk = Buffer.from(`${"z".repeat(1022)}\r\n`.repeat(1024)) // 1 MiB of 1 KiB lines
      const total = 1024 // MiB
      const limitMiB = Math.ceil(MAX_MESSAGE_BYTES / 1048576)
      const streamStarted = Date.now()
      await new Promise<void>((resolve) => {
        let sent = 0
        const pump = () => {
          while (sent < total) {
            sent++
            if (sent === limitMiB + 34) {
              pastLimit = rssOf(pid)
              peakPastLimit = pastLimit
            }
            if (!s.socket.write(chunk)) return void s.socket.once("drain", pump)
          }
          resolve()
        }
        pump()
      })
      const final = await s.reply(".")
      clearInterval(sampler)
      const growthPastLimit = (peakPastLimit - pastLimit) / 1048576
      const growthTotal = (peak - before) / 1048576
      console.log(
        `1 GB stream: answered "${final.slice(0, 60)}" after ${((Date.now() - streamStarted) / 1000).toFixed(1)} s; ` +
          `RSS before DATA ${(before / 1048576).toFixed(1)} MB, peak ${(peak / 1048576).toFixed(1)} MB (+${growthTotal.toFixed(1)} MB); ` +
          `over the last ${total - limitMiB - 34} MiB (past the limit): +${growthPastLimit.toFixed(1)} MB`
      )
      expect(final).toMatch(new RegExp(`^552 .*${MAX_MESSAGE_BYTES}`))
      // The message is spooled to disk past 1 MiB while it arrives, nothing is kept past the limit,
      // and the dead socket chunks are collected every MiB: the whole stream adds about +6 MB in this
      // suite (+1 MB alone). Keeping the message in memory, as before spooling, peaked near +50 MB.
      // Past the limit 960 MiB more arrive; keeping any fixed share of them would add tens of MB.
      // The same process is still storing, indexing and delivering the 300 fuzzed messages (and on
      // PGlite it holds the database), which alone moved RSS by 5.0 MB once: hence 8, not 5.
      expect(growthTotal).toBeLessThanOrEqual(10)
      expect(growthPastLimit).toBeLessThanOrEqual(8)
      // The refused message's spool file is gone.
      expect(readdirSync(join(dir, "spool"))).toEqual([])
      // The connection is still usable and the next message goes through.
      expect(await s.reply("RSET")).toMatch(/^250/)
      s.socket.destroy()

      // A client that goes away in the middle of a spooled message leaves no spool file behind.
      {
        const c = await smtpSession(port)
        expect(await c.reply("EHLO test")).toMatch(/^250/)
        expect(await c.reply("MAIL FROM:<a@example.com>")).toMatch(/^250/)
        expect(await c.reply(`RCPT TO:<${org.address}>`)).toMatch(/^250/)
        expect(await c.reply("DATA")).toMatch(/^354/)
        for (let i = 0; i < 4; i++) await new Promise<void>((resolve) => c.socket.write(chunk, () => resolve()))
        const spooling = Date.now() + 5000
        while (readdirSync(join(dir, "spool")).length === 0 && Date.now() < spooling) await sleep(20)
        expect(readdirSync(join(dir, "spool")).length).toBe(1)
        c.socket.destroy()
        const gone = Date.now() + 5000
        while (readdirSync(join(dir, "spool")).length > 0 && Date.now() < gone) await sleep(20)
        expect(readdirSync(join(dir, "spool"))).toEqual([])
      }

      await stopGracefully(svc)
      svc = undefined
      const conn = await openDb(dir, db.url)
      try {
        const rows = await conn.query<{ n: number; quarantined: number; incomplete: number }>(
          `SELECT count(*)::int AS n, count(*) FILTER (WHERE e.parse_error IS NOT NULL)::int AS quarantined,
                  count(*) FILTER (WHERE c.email_id IS NULL OR octet_length(c.raw) <> e.size_bytes)::int AS incomplete
           FROM emails e LEFT JOIN email_contents c ON c.email_id = e.id`
        )
        console.log(`stored: ${rows[0]!.n} emails, ${rows[0]!.quarantined} quarantined with parse_error, ${rows[0]!.incomplete} incomplete`)
        expect(rows[0]!.n).toBe(accepted)
        expect(rows[0]!.incomplete).toBe(0)
      } finally {
        await conn.close()
      }
    } finally {
      if (svc !== undefined) svc.child.kill("SIGKILL")
      await db.drop()
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
