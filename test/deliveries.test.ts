/**
 * Inbound mail to signed deliveries, end to end: real SMTP in, a real HTTP receiver out, the
 * deliveries API in between. A fast retry schedule (300 ms, 600 ms → 3 attempts) and a 1 s
 * timeout keep the retry paths quick.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer, Schedule } from "effect"
import nodemailer, { type SendMailOptions } from "nodemailer"
import { compactDeliveryCounts } from "../src/deliveries/Counts.js"
import { Provisioning } from "../src/identity/Provisioning.js"
import { extraServer, TestServer, testService, usingRealPostgres } from "./support/harness.js"
import { eventually, type Hooks, startHooks, verifySignature } from "./support/hooks.js"
import { call } from "./support/http.js"

const Env = Provisioning.Default.pipe(
  Layer.provideMerge(testService({ DELIVERY_RETRY_DELAYS: "300ms,600ms", DELIVERY_TIMEOUT: "1s", DNS_SERVER: "127.0.0.1:9" }))
)

const send = (message: SendMailOptions, port?: number) =>
  Effect.flatMap(TestServer, (server) =>
    Effect.promise(async () => {
      const transport = nodemailer.createTransport({ host: "127.0.0.1", port: port ?? server.smtpPort, secure: false, ignoreTLS: true })
      try {
        return await transport.sendMail(message)
      } finally {
        transport.close()
      }
    }))

/** An organization whose fallback endpoint points at `path` on the receiver. */
const orgWithEndpoint = (hooks: Hooks, path: string, rules?: Record<string, unknown>) =>
  Effect.gen(function*() {
    const p = yield* Provisioning
    const org = yield* p.createOrganization({ name: "Deliveries", plan: "developer" })
    const { apiKey } = yield* p.issueApiKey(org.id)
    const created = yield* call("POST", "/v1/endpoints", {
      token: apiKey,
      body: { url: hooks.url(path), ...(rules ? { rules } : {}) }
    })
    expect(created.status).toBe(201)
    const secret = yield* call("GET", "/v1/account/webhook-secret", { token: apiKey })
    return {
      orgId: org.id,
      apiKey,
      address: org.managedInboxAddress,
      endpointId: created.body.data.id as string,
      secret: secret.body.data.secret as string
    }
  })

const deliveriesOf = (apiKey: string, query = "") =>
  Effect.map(call("GET", `/v1/webhooks/deliveries${query}`, { token: apiKey }), (r) => r.body)

const waitForStatus = (apiKey: string, status: string, count = 1) =>
  Effect.gen(function*() {
    for (let i = 0; i < 300; i++) {
      const list = yield* deliveriesOf(apiKey)
      const matching = list.data.filter((d: { status: string }) => d.status === status)
      if (matching.length >= count) return matching
      yield* Effect.sleep("50 millis")
    }
    return yield* Effect.die(new Error(`no ${count} deliveries with status ${status}`))
  })

layer(Env, { timeout: 180_000, excludeTestServices: true })("deliveries", (it) => {
  describe("delivery", () => {
    it.scoped("delivers a signed email.received event and records it", () =>
      Effect.gen(function*() {
        const hooks = yield* startHooks
        const org = yield* orgWithEndpoint(hooks, "/ok")
        yield* send({
          from: "Ann <ann@example.com>",
          to: org.address,
          subject: "Invoice 42",
          text: "please pay",
          messageId: "<inv42@example.com>",
          attachments: [{ filename: "inv.txt", content: "42 EUR" }]
        })
        const hit = yield* eventually(() => hooks.on("/ok")[0], 15_000, "the webhook")
        const signature = hit.headers["mailroom-signature"] as string
        expect(hit.headers["legacy-signature"]).toBe(signature)
        expect(verifySignature(signature, hit.body, org.secret)).toBe(true)
        expect(verifySignature(signature, hit.body + " ", org.secret)).toBe(false)
        const event = JSON.parse(hit.body)
        expect(event.id).toMatch(/^evt_/)
        expect(event.event).toBe("email.received")
        expect(hit.headers["mailroom-event-id"]).toBe(event.id)
        expect(event.email).toMatchObject({
          message_id: "<inv42@example.com>",
          from: "Ann <ann@example.com>",
          to: [org.address],
          recipient: org.address,
          subject: "Invoice 42",
          content_truncated: false,
          auth: { spf: expect.any(String), dkim: "none", dmarc: expect.any(String) }
        })
        expect(event.email.text.trim()).toBe("please pay")
        expect(event.email.attachments).toHaveLength(1)
        // The payload's links work without a credential.
        const att = yield* Effect.promise(() => fetch(event.email.attachments[0].download_url).then((r) => r.text()))
        expect(att).toBe("42 EUR")
        const raw = yield* Effect.promise(() => fetch(event.email.raw_url).then((r) => r.text()))
        expect(raw).toContain("Subject: Invoice 42")

        const [delivery] = yield* waitForStatus(org.apiKey, "delivered")
        expect(delivery).toMatchObject({
          email_id: event.email.id,
          endpoint_id: org.endpointId,
          endpoint_url: hooks.url("/ok"),
          status: "delivered",
          attempt_count: 1,
          last_error: "",
          last_error_code: "",
          event_id: event.id,
          email: { sender: "ann@example.com", recipient: org.address, subject: "Invoice 42" }
        })
        const one = yield* call("GET", `/v1/webhooks/deliveries/${delivery.id}`, { token: org.apiKey })
        expect(one.body.data.id).toBe(delivery.id)
        const byEmail = yield* deliveriesOf(org.apiKey, `?email_id=${event.email.id}`)
        expect(byEmail.meta.total).toBe(1)
        const none = yield* deliveriesOf(org.apiKey, "?status=failed")
        expect(none.meta.total).toBe(0)
      }))

    it.scoped("retries failures on the schedule, then fails with http_500", () =>
      Effect.gen(function*() {
        const hooks = yield* startHooks
        const sql = yield* SqlClient.SqlClient
        const org = yield* orgWithEndpoint(hooks, "/fail")
        yield* send({ from: "a@example.com", to: org.address, subject: "retry me", text: "x" })
        const [failed] = yield* waitForStatus(org.apiKey, "failed")
        expect(failed.attempt_count).toBe(3)
        expect(failed.last_error_code).toBe("http_500")
        expect(failed.last_error).toContain("500")
        const hits = hooks.on("/fail")
        expect(hits).toHaveLength(3)
        // Same event id and body on every attempt; gaps follow the schedule (300 ms, then 600 ms).
        expect(new Set(hits.map((h) => h.headers["mailroom-event-id"])).size).toBe(1)
        expect(new Set(hits.map((h) => h.body)).size).toBe(1)
        expect(hits[1]!.at - hits[0]!.at).toBeGreaterThanOrEqual(280)
        expect(hits[2]!.at - hits[1]!.at).toBeGreaterThanOrEqual(580)
        const attempts = yield* sql<{ attempt: number; status_code: number; error_code: string }>`
          SELECT attempt, status_code, error_code FROM delivery_attempts WHERE delivery_id = ${failed.id} ORDER BY attempt`
        expect(attempts).toEqual([1, 2, 3].map((attempt) => ({ attempt, status_code: 500, error_code: "http_500" })))
      }))

    it.scoped("410 stops retrying; redirects are not followed; timeouts are recorded", () =>
      Effect.gen(function*() {
        const hooks = yield* startHooks
        const gone = yield* orgWithEndpoint(hooks, "/gone")
        const redirect = yield* orgWithEndpoint(hooks, "/redirect")
        const slow = yield* orgWithEndpoint(hooks, "/slow")
        yield* send({ from: "a@example.com", to: [gone.address, redirect.address, slow.address], subject: "s", text: "x" })
        const [g] = yield* waitForStatus(gone.apiKey, "failed")
        expect(g.attempt_count).toBe(1)
        expect(g.last_error_code).toBe("http_410")
        const [r] = yield* waitForStatus(redirect.apiKey, "failed")
        expect(r.last_error_code).toBe("http_302")
        expect(r.attempt_count).toBe(3)
        expect(hooks.on("/ok")).toHaveLength(0)
        const [s] = yield* waitForStatus(slow.apiKey, "failed")
        expect(s.last_error_code).toBe("timeout")
        expect(s.duration_ms).toBeGreaterThanOrEqual(900)
        expect(s.duration_ms).toBeLessThan(2500)
      }))

    it.scoped("Mailroom-Confirmed gives header_confirmed and discards content when the account asks", () =>
      Effect.gen(function*() {
        const hooks = yield* startHooks
        const org = yield* orgWithEndpoint(hooks, "/confirm")
        const patched = yield* call("PATCH", "/v1/account", { token: org.apiKey, body: { discard_content_on_webhook_confirmed: true } })
        expect(patched.status).toBe(200)
        yield* send({ from: "a@example.com", to: org.address, subject: "secret stuff", text: "do not keep" })
        const [d] = yield* waitForStatus(org.apiKey, "header_confirmed")
        const email = yield* call("GET", `/v1/emails/${d.email_id}`, { token: org.apiKey })
        expect(email.body.data.content_discarded).toBe(true)
        expect(email.body.data.text).toBeNull()
        const raw = yield* call("GET", `/v1/emails/${d.email_id}/raw`, { token: org.apiKey })
        expect(raw.status).toBe(404)
        // A replay after the discard cannot deliver the content.
        const replay = yield* call("POST", `/v1/webhooks/deliveries/${d.id}/replay`, { token: org.apiKey })
        expect(replay.body.data).toMatchObject({ delivered: 0, failed: 1 })
        const replayed = yield* call("GET", `/v1/webhooks/deliveries/${replay.body.data.delivery_id}`, { token: org.apiKey })
        expect(replayed.body.data.last_error_code).toBe("content_discarded")
      }))
  })

  describe("routing decisions", () => {
    it.scoped("organization filters, endpoint rules and event_types decide; unmatched mail is still stored", () =>
      Effect.gen(function*() {
        const hooks = yield* startHooks
        const blocked = yield* orgWithEndpoint(hooks, "/ok/1")
        const f = yield* call("POST", "/v1/filters", { token: blocked.apiKey, body: { type: "blocklist", pattern: "@spam.example" } })
        expect(f.status).toBe(201)
        const whitelist = yield* orgWithEndpoint(hooks, "/ok/2", { sender_whitelist: ["vip@example.com"] })
        const small = yield* orgWithEndpoint(hooks, "/ok/3", { max_size_bytes: 2000 })
        const noAttachments = yield* orgWithEndpoint(hooks, "/ok/4", { exclude_attachments: true })
        const bounces = yield* orgWithEndpoint(hooks, "/ok/5", { event_types: ["email.bounced"] })
        const blacklist = yield* orgWithEndpoint(hooks, "/ok/6", { sender_blacklist: ["nope@example.com"] })

        yield* send({ from: "x@spam.example", to: blocked.address, subject: "blocked", text: "x" })
        yield* send({ from: "ok@example.com", to: blocked.address, subject: "allowed", text: "x" })
        yield* send({ from: "someone@example.com", to: whitelist.address, subject: "not vip", text: "x" })
        yield* send({ from: "vip@example.com", to: whitelist.address, subject: "vip", text: "x" })
        yield* send({ from: "a@example.com", to: small.address, subject: "big", text: "y".repeat(5000) })
        yield* send({ from: "a@example.com", to: small.address, subject: "small", text: "y" })
        yield* send({ from: "a@example.com", to: noAttachments.address, subject: "with", text: "y", attachments: [{ filename: "a", content: "b" }] })
        yield* send({ from: "a@example.com", to: noAttachments.address, subject: "without", text: "y" })
        yield* send({ from: "a@example.com", to: bounces.address, subject: "plain mail", text: "y" })
        yield* send({ from: "nope@example.com", to: blacklist.address, subject: "blacklisted", text: "y" })
        yield* send({ from: "yes@example.com", to: blacklist.address, subject: "fine", text: "y" })

        const subjects = (path: string) => hooks.on(path).map((h) => JSON.parse(h.body).email.subject)
        yield* eventually(() => hooks.hits.length >= 5, 15_000, "five deliveries")
        yield* Effect.sleep("500 millis")
        expect(subjects("/ok/1")).toEqual(["allowed"])
        expect(subjects("/ok/2")).toEqual(["vip"])
        expect(subjects("/ok/3")).toEqual(["small"])
        expect(subjects("/ok/4")).toEqual(["without"])
        expect(subjects("/ok/5")).toEqual([])
        expect(subjects("/ok/6")).toEqual(["fine"])
        // Mail that reached no endpoint is stored and listed.
        const stored = yield* call("GET", "/v1/emails", { token: bounces.apiKey })
        expect(stored.body.data.map((e: { subject: string }) => e.subject)).toEqual(["plain mail"])
        const noDeliveries = yield* deliveriesOf(bounces.apiKey)
        expect(noDeliveries.meta.total).toBe(0)
      }))
  })

  describe("replay", () => {
    it.scoped("re-sends the stored payload with the same event id and a fresh signature; disabled works, deleted is 409", () =>
      Effect.gen(function*() {
        const hooks = yield* startHooks
        const org = yield* orgWithEndpoint(hooks, "/ok")
        yield* send({ from: "a@example.com", to: org.address, subject: "replay me", text: "x" })
        const [d] = yield* waitForStatus(org.apiKey, "delivered")
        const first = hooks.on("/ok")[0]!
        yield* Effect.sleep("1100 millis") // a new second: a new `t`, so a new signature
        const replay = yield* call("POST", `/v1/webhooks/deliveries/${d.id}/replay`, { token: org.apiKey })
        expect(replay.status).toBe(200)
        expect(replay.body.data).toMatchObject({ delivered: 1, failed: 0 })
        const second = hooks.on("/ok")[1]!
        expect(second.body).toBe(first.body)
        expect(second.headers["mailroom-event-id"]).toBe(first.headers["mailroom-event-id"])
        expect(second.headers["mailroom-signature"]).not.toBe(first.headers["mailroom-signature"])
        expect(verifySignature(second.headers["mailroom-signature"] as string, second.body, org.secret)).toBe(true)
        // The email was not ingested again.
        const emails = yield* call("GET", "/v1/emails", { token: org.apiKey })
        expect(emails.body.meta.total).toBe(1)

        const disabled = yield* call("PATCH", `/v1/endpoints/${org.endpointId}`, { token: org.apiKey, body: { enabled: false } })
        expect(disabled.status).toBe(200)
        const whileDisabled = yield* call("POST", `/v1/webhooks/deliveries/${d.id}/replay`, {
          token: org.apiKey,
          headers: { "idempotency-key": "replay-disabled" }
        })
        expect(whileDisabled.status).toBe(200)
        expect(whileDisabled.body.data.delivered).toBe(1)
        expect(hooks.on("/ok")).toHaveLength(3)

        const deleted = yield* call("DELETE", `/v1/endpoints/${org.endpointId}`, { token: org.apiKey })
        expect(deleted.status).toBe(200)
        const afterDelete = yield* call("POST", `/v1/webhooks/deliveries/${d.id}/replay`, {
          token: org.apiKey,
          headers: { "idempotency-key": "replay-deleted" }
        })
        expect(afterDelete.status).toBe(409)
        expect(afterDelete.body.error.code).toBe("conflict")
        expect(hooks.on("/ok")).toHaveLength(3)
        const unknown = yield* call("POST", "/v1/webhooks/deliveries/00000000-0000-4000-8000-000000000000/replay", { token: org.apiKey })
        expect(unknown.status).toBe(404)
      }))

    it.scoped("deliveries of another organization are 404; list pages with a cursor", () =>
      Effect.gen(function*() {
        const hooks = yield* startHooks
        const org = yield* orgWithEndpoint(hooks, "/ok/7")
        const other = yield* orgWithEndpoint(hooks, "/ok/8")
        for (let i = 0; i < 3; i++) yield* send({ from: "a@example.com", to: org.address, subject: `p${i}`, text: "x" })
        yield* waitForStatus(org.apiKey, "delivered", 3)
        const page1 = yield* deliveriesOf(org.apiKey, "?limit=2")
        expect(page1.data).toHaveLength(2)
        expect(page1.meta).toMatchObject({ total: 3, limit: 2 })
        const page2 = yield* deliveriesOf(org.apiKey, `?limit=2&cursor=${page1.meta.cursor}`)
        expect(page2.data).toHaveLength(1)
        expect(page2.meta.cursor).toBeNull()
        const foreign = yield* call("GET", `/v1/webhooks/deliveries/${page1.data[0].id}`, { token: other.apiKey })
        expect(foreign.status).toBe(404)
        const bad = yield* call("GET", "/v1/webhooks/deliveries?status=lost", { token: org.apiKey })
        expect(bad.status).toBe(400)
        expect(bad.body.error.message).toMatch(/^status: /)
        const badLimit = yield* call("GET", "/v1/webhooks/deliveries?limit=101", { token: org.apiKey })
        expect(badLimit.status).toBe(400)
      }))
  })

  describe("meta.total", () => {
    it.scoped("stays exact through inserts, status changes, deletes and compaction, for every filter", () =>
      Effect.gen(function*() {
        const p = yield* Provisioning
        const sql = yield* SqlClient.SqlClient
        const org = yield* p.createOrganization({ name: "Totals", plan: "developer" })
        const { apiKey } = yield* p.issueApiKey(org.id)
        const [endpoint] = yield* sql<{ id: string }>`
          INSERT INTO endpoints (org_id, kind, url, enabled) VALUES (${org.id}, 'http', 'https://example.com/h', false) RETURNING id`
        const [email] = yield* sql<{ id: string }>`
          INSERT INTO emails (org_id, recipient, size_bytes, event_type, status)
          VALUES (${org.id}, ${org.managedInboxAddress}, 1, 'email.received', 'accepted') RETURNING id`
        // 300 rows 127 s apart (about 10.5 hours, off the hour boundaries), due in a month so no
        // worker touches them; one multi-row statement and a few single-row ones.
        const base = Date.UTC(2026, 0, 5, 3, 17, 41, 123)
        yield* sql`
          INSERT INTO deliveries (org_id, endpoint_id, email_id, event_id, event_type, payload, status, next_attempt_at, created_at)
          SELECT ${org.id}, ${endpoint!.id}, CASE WHEN g % 50 = 0 THEN ${email!.id}::uuid END, 'evt_' || g, 'email.received', '{}',
                 (ARRAY['pending', 'delivered', 'failed', 'header_confirmed'])[1 + g % 4],
                 now() + interval '30 days', ${new Date(base)}::timestamptz + g * interval '127 seconds'
          FROM generate_series(1, 297) g`
        for (let g = 298; g <= 300; g++) {
          yield* sql`
            INSERT INTO deliveries (org_id, endpoint_id, event_id, event_type, payload, status, next_attempt_at, created_at)
            VALUES (${org.id}, ${endpoint!.id}, ${`evt_${g}`}, 'email.received', '{}', 'pending', now() + interval '30 days',
                    ${new Date(base + g * 127_000)})`
        }
        yield* sql`UPDATE deliveries SET status = 'failed' WHERE org_id = ${org.id} AND status = 'pending' AND event_id LIKE 'evt_1%'`
        yield* sql`UPDATE deliveries SET status = 'delivered', attempt_count = 1 WHERE org_id = ${org.id} AND event_id = 'evt_2'`
        // Not a counted change: must not move any total.
        yield* sql`UPDATE deliveries SET attempt_count = 3 WHERE org_id = ${org.id} AND event_id LIKE 'evt_3%'`
        yield* sql`DELETE FROM deliveries WHERE org_id = ${org.id} AND event_id IN ('evt_5', 'evt_77', 'evt_150')`

        const at = (seconds: number) => new Date(base + seconds * 1000).toISOString()
        const queries: Array<[string, Record<string, string>]> = [
          ["", {}],
          ...["pending", "delivered", "failed", "header_confirmed"].map((s): [string, Record<string, string>] => [`?status=${s}`, { status: s }]),
          [`?email_id=${email!.id}`, { email_id: email!.id }],
          [`?email_id=${email!.id}&status=pending`, { email_id: email!.id, status: "pending" }],
          [`?date_from=${at(4000)}`, { date_from: at(4000) }],
          [`?date_to=${at(20011)}`, { date_to: at(20011) }],
          [`?date_from=${at(4000)}&date_to=${at(20011)}`, { date_from: at(4000), date_to: at(20011) }],
          [`?date_from=${at(4000)}&date_to=${at(4500)}`, { date_from: at(4000), date_to: at(4500) }],
          [`?status=failed&date_from=${at(1000)}&date_to=${at(30000)}`, { status: "failed", date_from: at(1000), date_to: at(30000) }],
          // Exactly on hour boundaries and on a row's own timestamp.
          [`?date_from=2026-01-05T05:00:00.000Z&date_to=2026-01-05T09:00:00.000Z`, {
            date_from: "2026-01-05T05:00:00.000Z",
            date_to: "2026-01-05T09:00:00.000Z"
          }],
          [`?date_from=${at(127 * 40)}&date_to=${at(127 * 80)}`, { date_from: at(127 * 40), date_to: at(127 * 80) }]
        ]
        const counted = (f: Record<string, string>) =>
          Effect.map(
            sql<{ n: number }>`SELECT count(*)::int AS n FROM deliveries WHERE ${
              sql.and([
                sql`org_id = ${org.id}`,
                ...(f.status ? [sql`status = ${f.status}`] : []),
                ...(f.email_id ? [sql`email_id = ${f.email_id}`] : []),
                ...(f.date_from ? [sql`created_at >= ${new Date(f.date_from)}`] : []),
                ...(f.date_to ? [sql`created_at <= ${new Date(f.date_to)}`] : [])
              ])
            }`,
            (r) => r[0]!.n
          )
        const check = Effect.gen(function*() {
          for (const [query, filter] of queries) {
            const expected = yield* counted(filter)
            const list = yield* deliveriesOf(apiKey, `${query}${query ? "&" : "?"}limit=5`)
            expect({ query, total: list.meta.total }).toEqual({ query, total: expected })
            expect(list.data.length).toBe(Math.min(5, expected))
          }
        })
        yield* check
        expect((yield* counted({}))).toBe(297)
        yield* compactDeliveryCounts
        const keys = yield* sql<{ dup: number }>`
          SELECT count(*)::int AS dup FROM (SELECT 1 FROM delivery_counts WHERE org_id = ${org.id}
          GROUP BY org_id, hour, status HAVING count(*) > 1) k`
        expect(keys[0]!.dup).toBe(0)
        yield* check
        // An empty page still carries its total (0) and no items.
        const none = yield* deliveriesOf(apiKey, "?date_from=2030-01-01T00:00:00.000Z")
        expect(none.meta.total).toBe(0)
        expect(none.data).toEqual([])
      }))
  })

  describe("several processes", () => {
    it.scoped("two service instances on one database deliver every message; no attempt is ever made twice", () =>
      Effect.gen(function*() {
        const hooks = yield* startHooks
        const org = yield* orgWithEndpoint(hooks, "/ok/9")
        const second = yield* extraServer
        const n = usingRealPostgres() ? 1000 : 200
        const server = yield* TestServer
        // Mail arrives through both instances' listeners; both dispatchers claim work.
        yield* Effect.forEach(Array.from({ length: n }, (_, i) => i), (i) =>
          send({ from: "bulk@example.com", to: org.address, subject: `bulk ${i}`, text: "x" }, i % 2 === 0 ? server.smtpPort : second.smtpPort), {
          concurrency: 10
        })
        yield* eventually(() => hooks.on("/ok/9").length >= n, 120_000, `${n} deliveries`)
        const sql = yield* SqlClient.SqlClient
        // Every delivery's result is recorded (a retried one may still be finishing).
        yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM deliveries WHERE org_id = ${org.orgId} AND status = 'delivered'`.pipe(
          Effect.filterOrFail((r) => r[0]!.n === n, () => new Error(`not all ${n} deliveries recorded as delivered`)),
          Effect.retry({ schedule: Schedule.spaced("200 millis"), times: 600 })
        )
        yield* Effect.sleep("1 second")
        // No attempt is made twice: every request the receiver got is one recorded attempt of its
        // delivery, under that delivery's one event id. (On a loaded machine an attempt may outlive the
        // 1 s timeout and be retried: that is a second recorded attempt, after a recorded failure.)
        const hits = hooks.on("/ok/9")
        const attempts = yield* sql<{ delivery_id: string; attempt: number; error_code: string | null; event_id: string }>`
          SELECT a.delivery_id, a.attempt, a.error_code, d.event_id FROM delivery_attempts a
          JOIN deliveries d ON d.id = a.delivery_id WHERE d.org_id = ${org.orgId} ORDER BY a.delivery_id, a.attempt`
        expect(hits).toHaveLength(attempts.length)
        const hitKeys = hits.map((h) => `${h.headers["mailroom-delivery-id"]}/${h.headers["mailroom-attempt"]}/${h.headers["mailroom-event-id"]}`).sort()
        expect(hitKeys).toEqual(attempts.map((a) => `${a.delivery_id}/${a.attempt}/${a.event_id}`).sort())
        expect(new Set(hits.map((h) => h.headers["mailroom-event-id"])).size).toBe(n)
        const byDelivery = new Map<string, Array<typeof attempts[number]>>()
        for (const a of attempts) byDelivery.set(a.delivery_id, [...(byDelivery.get(a.delivery_id) ?? []), a])
        expect(byDelivery.size).toBe(n)
        for (const list of byDelivery.values()) {
          // Numbered 1..k, every attempt but the last a recorded failure, the last the success.
          expect(list.map((a) => a.attempt)).toEqual(list.map((_, i) => i + 1))
          expect(list.slice(0, -1).every((a) => a.error_code !== null)).toBe(true)
          expect(list[list.length - 1]!.error_code).toBeNull()
        }
        const retried = [...byDelivery.values()].filter((l) => l.length > 1).length
        if (retried > 0) console.log(`several processes: ${retried} of ${n} deliveries needed a second attempt (timeouts under load)`)
        const rows = yield* sql<{ workers: number }>`
          SELECT count(DISTINCT worker)::int AS workers FROM delivery_attempts a
          JOIN deliveries d ON d.id = a.delivery_id WHERE d.org_id = ${org.orgId}`
        // Both processes did work.
        expect(rows[0]!.workers).toBe(2)
      }), { timeout: 300_000 })
  })
})
