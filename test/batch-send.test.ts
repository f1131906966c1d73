/**
 * `POST /send-mail/batch` over a real SMTP relay: every message validated, checked, counted and
 * relayed on its own; a bad message answers its own `error` (the envelope's error object) and the
 * others go out; an empty batch or one past 100 messages is 400 `validation_error`.
 */
import { describe, expect, layer } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import { Provisioning } from "../src/identity/Provisioning.js"
import { TestServer, testService } from "./support/harness.js"
import { call } from "./support/http.js"
import { startTestRelay, type TestRelay } from "./support/relay.js"
import { dsn } from "./support/reports.js"
import nodemailer from "nodemailer"

class Relay extends Context.Tag("test/Relay")<Relay, TestRelay>() {}

const Env = Provisioning.Default.pipe(
  Layer.provideMerge(Layer.unwrapScoped(Effect.map(startTestRelay, (relay) =>
    testService({ OUTBOUND_SMTP_URL: relay.url, OUTBOUND_TIMEOUT: "2s" }).pipe(Layer.merge(Layer.succeed(Relay, relay))))))
)

let seq = 0
const unique = (label: string) => `${label}-${++seq}-${Math.random().toString(36).slice(2, 7)}`

const newOrg = (plan: "agent" | "developer" | "pro" = "developer") =>
  Effect.gen(function*() {
    const p = yield* Provisioning
    const org = yield* p.createOrganization({ name: "Batcher", plan })
    const key = yield* p.issueApiKey(org.id)
    return { orgId: org.id, token: key.apiKey, inbox: org.managedInboxAddress! }
  })

const batch = (token: string, messages: ReadonlyArray<unknown>) => call("POST", "/v1/send-mail/batch", { token, body: { messages } })

layer(Env, { timeout: 180_000, excludeTestServices: true })("send-mail batch", (it) => {
  describe("a batch", () => {
    it.effect("sends the good messages and answers each bad one with its own error, in order", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const relay = yield* Relay
        const good = (n: number) => ({ to: `${unique(`ok${n}`)}@example.com`, subject: `Batch ${n}`, text: `message ${n}` })
        const messages = [
          good(0),
          { to: "not an address", subject: "bad", text: "x" },
          good(2),
          { from: "someone@elsewhere.example", to: "x@example.com", subject: "foreign sender", text: "x" },
          { to: "y@example.com", subject: "no body" },
          { to: "z@example.com", subject: "extra", text: "x", bogus: true },
          { to: ["a@example.com"], subject: 42, text: "x" },
          good(7),
          { ...good(8), send_at: new Date(Date.now() + 3_600_000).toISOString() }
        ]
        const r = yield* batch(org.token, messages)
        expect(r.status, r.text).toBe(200)
        const results = r.body.data.results as Array<{ index: number; email?: { id: string; status: string; to: Array<string> }; error?: { code: string; message: string; details?: Record<string, unknown> } }>
        expect(results.map((x) => x.index)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8])
        for (const i of [0, 2, 7]) {
          expect(results[i]!.email, JSON.stringify(results[i])).toMatchObject({ status: "sent", to: [(messages[i] as { to: string }).to] })
          expect(results[i]!.error).toBeUndefined()
          expect(relay.messages.some((m) => m.to.includes((messages[i] as { to: string }).to))).toBe(true)
        }
        expect(results[8]!.email?.status).toBe("scheduled")
        expect(results[1]!.error).toMatchObject({ code: "validation_error" })
        expect(results[1]!.error!.message).toMatch(/^to: /)
        expect(results[3]!.error).toMatchObject({ code: "cannot_send_from_domain" })
        expect(results[3]!.error!.details?.["valid_senders"]).toEqual([org.inbox])
        expect(results[4]!.error).toMatchObject({ code: "validation_error", message: "text: one of text and html is required" })
        expect(results[5]!.error!.code).toBe("validation_error")
        expect(results[5]!.error!.message).toContain("bogus")
        expect(results[6]!.error).toMatchObject({ code: "validation_error", details: { issues: [{ field: "subject" }] } })
        // Each sent message is a sent email of its own.
        const got = yield* call("GET", `/v1/sent-emails/${results[2]!.email!.id}`, { token: org.token })
        expect(got.status).toBe(200)
        expect(got.body.data.text).toBe("message 2")
      }))

    it.effect("refuses a suppressed recipient in its own result", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const relay = yield* Relay
        const server = yield* TestServer
        const gone = `${unique("gone")}@example.com`
        const first = yield* call("POST", "/v1/send-mail", { token: org.token, body: { to: gone, subject: "first", text: "x" } })
        expect(first.status, first.text).toBe(201)
        const returnPath = relay.messages.find((m) => m.to.includes(gone))!.from
        yield* Effect.promise(() =>
          nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true }).sendMail({
            envelope: { from: "", to: [returnPath] },
            raw: dsn({ to: returnPath, recipient: gone, action: "failed", status: "5.1.1", diagnostic: "550 unknown", messageId: first.body.data.message_id })
          }))
        const r = yield* batch(org.token, [{ to: gone, subject: "again", text: "x" }, { to: `${unique("fine")}@example.com`, subject: "fine", text: "x" }])
        expect(r.status).toBe(200)
        expect(r.body.data.results[0]).toMatchObject({ index: 0, error: { code: "recipient_suppressed", details: { addresses: [gone] } } })
        expect(r.body.data.results[1].email.status).toBe("sent")
      }))
  })

  describe("limits", () => {
    it.effect("an empty batch, more than 100 messages, or no list is 400 validation_error", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const empty = yield* batch(org.token, [])
        expect(empty.status).toBe(400)
        expect(empty.body.error.code).toBe("validation_error")
        const many = yield* batch(org.token, Array.from({ length: 101 }, (_, i) => ({ to: `m${i}@example.com`, subject: "x", text: "x" })))
        expect(many.status).toBe(400)
        expect(many.body.error.code).toBe("validation_error")
        expect(many.body.error.message).toContain("messages")
        // Each message must at least be an object: anything else is the whole request's 400.
        const notObject = yield* batch(org.token, [{ to: "a@example.com", subject: "x", text: "x" }, "not even an object"])
        expect(notObject.status).toBe(400)
        expect(notObject.body.error.message).toContain("messages[1]")
        const none = yield* call("POST", "/v1/send-mail/batch", { token: org.token, body: { message: [] } })
        expect(none.status).toBe(400)
        expect((yield* call("POST", "/v1/send-mail/batch", { body: { messages: [] } })).status).toBe(401)
      }))

    it.effect("100 messages are accepted, each sent and counted as one send: past the quota the rest answer rate_limited", () =>
      Effect.gen(function*() {
        // The developer plan sends 100 an hour.
        const org = yield* newOrg("developer")
        const messages = Array.from({ length: 100 }, (_, i) => ({ to: `${unique(`h${i}`)}@example.com`, subject: `hundred ${i}`, text: "x" }))
        const r = yield* batch(org.token, messages)
        expect(r.status, r.text).toBe(200)
        const results = r.body.data.results as Array<{ index: number; email?: { status: string } }>
        expect(results.length).toBe(100)
        expect(results.every((x, i) => x.index === i && x.email?.status === "sent")).toBe(true)
        const status = yield* call("GET", "/v1/outbound/status", { token: org.token })
        expect(status.body.data.usage.last_hour).toBe(100)
        const over = yield* batch(org.token, [{ to: "late@example.com", subject: "late", text: "x" }, { to: "later@example.com", subject: "later", text: "x" }])
        expect(over.status).toBe(200)
        expect(over.body.data.results.map((x: { error?: { code: string } }) => x.error?.code)).toEqual(["rate_limited", "rate_limited"])
        expect(over.body.data.results[0].error.details).toMatchObject({ limit: 100, window: "hour" })
      }))
  })
})
