/**
 * The organization's event stream (`GET /v1/events`, Server-Sent Events) read by a raw client: mail
 * sent over SMTP arrives as `email.received` with the webhook payload (the same event id and bytes an
 * endpoint receives), a reconnect with `Last-Event-ID` resumes with no gap and no duplicate, the
 * `types` filter, the listen cap, organizations kept apart, keep-alive comments.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import nodemailer from "nodemailer"
import { Provisioning } from "../src/identity/Provisioning.js"
import { LISTEN_MAX_WAITS_PER_ORG } from "../src/listen/Api.js"
import { TestServer, testService } from "./support/harness.js"
import { eventually } from "./support/hooks.js"
import { call } from "./support/http.js"
import { startReceiver } from "./support/receiver.js"
import { openSse, type SseStream } from "./support/sse.js"

const Env = Provisioning.Default.pipe(
  Layer.provideMerge(testService({ DELIVERY_RETRY_DELAYS: "300ms", DELIVERY_TIMEOUT: "2s", DNS_SERVER: "127.0.0.1:9" }))
)

const newOrg = Effect.gen(function*() {
  const p = yield* Provisioning
  const org = yield* p.createOrganization({ name: "Events", plan: "developer" })
  const key = yield* p.issueApiKey(org.id)
  return { orgId: org.id, key: key.apiKey, address: org.managedInboxAddress! }
})

/** Sends over SMTP; resolves at the server's 250 (nodemailer waits for it). */
const mail = (to: string, subject: string) =>
  Effect.flatMap(TestServer, (server) =>
    Effect.promise(() =>
      nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
        .sendMail({ from: "ann@example.com", to, subject, text: `body of ${subject}` })
    )).pipe(Effect.map(() => Date.now()))

const stream = (key: string, query = "", headers: Record<string, string> = {}) =>
  Effect.flatMap(TestServer, (server) =>
    Effect.acquireRelease(Effect.promise(() => openSse(`${server.baseUrl}/v1/events${query}`, key, headers)), (s) => Effect.sync(() => s.close())))

const wait = (s: SseStream, n: number) => Effect.promise(() => s.waitFor(n))
const subjects = (s: SseStream) => s.events.map((e) => JSON.parse(e.data).email?.subject as string)

layer(Env, { timeout: 180_000, excludeTestServices: true })("event stream", (it) => {
  describe("email.received", () => {
    it.scoped("mail sent over SMTP arrives on the stream with the webhook payload, the same event id and bytes an endpoint gets", () =>
      Effect.gen(function*() {
        const org = yield* newOrg
        const receiver = yield* startReceiver
        const s = yield* stream(org.key)
        expect(s.status).toBe(200)
        expect(s.headers.get("content-type")).toMatch(/^text\/event-stream/)
        // Without an endpoint: logged with its own payload.
        const acceptedAt = yield* mail(org.address, "no endpoint yet")
        const [first] = yield* wait(s, 1)
        console.log(`events: email.received on the stream ${first!.at - acceptedAt} ms after the 250`)
        expect(first!.event).toBe("email.received")
        expect(first!.id).toMatch(/^evt_/)
        const payload = JSON.parse(first!.data)
        expect(payload).toMatchObject({ id: first!.id, event: "email.received", email: { subject: "no endpoint yet", recipient: org.address } })
        // With an endpoint: the stream carries exactly the delivered body.
        expect((yield* call("POST", "/v1/endpoints", { token: org.key, body: { url: receiver.url("/hook") } })).status).toBe(201)
        yield* mail(org.address, "with endpoint")
        const [, second] = yield* wait(s, 2)
        yield* eventually(() => receiver.received.length >= 1)
        const hit = receiver.received[0]!
        expect(second!.id).toBe(hit.headers["mailroom-event-id"])
        expect(second!.data).toBe(hit.body)
      }))

    it.scoped("another organization's events never reach a stream", () =>
      Effect.gen(function*() {
        const a = yield* newOrg
        const b = yield* newOrg
        const sb = yield* stream(b.key)
        yield* mail(a.address, "for a")
        yield* mail(b.address, "for b")
        yield* wait(sb, 1)
        expect(subjects(sb)).toEqual(["for b"])
      }))
  })

  describe("resume", () => {
    it.scoped("a reconnect with Last-Event-ID gets every later event once, in order, with none missed while away", () =>
      Effect.gen(function*() {
        const org = yield* newOrg
        const first = yield* stream(org.key)
        for (const n of [1, 2, 3]) yield* mail(org.address, `m${n}`)
        yield* wait(first, 3)
        expect(subjects(first)).toEqual(["m1", "m2", "m3"])
        const lastSeen = first.events[1]!.id!
        first.close()
        // Sent while no client is connected.
        for (const n of [4, 5]) yield* mail(org.address, `m${n}`)
        const again = yield* stream(org.key, "", { "last-event-id": lastSeen })
        expect(again.status).toBe(200)
        yield* mail(org.address, "m6")
        yield* wait(again, 4)
        expect(subjects(again)).toEqual(["m3", "m4", "m5", "m6"])
        expect(again.events[0]!.id).toBe(first.events[2]!.id)
        expect(new Set(again.events.map((e) => e.id)).size).toBe(4)
      }))

    it.scoped("an unknown Last-Event-ID is 400 validation_error", () =>
      Effect.gen(function*() {
        const org = yield* newOrg
        const s = yield* stream(org.key, "", { "last-event-id": "evt_unknown" })
        expect(s.status).toBe(400)
        expect(JSON.parse(s.text).error).toMatchObject({ code: "validation_error" })
      }))
  })

  describe("types", () => {
    it.scoped("?types= streams only the named types; a malformed list is 400", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const org = yield* newOrg
        const s = yield* stream(org.key, "?types=payment.failed,payment.settled")
        const log = (id: string, type: string) =>
          sql`INSERT INTO org_events (org_id, event_id, event_type, payload)
              VALUES (${org.orgId}, ${id}, ${type}, ${JSON.stringify({ id, event: type })})`
        yield* mail(org.address, "not streamed")
        yield* log("evt_t1", "payment.failed")
        yield* log("evt_t2", "wake.command")
        yield* log("evt_t3", "payment.settled")
        yield* wait(s, 2)
        expect(s.events.map((e) => [e.id, e.event])).toEqual([["evt_t1", "payment.failed"], ["evt_t3", "payment.settled"]])
        const bad = yield* call("GET", "/v1/events?types=email,,%20", { token: org.key, headers: { accept: "text/event-stream" } })
        expect([bad.status, bad.body.error.code]).toEqual([400, "validation_error"])
      }))
  })

  describe("limits", () => {
    it.scoped(`past ${LISTEN_MAX_WAITS_PER_ORG} open streams of one organization: 429; a closed stream gives its slot back`, () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* sql`DELETE FROM rate_limit_windows`
        const org = yield* newOrg
        const other = yield* newOrg
        const open = yield* Effect.forEach(Array.from({ length: LISTEN_MAX_WAITS_PER_ORG }), () => stream(org.key))
        expect(open.map((s) => s.status)).toEqual(Array<number>(LISTEN_MAX_WAITS_PER_ORG).fill(200))
        const over = yield* stream(org.key)
        expect(over.status).toBe(429)
        expect(JSON.parse(over.text).error.code).toBe("rate_limit_exceeded")
        // Another organization has its own slots.
        expect((yield* stream(other.key)).status).toBe(200)
        open[0]!.close()
        let reopened: SseStream | undefined
        yield* eventually(() => reopened?.status === 200, 10_000, "a slot given back").pipe(
          Effect.race(Effect.forever(Effect.gen(function*() {
            if (reopened?.status === 200) return yield* Effect.never
            reopened = yield* stream(org.key)
            yield* Effect.sleep("200 millis")
          })))
        )
        expect(reopened?.status).toBe(200)
      }))

    it.scoped("a missing credential is 401 with the resource-metadata challenge", () =>
      Effect.gen(function*() {
        const r = yield* call("GET", "/v1/events", { headers: { accept: "text/event-stream" } })
        expect(r.status).toBe(401)
        expect(r.headers.get("www-authenticate")).toContain("resource_metadata=")
      }))

    it.scoped("an idle stream gets a keep-alive comment every 15 s", () =>
      Effect.gen(function*() {
        const org = yield* newOrg
        const s = yield* stream(org.key)
        yield* Effect.promise(() => s.waitForComment(/^keep-alive$/, 40_000))
      }), { timeout: 60_000 })
  })
})
