/**
 * The retry contract against a clock the test moves: with DELIVERY_RETRY_DELAYS of minutes and
 * hours, a failing delivery is attempted again only when the clock reaches each `next_attempt_at`,
 * which is exactly the attempt's end plus the scheduled delay; 410 stops at once; a redirect is
 * never followed; a claim's lease is always longer than the HTTP timeout.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Clock, Duration, Effect, Either, Layer } from "effect"
import nodemailer from "nodemailer"
import { DeliveryQueue, leaseMillis } from "../src/deliveries/Queue.js"
import { Provisioning } from "../src/identity/Provisioning.js"
import { parseDuration } from "../src/platform/Config.js"
import { makeManualClock, TestServer, testDatabase, testServerOn } from "./support/harness.js"
import { eventually, type Hooks, startHooks } from "./support/hooks.js"
import { call } from "./support/http.js"

const DELAYS = ["1m", "10m", "1h"]
const DELAY_MS = [60_000, 600_000, 3_600_000]
const TIMEOUT_MS = 2000
const clock = makeManualClock()
const Env = Provisioning.Default.pipe(
  Layer.provideMerge(testServerOn().pipe(
    Layer.provide(clock.layer),
    Layer.provideMerge(testDatabase({
      DELIVERY_RETRY_DELAYS: DELAYS.join(","),
      DELIVERY_TIMEOUT: `${TIMEOUT_MS}ms`,
      DNS_SERVER: "127.0.0.1:9"
    }))
  ))
)

interface Row {
  id: string
  status: string
  attempt_count: number
  next_attempt_at: Date
  lease_owner: string | null
  last_error_code: string | null
  last_status_code: number | null
}

const orgTo = (hooks: Hooks, path: string) =>
  Effect.gen(function*() {
    const p = yield* Provisioning
    const org = yield* p.createOrganization({ name: "Retry", plan: "developer" })
    const { apiKey } = yield* p.issueApiKey(org.id)
    const created = yield* call("POST", "/v1/endpoints", { token: apiKey, body: { url: hooks.url(path) } })
    expect(created.status).toBe(201)
    return { orgId: org.id, address: org.managedInboxAddress }
  })

const mail = (to: string, subject: string) =>
  Effect.flatMap(TestServer, (server) =>
    Effect.promise(async () => {
      const t = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
      try {
        return await t.sendMail({ from: "a@example.com", to, subject, text: "retry contract" })
      } finally {
        t.close()
      }
    }))

const deliveryOf = (orgId: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const rows = yield* sql<Row>`SELECT id, status, attempt_count, next_attempt_at, lease_owner, last_error_code,
                                  last_status_code FROM deliveries WHERE org_id = ${orgId}`
    return rows
  })

const attemptsOf = (deliveryId: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    return yield* sql<{ attempt: number; started_at: Date; duration_ms: number }>`
      SELECT attempt, started_at, duration_ms FROM delivery_attempts WHERE delivery_id = ${deliveryId} ORDER BY attempt`
  })

/** Polls the database (real time) until the delivery has `count` recorded attempts and no lease. */
const waitForAttempts = (orgId: string, count: number) =>
  Effect.gen(function*() {
    for (let i = 0; i < 200; i++) {
      const rows = yield* deliveryOf(orgId)
      if (rows.length === 1 && rows[0]!.attempt_count >= count && rows[0]!.lease_owner === null) return rows[0]!
      yield* Effect.sleep("50 millis")
    }
    return yield* Effect.die(new Error(`delivery of ${orgId} never reached ${count} attempts`))
  })

layer(Env, { timeout: 120_000, excludeTestServices: true })("retry contract", (it) => {
  describe("schedule", () => {
    it.scoped("every next_attempt_at is the attempt's end plus its delay, and nothing runs before it", () =>
      Effect.gen(function*() {
        const hooks = yield* startHooks
        const org = yield* orgTo(hooks, "/fail/1")
        yield* mail(org.address, "always failing")
        for (let n = 1; n <= DELAYS.length; n++) {
          const row = yield* waitForAttempts(org.orgId, n)
          expect(row.status).toBe("pending")
          expect(row.last_error_code).toBe("http_500")
          const attempts = yield* attemptsOf(row.id)
          expect(attempts.map((a) => a.attempt)).toEqual(Array.from({ length: n }, (_, i) => i + 1))
          const last = attempts[n - 1]!
          const end = last.started_at.getTime() + last.duration_ms
          const lateness = row.next_attempt_at.getTime() - end - DELAY_MS[n - 1]!
          // Scheduled from the moment the result is recorded: the recording's own latency only.
          expect(lateness).toBeGreaterThanOrEqual(-5)
          expect(lateness).toBeLessThan(1000)
          // Real time passes, the test clock does not: no early attempt.
          yield* Effect.sleep("400 millis")
          expect(hooks.on("/fail/1").length).toBe(n)
          clock.advance(DELAY_MS[n - 1]!)
        }
        // The 4th attempt is the last one (1 + 3 retries): the delivery fails for good.
        const done = yield* waitForAttempts(org.orgId, DELAYS.length + 1)
        expect(done.status).toBe("failed")
        expect(done.attempt_count).toBe(DELAYS.length + 1)
        clock.advance(24 * 3_600_000)
        yield* Effect.sleep("400 millis")
        expect(hooks.on("/fail/1").length).toBe(DELAYS.length + 1)
        // Every attempt carried its number.
        expect(hooks.on("/fail/1").map((h) => h.headers["mailroom-attempt"])).toEqual(["1", "2", "3", "4"])
      }))
  })

  describe("final answers", () => {
    it.scoped("410 stops after one attempt, however far the clock moves", () =>
      Effect.gen(function*() {
        const hooks = yield* startHooks
        const org = yield* orgTo(hooks, "/gone/1")
        yield* mail(org.address, "gone")
        const row = yield* waitForAttempts(org.orgId, 1)
        expect(row.status).toBe("failed")
        expect(row.last_status_code).toBe(410)
        clock.advance(DELAY_MS.reduce((a, b) => a + b, 0) * 2)
        yield* Effect.sleep("400 millis")
        expect(hooks.on("/gone/1").length).toBe(1)
        expect((yield* deliveryOf(org.orgId))[0]!.attempt_count).toBe(1)
      }))

    it.scoped("a redirect is never followed: recorded as http_302 and retried on schedule at the same URL", () =>
      Effect.gen(function*() {
        const hooks = yield* startHooks
        const org = yield* orgTo(hooks, "/redirect/1")
        yield* mail(org.address, "redirected")
        const row = yield* waitForAttempts(org.orgId, 1)
        expect(row.status).toBe("pending")
        expect(row.last_status_code).toBe(302)
        expect(row.last_error_code).toBe("http_302")
        expect(hooks.on("/ok").length).toBe(0)
        clock.advance(DELAY_MS[0]!)
        yield* waitForAttempts(org.orgId, 2)
        expect(hooks.on("/redirect/1").length).toBe(2)
        expect(hooks.on("/ok").length).toBe(0)
      }))
  })

  describe("lease", () => {
    it("is longer than the HTTP timeout for every timeout", () => {
      for (const t of ["1ms", "250ms", "1s", "2s", "15s", "30s", "60s", "5m", "1h"]) {
        const timeout = Either.getOrThrow(parseDuration(t))
        const lease = leaseMillis(timeout)
        expect(lease).toBeGreaterThan(Duration.toMillis(timeout))
        // Room for the DNS check (2 s) and recording on top of the HTTP timeout.
        expect(lease - Duration.toMillis(timeout)).toBeGreaterThanOrEqual(10_000)
      }
    })

    it.effect("a delivery whose lease ran out (its worker died) is claimed before the backlog", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const p = yield* Provisioning
        const org = yield* p.createOrganization({ name: "Lease", plan: "developer" })
        const endpointId = "00000000-0000-4000-8000-000000000001"
        // Due an hour from now on the service clock, so the service's own workers leave them alone.
        const t = clock.clock.unsafeCurrentTimeMillis() + 3_600_000
        yield* sql`INSERT INTO deliveries (org_id, endpoint_id, event_id, event_type, payload, next_attempt_at)
                   SELECT ${org.id}, ${endpointId}, 'evt_backlog_' || i, 'email.received', '{}', ${new Date(t)}
                   FROM generate_series(1, 50) AS i`
        yield* sql`INSERT INTO deliveries (org_id, endpoint_id, event_id, event_type, payload, next_attempt_at, lease_owner)
                   VALUES (${org.id}, ${endpointId}, 'evt_crashed', 'email.received', '{}', ${new Date(t + 600_000)}, 'w_dead:x')`
        const ahead = { ...clock.clock, currentTimeMillis: Effect.succeed(t + 7_200_000) } as Clock.Clock
        const claimed = yield* Effect.gen(function*() {
          const queue = yield* DeliveryQueue
          return yield* queue.claim("w_test", 1, 60_000)
        }).pipe(Effect.provide(DeliveryQueue.Default), Effect.withClock(ahead))
        expect(claimed.map((r) => r.event_id)).toEqual(["evt_crashed"])
        yield* sql`DELETE FROM deliveries WHERE org_id = ${org.id}`
      }))

    it.scoped("a claimed row in flight is leased past the attempt's HTTP deadline", () =>
      Effect.gen(function*() {
        const hooks = yield* startHooks
        const org = yield* orgTo(hooks, "/slow/1")
        yield* mail(org.address, "slow")
        // The receiver holds the request for 3 s; the 2 s timeout cuts it: meanwhile the row is leased.
        yield* eventually(() => hooks.on("/slow/1").length === 1 || undefined, 10_000, "the slow attempt")
        const inFlight = (yield* deliveryOf(org.orgId))[0]!
        expect(inFlight.lease_owner).not.toBeNull()
        // Measured against the service's (moved) clock; the attempt started well under 1 s ago.
        const remaining = inFlight.next_attempt_at.getTime() - clock.clock.unsafeCurrentTimeMillis()
        expect(remaining).toBeGreaterThan(TIMEOUT_MS + 10_000)
        expect(remaining).toBeLessThanOrEqual(leaseMillis(Duration.millis(TIMEOUT_MS)))
        const done = yield* waitForAttempts(org.orgId, 1)
        expect(done.last_error_code).toBe("timeout")
        expect(done.status).toBe("pending")
        // Only the one attempt: the lease kept every other claimer away while it ran.
        expect(hooks.on("/slow/1").length).toBe(1)
      }))
  })
})
