/**
 * Event classification on real-shaped machine mail (test/support/mailSamples.ts): `classify()` on
 * the parsed samples, and end to end, each raw sample sent through real SMTP (nodemailer's raw +
 * envelope) to a managed inbox and read back through GET /v1/emails.
 */
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import nodemailer from "nodemailer"
import { Provisioning } from "../src/identity/Provisioning.js"
import { classify } from "../src/inbound/Classify.js"
import { parseEmail } from "../src/mail/Parse.js"
import { TestServer, testService } from "./support/harness.js"
import { call } from "./support/http.js"
import { samples } from "./support/mailSamples.js"

// Port 9 on loopback answers nothing useful: SPF/DKIM/DMARC lookups fail at once (temperror/none).
const Env = Provisioning.Default.pipe(Layer.provideMerge(testService({ DNS_SERVER: "127.0.0.1:9" })))

const topMessageId = (raw: string) => /^Message-I[dD]:\s*(<[^>]+>)/m.exec(raw.slice(0, raw.search(/\r\n\r\n/)))?.[1]

const sendRaw = (envelopeFrom: string, to: string, raw: string) =>
  Effect.flatMap(TestServer, (server) =>
    Effect.promise(async () => {
      const transport = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
      try {
        return await transport.sendMail({ envelope: { from: envelopeFrom, to: [to] }, raw })
      } finally {
        transport.close()
      }
    }))

layer(Env, { timeout: 120_000, excludeTestServices: true })("classify", (it) => {
  describe("classify() on parsed samples", () => {
    for (const sample of samples("reports@acme.test")) {
      it.effect(`${sample.name} → ${sample.expected}`, () =>
        Effect.promise(async () => {
          const raw = Buffer.from(sample.raw)
          const parsed = await parseEmail(raw)
          expect(classify(parsed, raw)).toBe(sample.expected)
        }))
    }

    it.effect("every sample has its own top-level Message-ID (the end-to-end test matches on it)", () =>
      Effect.sync(() => {
        const ids = samples("x@acme.test").map((s) => topMessageId(s.raw))
        expect(ids.every((id) => id !== undefined)).toBe(true)
        expect(new Set(ids).size).toBe(ids.length)
      }))
  })

  describe("end to end over SMTP", () => {
    it.effect("each sample sent to a managed inbox is stored with its event_type and filterable by it", () =>
      Effect.gen(function*() {
        const p = yield* Provisioning
        const org = yield* p.createOrganization({ name: "Classify", plan: "developer" })
        const key = yield* p.issueApiKey(org.id)
        const address = org.managedInboxAddress as string
        const all = samples(address)
        for (const s of all) {
          const info = yield* sendRaw(s.envelopeFrom, address, s.raw)
          expect(info.accepted).toEqual([address])
          expect(info.response).toMatch(/^250 /)
        }
        const list = yield* call("GET", "/v1/emails?limit=100", { token: key.apiKey })
        expect(list.status).toBe(200)
        expect(list.body.meta.total).toBe(all.length)
        const byId = new Map<string, { event_type: string; envelope_from: string | null }>(
          list.body.data.map((e: { message_id: string; event_type: string; envelope_from: string | null }) => [e.message_id, e])
        )
        for (const s of all) {
          const stored = byId.get(topMessageId(s.raw)!)
          expect([s.name, stored?.event_type]).toEqual([s.name, s.expected])
        }
        // Null-sender bounces keep an empty envelope sender.
        expect(byId.get("<20261120091407.5E6F7A8B9C@mx.example.net>")?.envelope_from ?? null).toBeNull()

        for (const type of ["email.bounced", "email.tls_report", "email.dmarc_report", "email.dmarc_failure", "email.received"]) {
          const filtered = yield* call("GET", `/v1/emails?limit=100&event_type=${type}`, { token: key.apiKey })
          expect(filtered.status).toBe(200)
          expect(filtered.body.data.map((e: { message_id: string }) => e.message_id).sort()).toEqual(
            all.filter((s) => s.expected === type).map((s) => topMessageId(s.raw)).sort()
          )
        }
      }))
  })
})
