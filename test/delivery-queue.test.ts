/**
 * The delivery queue's statements on their own (no dispatcher): a claim returns each row with the
 * facts its precheck needs; completions that arrive together are written together, each fenced by
 * its claim token; an endpoint's answer with NUL or half a surrogate pair is recorded, not refused.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Clock, Effect, Layer } from "effect"
import { type AttemptRecord, DeliveryQueue } from "../src/deliveries/Queue.js"
import { Provisioning } from "../src/identity/Provisioning.js"
import { testDatabase } from "./support/harness.js"

// The queue's times follow the Clock; these tests need real time (the rows are due in the past).
const Env = Layer.mergeAll(Provisioning.Default, DeliveryQueue.Default).pipe(Layer.provideMerge(testDatabase()))

const attempt = (n: number, excerpt: string): AttemptRecord => ({
  attempt: n,
  startedAt: new Date(),
  durationMs: 7,
  statusCode: 500,
  errorCode: "http_500",
  error: `endpoint answered HTTP 500: ${excerpt}`,
  responseExcerpt: excerpt
})

/** An organization, one endpoint (enabled or not) and `n` deliveries queued for it, due now. */
const setup = (n: number, endpoint: { enabled: boolean; deactivated?: boolean }) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const p = yield* Provisioning
    const org = yield* p.createOrganization({ name: "Queue", plan: "developer" })
    const [e] = yield* sql<{ id: string }>`
      INSERT INTO endpoints (org_id, kind, url, enabled, deactivated_at)
      VALUES (${org.id}, 'http', 'http://127.0.0.1:9/q', ${endpoint.enabled}, ${endpoint.deactivated ? new Date() : null})
      RETURNING id`
    yield* sql`INSERT INTO deliveries (org_id, endpoint_id, event_id, event_type, payload, next_attempt_at)
               SELECT ${org.id}, ${e!.id}, 'evt_q_' || i, 'email.received', '{}', now() - interval '1 minute'
               FROM generate_series(1, ${n}::int) AS i`
    return { orgId: org.id, endpointId: e!.id }
  })

describe("delivery queue", () => {
  layer(Env)((it) => {
    it.effect("a claim carries the endpoint and precheck facts; completions written together stay fenced", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const queue = yield* DeliveryQueue
        const { orgId, endpointId } = yield* setup(20, { enabled: true })
        const rows = (yield* queue.claim("w_a", 100, 60_000)).filter((r) => r.org_id === orgId)
        expect(rows.length).toBe(20)
        for (const r of rows) {
          expect(r.ctx_found).toBe(true)
          expect(r.ctx_kind).toBe("http")
          expect(r.ctx_url).toBe("http://127.0.0.1:9/q")
          expect(r.ctx_enabled).toBe(true)
          expect(r.ctx_deactivated).toBe(false)
          expect(r.ctx_superseded).toBe(false)
          expect(r.ctx_discarded).toBe(false)
          expect(r.lease_owner).toMatch(/^w_a:/)
        }
        // A takeover of one row: its old claim token no longer completes it.
        const stolen = rows[0]!
        yield* sql`UPDATE deliveries SET lease_owner = 'w_b:other' WHERE id = ${stolen.id}`
        const excerpt = "nul\u0000 and half a pair \uD83D"
        const results = yield* Effect.forEach(
          rows,
          (r, i) =>
            queue.complete(r, attempt(1, i === 1 ? excerpt : "plain"), { _tag: "Retry", at: new Date(Date.now() + 60_000) }, "w_a"),
          { concurrency: "unbounded" }
        )
        expect(results[0]).toBe(false)
        expect(results.slice(1).every((ok) => ok)).toBe(true)
        const after = yield* sql<{ id: string; attempt_count: number; lease_owner: string | null; status: string }>`
          SELECT id, attempt_count, lease_owner, status FROM deliveries WHERE endpoint_id = ${endpointId}`
        for (const r of after) {
          if (r.id === stolen.id) expect([r.attempt_count, r.lease_owner]).toEqual([0, "w_b:other"])
          else expect([r.attempt_count, r.lease_owner, r.status]).toEqual([1, null, "pending"])
        }
        const recorded = yield* sql<{ delivery_id: string; response_excerpt: string }>`
          SELECT a.delivery_id, a.response_excerpt FROM delivery_attempts a JOIN deliveries d ON d.id = a.delivery_id
          WHERE d.endpoint_id = ${endpointId}`
        expect(recorded.length).toBe(19)
        expect(recorded.find((a) => a.delivery_id === rows[1]!.id)!.response_excerpt).toBe("nul\uFFFD and half a pair \uFFFD")
        // Completing again with the same (now released) token writes nothing.
        expect(yield* queue.completeNow(rows[2]!, attempt(2, "again"), { _tag: "Done", status: "failed" }, "w_a")).toBe(false)
      }).pipe(Effect.withClock(Clock.make())))

    it.effect("the claim sees a disabled or deleted endpoint and a delivery already made for the same email", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const queue = yield* DeliveryQueue
        const disabled = yield* setup(1, { enabled: false })
        const deleted = yield* setup(1, { enabled: true, deactivated: true })
        const done = yield* setup(2, { enabled: true })
        const [email] = yield* sql<{ id: string }>`
          INSERT INTO emails (org_id, recipient, size_bytes, event_type, status)
          VALUES (${done.orgId}, 'a@example.com', 1, 'email.received', 'accepted')
          RETURNING id`
        const rows = yield* queue.claim("w_c", 100, 60_000)
        const of = (orgId: string) => rows.filter((r) => r.org_id === orgId)
        expect(of(disabled.orgId).map((r) => [r.ctx_found, r.ctx_enabled])).toEqual([[true, false]])
        expect(of(deleted.orgId).map((r) => [r.ctx_found, r.ctx_deactivated])).toEqual([[true, true]])
        // Two deliveries of one email to one endpoint: once one succeeded, the other is superseded.
        const [a, b] = of(done.orgId)
        yield* sql`UPDATE deliveries SET email_id = ${email!.id}, lease_owner = NULL, next_attempt_at = now() - interval '1 minute'
                   WHERE id IN (${a!.id}, ${b!.id})`
        yield* sql`UPDATE deliveries SET status = 'delivered' WHERE id = ${a!.id}`
        yield* sql`UPDATE emails SET content_discarded_at = now() WHERE id = ${email!.id}`
        const again = (yield* queue.claim("w_d", 100, 60_000)).filter((r) => r.id === b!.id)
        expect(again.map((r) => [r.ctx_superseded, r.ctx_discarded])).toEqual([[true, true]])
      }).pipe(Effect.withClock(Clock.make())))
  })
})
