/**
 * The OpenAPI document's `webhooks` section describes every event the service emits: real deliveries
 * of each type (mail and machine mail over SMTP, a wake fired to a function, an x402 payment that
 * fails and one that settles through a facilitator) are validated against the schema published in
 * the served `/v1/openapi.json`, and every event type the code emits is documented there.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Ajv } from "ajv"
import { Context, Effect, Layer } from "effect"
import { readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import nodemailer from "nodemailer"
import { generatePrivateKey } from "viem/accounts"
import { Provisioning } from "../src/identity/Provisioning.js"
import { EVENTS } from "../src/webhooks/Events.js"
import { TestServer, testServerOn, testDatabase } from "./support/harness.js"
import { eventually } from "./support/hooks.js"
import { call } from "./support/http.js"
import { samples } from "./support/mailSamples.js"
import { addressOf, type FacilitatorStub, grantPayments, type Requirements, signPayment, startFacilitatorStub } from "./support/payments.js"
import { startReceiver } from "./support/receiver.js"
import { arf, dsn } from "./support/reports.js"
import { Verp } from "../src/mail/Verp.js"

class Stub extends Context.Tag("test/FacilitatorStub")<Stub, FacilitatorStub>() {}

const Env = Layer.unwrapScoped(Effect.gen(function*() {
  const stub = yield* Effect.acquireRelease(Effect.promise(startFacilitatorStub), (s) => Effect.sync(s.close))
  const db = testDatabase({ X402_FACILITATOR_URL: stub.url, DELIVERY_RETRY_DELAYS: "200ms", DELIVERY_TIMEOUT: "2s", DNS_SERVER: "127.0.0.1:9" })
  return Layer.mergeAll(Provisioning.Default, testServerOn()).pipe(Layer.provideMerge(db), Layer.merge(Layer.succeed(Stub, stub)))
}))

const FUNCTION_CODE = `export default { async fetch(request, env) { return new Response("ok") } }`

const newOrg = (name: string) =>
  Effect.gen(function*() {
    const p = yield* Provisioning
    const org = yield* p.createOrganization({ name, plan: "developer" })
    const key = yield* p.issueApiKey(org.id)
    yield* grantPayments(org.id)
    return { orgId: org.id, key: key.apiKey, address: org.managedInboxAddress! }
  })

const sendRaw = (envelopeFrom: string, to: string, raw: string) =>
  Effect.flatMap(TestServer, (server) =>
    Effect.promise(() =>
      nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
        .sendMail({ envelope: { from: envelopeFrom, to: [to] }, raw })
    ))

layer(Env, { timeout: 240_000, excludeTestServices: true })("webhook events", (it) => {
  it.scoped("a real delivery of every event type fits the schema the OpenAPI document publishes for it", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const receiver = yield* startReceiver
      const org = yield* newOrg("Events doc")
      const payee = yield* newOrg("Payee")
      expect((yield* call("POST", "/v1/endpoints", { token: org.key, body: { url: receiver.url("/all") } })).status).toBe(201)

      // Mail and machine mail over SMTP: email.received, email.bounced, the reports.
      for (const s of samples(org.address)) yield* sendRaw(s.envelopeFrom, org.address, s.raw)
      yield* sendRaw("ann@example.com", org.address, ["From: ann@example.com", `To: ${org.address}`, "Subject: plain", "Message-ID: <plain-1@example.com>", "", "hello"].join("\r\n"))

      // A wake fired to a function.
      const fn = yield* call("POST", "/v1/functions", { token: org.key, body: { name: "woken", code: FUNCTION_CODE } })
      expect(fn.status, fn.text).toBe(201)
      const wake = yield* call("POST", "/v1/wakes", { token: org.key, body: { function_id: fn.body.data.id, command: { type: "ping", payload: { n: 1 } }, in: "1h" } })
      expect(wake.status, wake.text).toBe(201)
      expect((yield* call("POST", `/v1/wakes/${wake.body.data.id}/run`, { token: org.key })).status).toBe(200)

      // A function replying to one message past the loop guard (5 in a row): send.loop_detected.
      let plain: { id: string } | undefined
      for (let i = 0; i < 200 && plain === undefined; i++) {
        const list = yield* call("GET", "/v1/emails?limit=100", { token: org.key })
        plain = list.body.data.find((e: { subject: string | null }) => e.subject === "plain")
        if (plain === undefined) yield* Effect.sleep("100 millis")
      }
      const looper = yield* call("POST", "/v1/functions", {
        token: org.key,
        body: {
          name: "looper",
          code: `export default { async fetch(request, env) {
            const { email_id } = await request.json();
            const statuses = [];
            for (let i = 0; i < 6; i++) {
              const r = await env.MAILROOM.fetch("/v1/emails/" + email_id + "/reply", {
                method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ text: "again " + i })
              });
              statuses.push(r.status);
            }
            return Response.json(statuses);
          } }`
        }
      })
      expect(looper.status, looper.text).toBe(201)
      const looped = yield* call("POST", `/v1/functions/${looper.body.data.id}/invoke`, { token: org.key, body: { event: { email_id: plain!.id } } })
      expect(JSON.parse(looped.body.data.response_body)).toEqual([201, 201, 201, 201, 201, 429])

      // Reports returned to a sent email's return path (email.sent came with the replies above):
      // a delay, a hard bounce and a complaint.
      const sentList = yield* call("GET", "/v1/sent-emails?limit=1", { token: org.key })
      const sentOne = sentList.body.data[0] as { id: string; message_id: string; to: Array<string> }
      const returnPath = yield* Effect.map(Verp, (v) => v.returnPath(sentOne.id)).pipe(Effect.provide(Verp.Default))
      const rcpt = /<([^>]+)>/.exec(sentOne.to[0]!)?.[1] ?? sentOne.to[0]!
      for (const action of ["delayed", "failed"]) {
        yield* sendRaw("", returnPath, dsn({ to: returnPath, recipient: rcpt, action, status: action === "failed" ? "5.1.1" : "4.4.7", diagnostic: "smtp", messageId: sentOne.message_id }))
      }
      yield* sendRaw("", returnPath, arf({ to: returnPath, recipient: rcpt, messageId: sentOne.message_id }))

      // A payment that fails verification and one that settles (the payer is `org`).
      const wallet = addressOf(generatePrivateKey())
      expect((yield* call("PUT", "/v1/payments/payout-addresses/eip155:84532", { token: payee.key, body: { address: wallet } })).status).toBe(200)
      const challenge = () =>
        Effect.map(call("POST", "/v1/payments/challenges", { token: payee.key, body: { amount: "0.5" } }), (r) => {
          expect(r.status, r.text).toBe(201)
          return r.body.data as { id: string; payment_required: { accepts: Array<Requirements> } }
        })
      const bad = yield* challenge()
      const refused = yield* call("POST", `/v1/payments/challenges/${bad.id}/pay`, { token: org.key, body: { payment_payload: { x402Version: 2 } } })
      expect(refused.status).toBe(422)
      const good = yield* challenge()
      const payload = yield* Effect.promise(() => signPayment(generatePrivateKey(), good.payment_required.accepts[0]!, Date.now() / 1000))
      const paid = yield* call("POST", `/v1/payments/challenges/${good.id}/pay`, { token: org.key, body: { payment_payload: payload } })
      expect(paid.status, paid.text).toBe(200)

      // A send held for approval: draft.created.
      expect((yield* call("PATCH", "/v1/account", { token: org.key, body: { send_approval: "all" } })).status).toBe(200)
      const held = yield* call("POST", "/v1/send-mail", { token: org.key, body: { to: "held@example.com", subject: "wait", text: "hi" } })
      expect(held.status, held.text).toBe(202)

      const wanted = EVENTS.map((e) => e.type)
      const seen = () => new Set([
        ...receiver.received.map((r) => JSON.parse(r.body).event as string),
        ...(wakeRows.length > 0 ? ["wake.command"] : [])
      ])
      let wakeRows: ReadonlyArray<{ payload: string }> = []
      yield* eventually(() => wanted.every((t) => seen().has(t)), 60_000, "a delivery of every event type").pipe(
        Effect.race(Effect.forever(Effect.gen(function*() {
          // The wake goes to the function's own endpoint: its delivery row holds what the function got.
          wakeRows = yield* sql<{ payload: string }>`SELECT payload FROM deliveries WHERE org_id = ${org.orgId} AND event_type = 'wake.command'`
          yield* Effect.sleep("200 millis")
        })))
      )

      const doc = (yield* call("GET", "/v1/openapi.json")).body
      expect(doc.openapi).toMatch(/^3\.1/)
      const ajv = new Ajv({ strict: false, allErrors: true, validateFormats: false })
      ajv.addSchema(doc, "openapi.json")
      const validate = (type: string, body: unknown) => {
        const check = ajv.compile({ $ref: `openapi.json#/webhooks/${type}/post/requestBody/content/application~1json/schema` })
        expect(check(body), `${type}: ${JSON.stringify(check.errors)}`).toBe(true)
      }
      const bodies = [...receiver.received.map((r) => r.body), ...wakeRows.map((r) => r.payload)]
      const validated = new Set<string>()
      for (const raw of bodies) {
        const body = JSON.parse(raw)
        validate(body.event, body)
        validated.add(body.event)
      }
      expect([...validated].sort()).toEqual([...wanted].sort())
      // The published schema is no rubber stamp: a payload missing a field fails it.
      const { email: _email, ...noEmail } = JSON.parse(bodies[0]!)
      const check = ajv.compile({ $ref: "openapi.json#/webhooks/email.received/post/requestBody/content/application~1json/schema" })
      expect(check({ ...noEmail, event: "email.received" })).toBe(false)
    }))

  it("docs/events.md describes every event type", () => {
    const doc = readFileSync(join(import.meta.dirname, "..", "docs", "events.md"), "utf8")
    for (const e of EVENTS) expect(doc, e.type).toContain(`**\`${e.type}\`**`)
  })

  it("every event type the code emits is documented in the webhooks section", () => {
    const emitted = new Set<string>()
    const walk = (dir: string) => {
      for (const entry of readdirSync(dir, { withFileTypes: true })) {
        const path = join(dir, entry.name)
        if (entry.isDirectory()) walk(path)
        else if (path.endsWith(".ts")) {
          for (const m of readFileSync(path, "utf8").matchAll(/eventType: "([a-z_]+\.[a-z_.]+)"/g)) emitted.add(m[1]!)
        }
      }
    }
    walk(join(import.meta.dirname, "..", "src"))
    expect(emitted.size).toBeGreaterThan(0)
    const documented = new Set(EVENTS.map((e) => e.type))
    expect([...emitted].filter((t) => !documented.has(t))).toEqual([])
  })
})
