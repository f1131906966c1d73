/**
 * Inbound mail over real SMTP (nodemailer → the service's smtp-server), stored in PostgreSQL and
 * read back through the Emails API, downloads and signed tokens.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { createGunzip } from "node:zlib"
import nodemailer, { type SendMailOptions } from "nodemailer"
import { Readable } from "node:stream"
import { extract } from "tar-stream"
import { Provisioning } from "../src/identity/Provisioning.js"
import { authenticityInput } from "../src/inbound/Authenticity.js"
import { makeManualClock, TestServer, testDatabase, testServerOn } from "./support/harness.js"
import { call } from "./support/http.js"

const clock = makeManualClock()
const Env = Provisioning.Default.pipe(
  Layer.provideMerge(testServerOn().pipe(Layer.provide(clock.layer), Layer.provideMerge(testDatabase({ DNS_SERVER: "127.0.0.1:9" }))))
)

const newOrg = Effect.gen(function*() {
  const p = yield* Provisioning
  const org = yield* p.createOrganization({ name: "Inbound", plan: "developer" })
  const key = yield* p.issueApiKey(org.id)
  return { orgId: org.id, apiKey: key.apiKey, address: org.managedInboxAddress }
})

interface SendResult {
  readonly ok: boolean
  readonly response: string
  readonly code: number | undefined
  readonly rejected: ReadonlyArray<string>
}

const send = (message: SendMailOptions) =>
  Effect.flatMap(TestServer, (server) =>
    Effect.promise(async (): Promise<SendResult> => {
      const transport = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
      try {
        const info = await transport.sendMail(message)
        return { ok: true, response: info.response, code: undefined, rejected: info.rejected.map(String) }
      } catch (e) {
        const err = e as { response?: string; responseCode?: number; rejected?: Array<string> }
        return { ok: false, response: err.response ?? String(e), code: err.responseCode, rejected: err.rejected ?? [] }
      } finally {
        transport.close()
      }
    }))

const untar = (gz: Buffer) =>
  Effect.promise(async () => {
    const files: Record<string, string> = {}
    const ex = extract()
    const done = new Promise<void>((resolve, reject) => {
      ex.on("entry", (header, stream, next) => {
        const chunks: Array<Buffer> = []
        stream.on("data", (c: unknown) => chunks.push(c as Buffer))
        stream.on("end", () => {
          files[header.name] = Buffer.concat(chunks).toString("utf8")
          next()
        })
      })
      ex.on("finish", resolve)
      ex.on("error", reject)
    })
    Readable.from(gz).pipe(createGunzip()).pipe(ex)
    await done
    return files
  })

const rawBytes = (url: string, token?: string) =>
  Effect.promise(async () => {
    const res = await fetch(url, token ? { headers: { authorization: `Bearer ${token}` } } : {})
    return { status: res.status, body: Buffer.from(await res.arrayBuffer()), type: res.headers.get("content-type") }
  })

layer(Env, { timeout: 120_000, excludeTestServices: true })("inbound", (it) => {
  describe("SMTP ingestion", () => {
    it.effect("accepts mail for a managed inbox, stores it and lists it through the API", () =>
      Effect.gen(function*() {
        const org = yield* newOrg
        const sent = yield* send({
          from: "Alice Example <alice@example.com>",
          to: org.address,
          cc: "bob@example.org",
          subject: "Hello Mailroom ✓",
          text: "plain body",
          html: "<p>html body</p>",
          messageId: "<m1@example.com>",
          inReplyTo: "<m0@example.com>",
          references: ["<m-1@example.com>", "<m0@example.com>"],
          headers: { "X-Custom": "yes" },
          attachments: [{ filename: "note.txt", content: "attached text" }, { filename: "data.json", content: "{\"a\":1}" }]
        })
        expect(sent.ok).toBe(true)
        expect(sent.response).toMatch(/^250 /)
        const list = yield* call("GET", "/v1/emails", { token: org.apiKey })
        expect(list.status).toBe(200)
        expect(list.body.meta).toEqual({ total: 1, limit: 50, cursor: null })
        const summary = list.body.data[0]
        expect(summary).toMatchObject({
          from: "alice@example.com",
          from_name: "Alice Example",
          recipient: org.address,
          subject: "Hello Mailroom ✓",
          message_id: "<m1@example.com>",
          event_type: "email.received",
          status: "accepted",
          attachment_count: 2,
          to: [org.address],
          cc: ["bob@example.org"]
        })
        const one = yield* call("GET", `/v1/emails/${summary.id}`, { token: org.apiKey })
        expect(one.status).toBe(200)
        const email = one.body.data
        expect(email.text.trim()).toBe("plain body")
        expect(email.html).toContain("<p>html body</p>")
        expect(email.in_reply_to).toBe("<m0@example.com>")
        expect(email.references).toEqual(["<m-1@example.com>", "<m0@example.com>"])
        expect(email.headers["x-custom"]).toBe("yes")
        expect(email.auth).toEqual({ spf: expect.any(String), dkim: "none", dmarc: expect.any(String) })
        expect(email.attachments.map((a: { filename: string; content_type: string }) => [a.filename, a.content_type])).toEqual([
          ["note.txt", "text/plain"],
          ["data.json", "application/json"]
        ])
        // Signed links work without a credential.
        const raw = yield* rawBytes(email.raw_url)
        expect(raw.status).toBe(200)
        expect(raw.type).toContain("message/rfc822")
        expect(raw.body.toString("utf8")).toContain("Subject: =?UTF-8?")
        expect(raw.body.length).toBe(email.size_bytes)
        const tgz = yield* rawBytes(email.attachments_url)
        expect(tgz.status).toBe(200)
        const files = yield* untar(tgz.body)
        expect(files).toEqual({ "000-note.txt": "attached text", "001-data.json": "{\"a\":1}" })
        const single = yield* rawBytes(email.attachments[1].download_url)
        expect(single.body.toString()).toBe("{\"a\":1}")
      }))

    it.effect("refuses unknown recipients at RCPT time and accepts the known ones", () =>
      Effect.gen(function*() {
        const org = yield* newOrg
        const all = yield* send({ from: "a@example.com", to: "nobody@agents.localhost", subject: "x", text: "x" })
        expect(all.ok).toBe(false)
        expect(all.code).toBe(550)
        const mixed = yield* send({
          from: "a@example.com",
          to: ["nobody@agents.localhost", org.address],
          subject: "mixed",
          text: "x"
        })
        expect(mixed.ok).toBe(true)
        expect(mixed.rejected).toEqual(["nobody@agents.localhost"])
        const list = yield* call("GET", "/v1/emails", { token: org.apiKey })
        expect(list.body.data.map((e: { subject: string }) => e.subject)).toEqual(["mixed"])
      }))

    it.effect("concurrent transactions are committed together yet each 250 names its own stored copies", () =>
      Effect.gen(function*() {
        const a = yield* newOrg
        const b = yield* newOrg
        const results = yield* Effect.all(
          Array.from({ length: 20 }, (_, i) =>
            send({ from: "burst@example.com", to: i % 5 === 0 ? [a.address, b.address] : a.address, subject: `burst ${i}`, text: `body ${i}` })),
          { concurrency: "unbounded" }
        )
        expect(results.every((r) => r.ok && /^250 /.test(r.response))).toBe(true)
        const queued = results.map((r) => r.response.replace(/^.*queued as /, "").split(","))
        expect(queued.map((ids) => ids.length)).toEqual(Array.from({ length: 20 }, (_, i) => i % 5 === 0 ? 2 : 1))
        const listA = yield* call("GET", "/v1/emails?limit=100", { token: a.apiKey })
        const listB = yield* call("GET", "/v1/emails?limit=100", { token: b.apiKey })
        expect(listA.body.meta.total).toBe(20)
        expect(listB.body.meta.total).toBe(4)
        const stored = new Map<string, string>(
          [...listA.body.data, ...listB.body.data].map((e: { id: string; subject: string }) => [e.id, e.subject])
        )
        queued.forEach((ids, i) => ids.forEach((id) => expect(stored.get(id)).toBe(`burst ${i}`)))
        const one = yield* call("GET", `/v1/emails/${queued[7]![0]}`, { token: a.apiKey })
        expect(one.body.data.text.trim()).toBe("body 7")
      }))

    it.effect("authenticity checks read the header block only when no DKIM signature needs the body", () =>
      Effect.sync(() => {
        const plain = Buffer.from("From: a@example.com\r\nSubject: x\r\n\r\nbody\r\n")
        expect(authenticityInput(plain).toString()).toBe("From: a@example.com\r\nSubject: x\r\n\r\n")
        const signed = Buffer.from("From: a@example.com\r\nDKIM-Signature: v=1; a=rsa-sha256;\r\n d=example.com\r\n\r\nbody\r\n")
        expect(authenticityInput(signed)).toBe(signed)
        const headerOnly = Buffer.from("From: a@example.com\r\n")
        expect(authenticityInput(headerOnly)).toBe(headerOnly)
      }))

    it.effect("rejects a message above the account's spam threshold and records it as rejected", () =>
      Effect.gen(function*() {
        const org = yield* newOrg
        const sql = yield* SqlClient.SqlClient
        yield* sql`UPDATE organizations SET spam_threshold = 5 WHERE id = ${org.orgId}`
        const spam = yield* send({
          from: "spammer@example.com",
          to: org.address,
          subject: "WIN A PRIZE NOW",
          text: "you have won",
          headers: { "X-Spam-Score": "9" }
        })
        expect(spam.ok).toBe(false)
        expect(spam.code).toBe(550)
        const ham = yield* send({ from: "friend@example.com", to: org.address, subject: "lunch?", text: "at noon" })
        expect(ham.ok).toBe(true)
        const rejected = yield* call("GET", "/v1/emails?status=rejected", { token: org.apiKey })
        expect(rejected.body.data).toHaveLength(1)
        expect(rejected.body.data[0].status).toBe("rejected")
        expect(rejected.body.data[0].spam_score).toBeGreaterThan(5)
        expect(rejected.body.data[0].rejection_reason).toContain("UPSTREAM_SCORE")
      }))

    it.effect("refuses a message over the size limit while streaming", () =>
      Effect.gen(function*() {
        const org = yield* newOrg
        const big = yield* send({ from: "a@example.com", to: org.address, subject: "big", text: "x".repeat(31 * 1024 * 1024) })
        expect(big.ok).toBe(false)
        expect(big.code).toBe(552)
        const list = yield* call("GET", "/v1/emails", { token: org.apiKey })
        expect(list.body.meta.total).toBe(0)
      }))
  })

  describe("emails API", () => {
    it.effect("paginates with an opaque cursor, filters, isolates organizations and deletes", () =>
      Effect.gen(function*() {
        const org = yield* newOrg
        const other = yield* newOrg
        for (let i = 0; i < 5; i++) {
          const r = yield* send({ from: `s${i % 2}@example.com`, to: org.address, subject: `n${i}`, text: `${i}` })
          expect(r.ok).toBe(true)
        }
        const page1 = yield* call("GET", "/v1/emails?limit=2", { token: org.apiKey })
        expect(page1.body.data.map((e: { subject: string }) => e.subject)).toEqual(["n4", "n3"])
        expect(page1.body.meta.total).toBe(5)
        expect(page1.body.meta.limit).toBe(2)
        const page2 = yield* call("GET", `/v1/emails?limit=2&cursor=${page1.body.meta.cursor}`, { token: org.apiKey })
        expect(page2.body.data.map((e: { subject: string }) => e.subject)).toEqual(["n2", "n1"])
        const page3 = yield* call("GET", `/v1/emails?limit=2&cursor=${page2.body.meta.cursor}`, { token: org.apiKey })
        expect(page3.body.data.map((e: { subject: string }) => e.subject)).toEqual(["n0"])
        expect(page3.body.meta.cursor).toBeNull()
        const bySender = yield* call("GET", "/v1/emails?sender=s1@example.com", { token: org.apiKey })
        expect(bySender.body.meta.total).toBe(2)
        const bad = yield* call("GET", "/v1/emails?limit=0", { token: org.apiKey })
        expect(bad.status).toBe(400)
        expect(bad.body.error.code).toBe("validation_error")
        expect(bad.body.error.message).toMatch(/^limit: /)
        const badCursor = yield* call("GET", "/v1/emails?cursor=garbage", { token: org.apiKey })
        expect(badCursor.status).toBe(400)
        expect(badCursor.body.error.message).toMatch(/^cursor: /)
        const id = page1.body.data[0].id
        const badId = yield* call("GET", "/v1/emails/not-a-uuid", { token: org.apiKey })
        expect(badId.status).toBe(400)
        expect(badId.body.error.message).toMatch(/^id: /)
        const foreign = yield* call("GET", `/v1/emails/${id}`, { token: other.apiKey })
        expect(foreign.status).toBe(404)
        expect(foreign.body.error.code).toBe("not_found")
        const foreignRaw = yield* call("GET", `/v1/emails/${id}/raw`, { token: other.apiKey })
        expect(foreignRaw.status).toBe(404)
        const del = yield* call("DELETE", `/v1/emails/${id}`, { token: org.apiKey })
        expect(del.status).toBe(200)
        expect(del.body.data.id).toBe(id)
        expect((yield* call("GET", `/v1/emails/${id}`, { token: org.apiKey })).status).toBe(404)
        expect((yield* call("DELETE", `/v1/emails/${id}`, { token: org.apiKey })).status).toBe(404)
      }))

    it.effect("download tokens: bearer works, tampered and cross-kind are invalid, 24 h later expired", () =>
      Effect.gen(function*() {
        const org = yield* newOrg
        yield* send({ from: "a@example.com", to: org.address, subject: "tok", text: "t", attachments: [{ filename: "a.txt", content: "A" }] })
        const list = yield* call("GET", "/v1/emails", { token: org.apiKey })
        const id = list.body.data[0].id
        const email = (yield* call("GET", `/v1/emails/${id}`, { token: org.apiKey })).body.data
        const server = yield* TestServer
        const rawPath = `/v1/emails/${id}/raw`
        const bearer = yield* call("GET", rawPath, { token: org.apiKey })
        expect(bearer.status).toBe(200)
        const none = yield* call("GET", rawPath)
        expect(none.status).toBe(401)
        expect(none.body.error.code).toBe("unauthorized")
        const token = new URL(email.raw_url).searchParams.get("token")!
        const tampered = `${token.slice(0, -2)}${token.endsWith("A") ? "B" : "A"}A`
        const bad = yield* call("GET", `${rawPath}?token=${tampered}`)
        expect(bad.status).toBe(401)
        expect(bad.body.error.code).toBe("download_token_invalid")
        // A raw token does not open the attachments, nor another email.
        const crossKind = yield* call("GET", `/v1/emails/${id}/attachments.tar.gz?token=${token}`)
        expect(crossKind.body.error.code).toBe("download_token_invalid")
        const otherId = "00000000-0000-4000-8000-000000000000"
        const crossEmail = yield* call("GET", `/v1/emails/${otherId}/raw?token=${token}`)
        expect(crossEmail.body.error.code).toBe("download_token_invalid")
        expect(email.raw_url.startsWith(`${server.baseUrl}/v1/emails/${id}/raw?token=`)).toBe(true)
        clock.advance(24 * 3600 * 1000 + 5_000)
        try {
          const expired = yield* call("GET", `${rawPath}?token=${token}`)
          expect(expired.status).toBe(401)
          expect(expired.body.error.code).toBe("download_token_expired")
          expect(expired.body.error.details.remediation).toContain("Authorization: Bearer")
          const stillBearer = yield* call("GET", rawPath, { token: org.apiKey })
          expect(stillBearer.status).toBe(200)
        } finally {
          clock.advance(-(24 * 3600 * 1000 + 5_000))
        }

      }))
  })
})
