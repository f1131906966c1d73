/**
 * Hostile header names and attachment filenames over real SMTP: headers named like Object's own
 * members are kept verbatim in the email API and the delivered webhook; a filename whose encoded
 * word decodes to CR LF downloads with a safe RFC 6266 `Content-Disposition` and `nosniff`.
 */
import { describe, expect, layer } from "@effect/vitest"
import contentDisposition from "content-disposition"
import { Effect, Layer } from "effect"
import nodemailer from "nodemailer"
import { Provisioning } from "../src/identity/Provisioning.js"
import { TestServer, testService } from "./support/harness.js"
import { eventually, startHooks } from "./support/hooks.js"
import { call } from "./support/http.js"

const Env = Provisioning.Default.pipe(Layer.provideMerge(testService({ DNS_SERVER: "127.0.0.1:9" })))

const sendRaw = (from: string, to: string, raw: string) =>
  Effect.flatMap(TestServer, (server) =>
    Effect.promise(async () => {
      const transport = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
      try {
        return await transport.sendMail({ envelope: { from, to: [to] }, raw })
      } finally {
        transport.close()
      }
    }))

const latestEmail = (apiKey: string, subject: string) =>
  Effect.gen(function*() {
    for (let i = 0; i < 200; i++) {
      const list = yield* call("GET", "/v1/emails", { token: apiKey })
      const found = (list.body.data as Array<{ id: string; subject: string }>).find((e) => e.subject === subject)
      if (found !== undefined) return (yield* call("GET", `/v1/emails/${found.id}`, { token: apiKey })).body.data
      yield* Effect.sleep("50 millis")
    }
    return yield* Effect.die(new Error(`no email with subject ${subject}`))
  })

/** Lower-cased names (the API lower-cases header names) and their values, as pairs: a literal would set `__proto__`. */
const PROTOTYPE_NAMES: ReadonlyArray<readonly [string, string]> = [
  ["constructor", "c-value"],
  ["__proto__", "p-value"],
  ["tostring", "t-value"],
  ["hasownproperty", "h-value"],
  ["valueof", "v-value"]
]

layer(Env, { timeout: 120_000, excludeTestServices: true })("inbound headers and downloads", (it) => {
  describe("header names that are Object members", () => {
    it.scoped("are kept verbatim in GET /v1/emails/{id} and in the webhook payload", () =>
      Effect.gen(function*() {
        const hooks = yield* startHooks
        const p = yield* Provisioning
        const org = yield* p.createOrganization({ name: "Headers", plan: "developer" })
        const { apiKey } = yield* p.issueApiKey(org.id)
        const created = yield* call("POST", "/v1/endpoints", { token: apiKey, body: { url: hooks.url("/h") } })
        expect(created.status).toBe(201)
        const raw = [
          "From: Ann <ann@example.com>",
          `To: ${org.managedInboxAddress}`,
          "Subject: prototype names",
          "constructor: c-value",
          "__proto__: p-value",
          "toString: t-value",
          "hasOwnProperty: h-value",
          "valueOf: v-value",
          "",
          "hello",
          ""
        ].join("\r\n")
        yield* sendRaw("ann@example.com", org.managedInboxAddress, raw)

        const email = yield* latestEmail(apiKey, "prototype names")
        const headers = email.headers as Record<string, unknown>
        for (const [name, value] of PROTOTYPE_NAMES) {
          expect(Object.prototype.hasOwnProperty.call(headers, name), name).toBe(true)
          expect(headers[name]).toBe(value)
        }
        expect(Object.getPrototypeOf(headers)).toBe(Object.prototype)

        const hit = yield* eventually(() => hooks.on("/h")[0], 15_000, "the webhook")
        const delivered = JSON.parse(hit.body).email.headers as Record<string, unknown>
        for (const [name, value] of PROTOTYPE_NAMES) {
          expect(Object.prototype.hasOwnProperty.call(delivered, name), name).toBe(true)
          expect(delivered[name]).toBe(value)
        }
      }))
  })

  describe("attachment downloads", () => {
    it.effect("a filename decoding to CR LF downloads with an RFC 6266 disposition and nosniff", () =>
      Effect.gen(function*() {
        const p = yield* Provisioning
        const org = yield* p.createOrganization({ name: "Downloads", plan: "developer" })
        const { apiKey } = yield* p.issueApiKey(org.id)
        const encoded = "=?UTF-8?Q?evil=0D=0AX-Injected:_1=E2=82=AC=22.txt?="
        const raw = [
          "From: Ann <ann@example.com>",
          `To: ${org.managedInboxAddress}`,
          "Subject: crlf filename",
          "MIME-Version: 1.0",
          "Content-Type: multipart/mixed; boundary=BB",
          "",
          "--BB",
          "Content-Type: text/plain",
          "",
          "see attached",
          "--BB",
          `Content-Type: text/html; name="${encoded}"`,
          `Content-Disposition: attachment; filename="${encoded}"`,
          "",
          "<script>alert(1)</script>",
          "--BB--",
          ""
        ].join("\r\n")
        yield* sendRaw("ann@example.com", org.managedInboxAddress, raw)
        const email = yield* latestEmail(apiKey, "crlf filename")
        expect(email.attachments[0].filename).toBe("evil\r\nX-Injected: 1€\".txt")

        for (const url of [`/v1/emails/${email.id}/attachments/0`, new URL(email.attachments[0].download_url).pathname + new URL(email.attachments[0].download_url).search]) {
          const res = yield* call("GET", url, url.includes("token=") ? {} : { token: apiKey })
          expect(res.status).toBe(200)
          expect(res.text).toBe("<script>alert(1)</script>")
          expect(res.headers.get("x-content-type-options")).toBe("nosniff")
          expect(res.headers.get("x-injected")).toBeNull()
          const disposition = res.headers.get("content-disposition") ?? ""
          expect(disposition).not.toMatch(/[\r\n]/)
          // filename* carries the name (control characters replaced), filename an ISO-8859-1 fallback.
          expect(disposition).toBe(
            "attachment; filename=\"evil__X-Injected: 1?\\\".txt\"; filename*=UTF-8''evil__X-Injected%3A%201%E2%82%AC%22.txt"
          )
          const parsed = contentDisposition.parse(disposition)
          expect(parsed.type).toBe("attachment")
          expect(parsed.parameters["filename"]).toBe("evil__X-Injected: 1€\".txt")
        }

        for (const path of [`/v1/emails/${email.id}/raw`, `/v1/emails/${email.id}/attachments.tar.gz`]) {
          const res = yield* call("GET", path, { token: apiKey })
          expect(res.status).toBe(200)
          expect(res.headers.get("x-content-type-options")).toBe("nosniff")
          expect(contentDisposition.parse(res.headers.get("content-disposition") ?? "").parameters["filename"]).toMatch(
            new RegExp(`^${email.id}`)
          )
        }
      }))
  })
})
