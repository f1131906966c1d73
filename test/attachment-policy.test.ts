/**
 * The account's attachment policy: set with PATCH /v1/account and shown by GET; types judged from
 * the content's bytes, so a Windows program renamed `.pdf` is still refused at DATA with `552 5.3.4`
 * (over real SMTP, nothing stored); `quarantine` holds mail back instead; invalid policies are 400.
 */
import { expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import nodemailer, { type SendMailOptions } from "nodemailer"
import { Provisioning } from "../src/identity/Provisioning.js"
import { TestServer, testService } from "./support/harness.js"
import { call } from "./support/http.js"

const Env = Provisioning.Default.pipe(Layer.provideMerge(testService({ DNS_SERVER: "127.0.0.1:9" })))

/** The SMTP answer to the message: the `250` line, or the refusal's code and text. */
const mailIn = (message: SendMailOptions) =>
  Effect.flatMap(TestServer, (server) =>
    Effect.promise(async () => {
      const t = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
      try {
        const info = await t.sendMail(message)
        return { code: 250, response: String(info.response), id: /queued as ([0-9a-f-]{36})/.exec(String(info.response))?.[1] }
      } catch (e) {
        const err = e as { responseCode?: number; response?: string }
        return { code: err.responseCode ?? 0, response: err.response ?? String(e), id: undefined }
      } finally {
        t.close()
      }
    }))

const newOrg = (name: string) =>
  Effect.gen(function*() {
    const p = yield* Provisioning
    const org = yield* p.createOrganization({ name, plan: "developer" })
    return { key: (yield* p.issueApiKey(org.id)).apiKey, address: org.managedInboxAddress! }
  })

const PROGRAM = Buffer.concat([Buffer.from("MZ\x90\x00\x03\x00\x00\x00"), Buffer.alloc(120, 0x41)])
const PDF = Buffer.from("%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n")

layer(Env, { timeout: 120_000, excludeTestServices: true })("attachment policy", (it) => {
  it.effect("is null until set, set and shown, removed with null; invalid policies are 400", () =>
    Effect.gen(function*() {
      const org = yield* newOrg("Policy")
      expect((yield* call("GET", "/v1/account", { token: org.key })).body.data.attachment_policy).toBeNull()
      const policy = { max_bytes: 1000000, max_count: 3, blocked_types: ["executable", "archive"], action: "reject" }
      const set = yield* call("PATCH", "/v1/account", { token: org.key, body: { attachment_policy: policy } })
      expect(set.status, set.text).toBe(200)
      expect(set.body.data.attachment_policy).toEqual(policy)
      expect((yield* call("GET", "/v1/account", { token: org.key })).body.data.attachment_policy).toEqual(policy)
      for (const bad of [
        { action: "bounce" },
        { max_bytes: 0, action: "reject" },
        { max_count: -1, action: "quarantine" },
        { blocked_types: [""], action: "reject" },
        { max_bytes: 10 },
        { action: "reject", extra: true },
        "reject"
      ]) {
        const r = yield* call("PATCH", "/v1/account", { token: org.key, body: { attachment_policy: bad } })
        expect(r.status, JSON.stringify(bad)).toBe(400)
        expect(r.body.error.code).toBe("validation_error")
      }
      const cleared = yield* call("PATCH", "/v1/account", { token: org.key, body: { attachment_policy: null } })
      expect(cleared.status).toBe(200)
      expect((yield* call("GET", "/v1/account", { token: org.key })).body.data.attachment_policy).toBeNull()
    }))

  it.effect("reject: an executable, also renamed invoice.pdf, is refused at DATA with 552 5.3.4; a real PDF passes", () =>
    Effect.gen(function*() {
      const org = yield* newOrg("Rejecting")
      const patch = yield* call("PATCH", "/v1/account", {
        token: org.key,
        body: { attachment_policy: { blocked_types: ["executable"], action: "reject" } }
      })
      expect(patch.status, patch.text).toBe(200)
      for (const filename of ["setup.exe", "invoice.pdf"]) {
        const r = yield* mailIn({
          from: "x@evil.example",
          to: org.address,
          subject: filename,
          text: "see attached",
          attachments: [{ filename, content: PROGRAM, contentType: "application/pdf" }]
        })
        expect(r.code, r.response).toBe(552)
        expect(r.response).toMatch(/^552 5\.3\.4 /)
      }
      const fine = yield* mailIn({
        from: "ann@example.org",
        to: org.address,
        subject: "real pdf",
        text: "see attached",
        attachments: [{ filename: "invoice.pdf", content: PDF }]
      })
      expect(fine.code, fine.response).toBe(250)
      const list = yield* call("GET", "/v1/emails", { token: org.key })
      expect(list.body.data.map((e: { subject: string }) => e.subject)).toEqual(["real pdf"])
    }))

  it.effect("quarantine: limits on count, size and allowed types hold the mail back instead", () =>
    Effect.gen(function*() {
      const org = yield* newOrg("Holding")
      expect((yield* call("PATCH", "/v1/account", {
        token: org.key,
        body: { attachment_policy: { max_count: 1, max_bytes: 2000, allowed_types: ["application/pdf", "image/*"], action: "quarantine" } }
      })).status).toBe(200)
      const send = (subject: string, attachments: SendMailOptions["attachments"]) =>
        mailIn({ from: "ann@example.org", to: org.address, subject, text: "x", attachments })
      const ok = yield* send("one pdf", [{ filename: "a.pdf", content: PDF }])
      const two = yield* send("two", [{ filename: "a.pdf", content: PDF }, { filename: "b.pdf", content: PDF }])
      const big = yield* send("big", [{ filename: "a.pdf", content: Buffer.concat([PDF, Buffer.alloc(3000, 0x20)]) }])
      const zip = yield* send("zip named pdf", [{ filename: "a.pdf", content: Buffer.from("PK\x03\x04\x14\x00\x00\x00readme.txt") }])
      for (const r of [ok, two, big, zip]) expect(r.code, r.response).toBe(250)
      const status = (id: string | undefined) => Effect.map(call("GET", `/v1/emails/${id}`, { token: org.key }), (r) => r.body.data.status)
      expect(yield* status(ok.id)).toBe("accepted")
      expect(yield* status(two.id)).toBe("quarantined")
      expect(yield* status(big.id)).toBe("quarantined")
      expect(yield* status(zip.id)).toBe("quarantined")
    }))
})
