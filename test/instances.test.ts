/**
 * Shared state across service instances: two HTTP servers on one database share the rate-limit
 * window and idempotency records, and concurrent start-ups migrate safely.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { Provisioning } from "../src/identity/Provisioning.js"
import { migrate } from "../src/platform/Database.js"
import { extraServer, testService } from "./support/harness.js"
import { call, fetchReply } from "./support/http.js"

const Env = Provisioning.Default.pipe(Layer.provideMerge(testService()))

layer(Env, { timeout: 120_000, excludeTestServices: true })("instances", (it) => {
  describe("two servers on one database", () => {
    it.scoped("share the 120 per 60 s window of an organization", () =>
      Effect.gen(function*() {
        const provisioning = yield* Provisioning
        const org = yield* provisioning.createOrganization({ name: "Shared", plan: "developer" })
        const { apiKey } = yield* provisioning.issueApiKey(org.id)
        const second = yield* extraServer
        // Alternate between the servers: 60 requests each, all accepted.
        const replies = yield* Effect.forEach(
          Array.from({ length: 120 }, (_, i) => i),
          (i) =>
            i % 2 === 0
              ? call("GET", "/v1/account", { token: apiKey })
              : Effect.promise(() => fetchReply(`${second.baseUrl}/v1/account`, "GET", { token: apiKey })),
          { concurrency: 6 }
        )
        expect(replies.filter((r) => r.status === 200).length).toBe(120)
        const one = yield* call("GET", "/v1/account", { token: apiKey })
        const two = yield* Effect.promise(() => fetchReply(`${second.baseUrl}/v1/account`, "GET", { token: apiKey }))
        expect(one.status).toBe(429)
        expect(two.status).toBe(429)
        expect(two.body.error.code).toBe("rate_limited")
      }))

    it.scoped("share idempotency records", () =>
      Effect.gen(function*() {
        const provisioning = yield* Provisioning
        const org = yield* provisioning.createOrganization({ name: "Shared keys", plan: "developer" })
        const { apiKey } = yield* provisioning.issueApiKey(org.id)
        const second = yield* extraServer
        const headers = { "idempotency-key": `shared-${Math.random()}` }
        const body = { type: "blocklist", pattern: "shared@example.com" }
        const a = yield* call("POST", "/v1/filters", { token: apiKey, body, headers })
        const b = yield* Effect.promise(() => fetchReply(`${second.baseUrl}/v1/filters`, "POST", { token: apiKey, body, headers }))
        expect(a.status).toBe(201)
        expect(b.status).toBe(201)
        expect(b.headers.get("idempotent-replayed")).toBe("true")
        expect(b.body.data.id).toBe(a.body.data.id)
      }))
  })

  describe("migrations", () => {
    it.effect("concurrent runs are safe and idempotent", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const results = yield* Effect.all([migrate(), migrate(), migrate()], { concurrency: "unbounded" })
        // Everything was applied when the service started; nothing is re-applied.
        expect(results.every((r) => r.length === 0)).toBe(true)
        const rows = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM effect_sql_migrations`
        expect(rows[0]!.n).toBeGreaterThanOrEqual(2)
      }))
  })
})
