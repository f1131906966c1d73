/**
 * Listen sessions under concurrency and waiting polls: the session cap holds exactly when creates
 * race, a waiting poll is woken by the delivery (NOTIFY on PostgreSQL, the in-process watcher on
 * PGlite) instead of re-querying on a timer, waits are capped per organization, and what reaches a
 * handler (a real delivery, or a copy forwarded by `mailroom listen`) carries Mailroom-Attempt and
 * Mailroom-Event-Id and no tracing headers.
 */
import { FetchHttpClient, HttpClient } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Fiber, Layer, Metric } from "effect"
import nodemailer from "nodemailer"
import { forward } from "../src/cli/commands/listen.js"
import { Provisioning } from "../src/identity/Provisioning.js"
import { LISTEN_MAX_ACTIVE_SESSIONS, type ListenEvent } from "../src/listen/Api.js"
import { LISTEN_MAX_WAITS_PER_ORG, listenWatchQueries } from "../src/listen/Wakeups.js"
import { TestServer, testService } from "./support/harness.js"
import { eventually, startHooks } from "./support/hooks.js"
import { startReceiver } from "./support/receiver.js"
import { call } from "./support/http.js"

const Env = Provisioning.Default.pipe(
  Layer.provideMerge(testService({ DELIVERY_RETRY_DELAYS: "300ms", DELIVERY_TIMEOUT: "2s", DNS_SERVER: "127.0.0.1:9" }))
)

const newOrg = Effect.gen(function*() {
  const p = yield* Provisioning
  const org = yield* p.createOrganization({ name: "Listen", plan: "developer" })
  const key = yield* p.issueApiKey(org.id)
  return { orgId: org.id, key: key.apiKey, address: org.managedInboxAddress! }
})

const openSession = (key: string) =>
  Effect.map(call("POST", "/v1/listen/sessions", { token: key, body: {} }), (r) => r.body.data.id as string)

/** A finished delivery row: never dispatched, still fanned out to the organization's sessions. */
const insertDelivery = (orgId: string, eventId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ id: string }>`
      INSERT INTO deliveries (org_id, endpoint_id, event_id, event_type, payload, status)
      VALUES (${orgId}, gen_random_uuid(), ${eventId}, 'email.received', ${JSON.stringify({ id: eventId })}, 'failed')
      RETURNING id`
  ).pipe(Effect.map((rows) => rows[0]!.id))

layer(Env, { timeout: 180_000, excludeTestServices: true })("listen", (it) => {
  describe("sessions", () => {
    it.effect("30 concurrent creates leave exactly the cap of active sessions", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const org = yield* newOrg
        const results = yield* Effect.all(
          Array.from({ length: 30 }, (_, i) =>
            call("POST", "/v1/listen/sessions", { token: org.key, body: { device_name: `d${i}` } })),
          { concurrency: "unbounded" }
        )
        const created = results.filter((r) => r.status === 201).length
        expect(created).toBe(LISTEN_MAX_ACTIVE_SESSIONS)
        for (const r of results.filter((x) => x.status !== 201)) {
          expect([r.status, r.body.error.code]).toEqual([409, "conflict"])
        }
        const rows = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM listen_sessions WHERE org_id = ${org.orgId}`
        expect(rows[0]!.n).toBe(LISTEN_MAX_ACTIVE_SESSIONS)
      }))
  })

  describe("waiting polls", () => {
    it.effect("a waiting poll returns when a delivery arrives, without re-querying per poll", () =>
      Effect.gen(function*() {
        const org = yield* newOrg
        const sessions = yield* Effect.all(Array.from({ length: 5 }, () => openSession(org.key)))
        const watchBefore = yield* Metric.value(listenWatchQueries)
        const started = Date.now()
        const polls = yield* Effect.forEach(sessions, (id) =>
          Effect.fork(call("GET", `/v1/listen/sessions/${id}/events?wait=30`, { token: org.key })))
        yield* Effect.sleep("2 seconds")
        // Nothing arrived: every poll is still waiting.
        for (const p of polls) expect(yield* Fiber.poll(p)).toMatchObject({ _tag: "None" })
        const inserted = yield* insertDelivery(org.orgId, "evt_wake")
        const replies = yield* Effect.forEach(polls, Fiber.join)
        const elapsed = Date.now() - started
        for (const r of replies) {
          expect(r.status).toBe(200)
          expect(r.body.data.map((e: ListenEvent) => e.delivery_id)).toEqual([inserted])
        }
        // Woken, not timed out at 30 s.
        expect(elapsed).toBeLessThan(15_000)
        const watchQueries = (yield* Metric.value(listenWatchQueries)).count - watchBefore.count
        // One watcher query per interval serves all five waiting polls; a timer per poll would have
        // been five queries every 200 ms (about 50 over these two seconds).
        console.log(`listen: 5 polls waited ${elapsed} ms; watcher queries ${watchQueries}`)
        expect(watchQueries).toBeLessThanOrEqual(Math.ceil(elapsed / 250) + 2)
      }))

    it.effect(`more than ${LISTEN_MAX_WAITS_PER_ORG} concurrent waits of one organization: 429; a poll that need not wait is served`, () =>
      Effect.gen(function*() {
        yield* Effect.flatMap(SqlClient.SqlClient, (sql) => sql`DELETE FROM rate_limit_windows`)
        const org = yield* newOrg
        const other = yield* newOrg
        const sessions = yield* Effect.all(Array.from({ length: LISTEN_MAX_ACTIVE_SESSIONS }, () => openSession(org.key)))
        const waits = yield* Effect.forEach(sessions, (id) =>
          Effect.fork(call("GET", `/v1/listen/sessions/${id}/events?wait=6`, { token: org.key })))
        yield* Effect.sleep("1500 millis")
        const over = yield* call("GET", `/v1/listen/sessions/${sessions[0]}/events?wait=5`, { token: org.key })
        expect([over.status, over.body.error?.code]).toEqual([429, "rate_limit_exceeded"])
        // wait=0 never waits, so it is not capped.
        expect((yield* call("GET", `/v1/listen/sessions/${sessions[1]}/events?wait=0`, { token: org.key })).status).toBe(200)
        // Another organization has its own waits.
        const theirs = yield* openSession(other.key)
        expect((yield* call("GET", `/v1/listen/sessions/${theirs}/events?wait=1`, { token: other.key })).status).toBe(200)
        const done = yield* Effect.forEach(waits, Fiber.join)
        expect(done.map((r) => r.status)).toEqual(Array<number>(LISTEN_MAX_ACTIVE_SESSIONS).fill(200))
        // The slots are given back when the polls end.
        expect((yield* call("GET", `/v1/listen/sessions/${sessions[0]}/events?wait=1`, { token: org.key })).status).toBe(200)
      }))
  })

  describe("attempt headers", () => {
    it.scoped("a real endpoint sees Mailroom-Attempt 1 then 2 on a retry and the event id; listen copies carry them too; no tracing headers", () =>
      Effect.gen(function*() {
        const receiver = yield* startReceiver
        const server = yield* TestServer
        const org = yield* newOrg
        expect((yield* call("POST", "/v1/endpoints", { token: org.key, body: { url: receiver.url("/flaky") } })).status).toBe(201)
        const session = yield* openSession(org.key)
        receiver.answer = { status: 503, body: "busy" }
        yield* Effect.promise(() =>
          nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
            .sendMail({ from: "ann@example.com", to: org.address, subject: "attempts", text: "hi" }))
        yield* eventually(() => receiver.received.length >= 1)
        receiver.answer = { status: 200, body: "ok" }
        yield* eventually(() => receiver.received.length >= 2)
        const [first, second] = receiver.received
        expect([first!.headers["mailroom-attempt"], second!.headers["mailroom-attempt"]]).toEqual(["1", "2"])
        expect(first!.headers["mailroom-event-id"]).toMatch(/^evt_/)
        expect(second!.headers["mailroom-event-id"]).toBe(first!.headers["mailroom-event-id"])
        for (const h of receiver.received) {
          expect(h.headers["b3"]).toBeUndefined()
          expect(h.headers["traceparent"]).toBeUndefined()
        }

        // The listen copy, forwarded by the CLI's forwarder inside a traced span.
        const events = yield* call("GET", `/v1/listen/sessions/${session}/events?wait=10`, { token: org.key })
        const event = events.body.data[0] as ListenEvent
        expect(event.headers["mailroom-attempt"]).toBe("1")
        const local = yield* startHooks
        const http = yield* HttpClient.HttpClient.pipe(Effect.provide(FetchHttpClient.layer))
        // Tracing on, as in the CLI: an HTTP client propagates its span unless told not to.
        const result = yield* forward(http, local.url("/local"), event).pipe(Effect.withSpan("cli.listen"), Effect.withTracerEnabled(true))
        expect(result.status).toBe(200)
        const got = local.on("/local")[0]!
        expect(got.headers["mailroom-attempt"]).toBe("1")
        expect(got.headers["mailroom-event-id"]).toBe(event.event_id)
        expect(got.headers["b3"]).toBeUndefined()
        expect(got.headers["traceparent"]).toBeUndefined()
        expect(got.body).toBe(event.payload)
      }))
  })
})
