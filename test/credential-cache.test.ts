/**
 * The credential cache of the request pipeline: a revoked credential is refused at once by the
 * process that revoked it, and within a bounded time by another process (NOTIFY on PostgreSQL; on
 * the embedded database, where a second server in one test process has no LISTEN, the entries'
 * short life bounds it). The 120/min window is still counted on every request.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { Provisioning } from "../src/identity/Provisioning.js"
import { CREDENTIAL_CACHE_TTL_MS } from "../src/platform/Credentials.js"
import { extraServer, TestServer, usingRealPostgres } from "./support/harness.js"
import { call, fetchReply } from "./support/http.js"
import { identityService, resetLimits, signUp, uniqueEmail } from "./support/identity.js"

const Env = Provisioning.Default.pipe(Layer.provideMerge(identityService({ LOG_LEVEL: "warning" })))

/** Another process hears of a change within this: NOTIFY on PostgreSQL, the cache's TTL otherwise. */
const BOUND_MS = usingRealPostgres() ? 1_000 : CREDENTIAL_CACHE_TTL_MS + 1_000

/** Milliseconds until `base` answers `status` to GET /v1/account with `token` (fails past `within`). */
const untilStatus = (base: string, token: string, status: number, within: number) =>
  Effect.promise(async () => {
    const t0 = Date.now()
    for (;;) {
      const r = await fetchReply(`${base}/v1/account`, "GET", { token })
      if (r.status === status) return Date.now() - t0
      if (Date.now() - t0 > within) throw new Error(`still ${r.status} after ${within} ms`)
      await new Promise((resolve) => setTimeout(resolve, 25))
    }
  })

layer(Env, { timeout: 120_000, excludeTestServices: true })("credential cache", (it) => {
  describe("revocation", () => {
    it.scoped("logout: refused at once here, within the bound by another server that had the grant cached", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const other = yield* extraServer
        const set = yield* signUp("cli", uniqueEmail("cache-logout"))
        const token: string = set.access_token
        // Both servers have resolved (and cached) the token.
        expect((yield* call("GET", "/v1/account", { token })).status).toBe(200)
        expect((yield* Effect.promise(() => fetchReply(`${other.baseUrl}/v1/account`, "GET", { token }))).status).toBe(200)

        const out = yield* call("POST", "/v1/cli/logout", { token })
        expect(out.status).toBe(200)
        const here = yield* call("GET", "/v1/account", { token })
        expect(here.status).toBe(401)
        expect(here.body.error.code).toBe("unauthorized")
        yield* untilStatus(other.baseUrl, token, 401, BOUND_MS)
      }))

    it.scoped("a refresh ends the old access token at once here; another process follows within the bound", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const other = yield* extraServer
        const set = yield* signUp("cli", uniqueEmail("cache-refresh"))
        const token: string = set.access_token
        expect((yield* call("GET", "/v1/account", { token })).status).toBe(200)
        expect((yield* Effect.promise(() => fetchReply(`${other.baseUrl}/v1/account`, "GET", { token }))).status).toBe(200)
        const refreshed = yield* call("POST", "/v1/cli/token/refresh", { body: { refresh_token: set.refresh_token } })
        expect(refreshed.status).toBe(200)
        expect((yield* call("GET", "/v1/account", { token })).status).toBe(401)
        expect((yield* call("GET", "/v1/account", { token: refreshed.body.data.access_token })).status).toBe(200)
        yield* untilStatus(other.baseUrl, token, 401, BOUND_MS)
      }))

    it.scoped("an API key revoked by another process (a statement on the database) is refused within the bound everywhere", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const provisioning = yield* Provisioning
        const org = yield* provisioning.createOrganization({ name: "Cache", plan: "developer" })
        const key = yield* provisioning.issueApiKey(org.id)
        const other = yield* extraServer
        expect((yield* call("GET", "/v1/account", { token: key.apiKey })).status).toBe(200)
        expect((yield* Effect.promise(() => fetchReply(`${other.baseUrl}/v1/account`, "GET", { token: key.apiKey }))).status).toBe(200)
        const sql = yield* SqlClient.SqlClient
        yield* sql`UPDATE api_keys SET revoked_at = now() WHERE id = ${key.id}`
        // Neither server made the change: both hear of it.
        const self = yield* TestServer
        yield* untilStatus(self.baseUrl, key.apiKey, 401, BOUND_MS)
        const tookOther = yield* untilStatus(other.baseUrl, key.apiKey, 401, BOUND_MS)
        expect(tookOther).toBeLessThanOrEqual(BOUND_MS)
      }))

    it.scoped("a removed membership ends its user's access token within the bound", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const other = yield* extraServer
        const set = yield* signUp("cli", uniqueEmail("cache-member"))
        const token: string = set.access_token
        expect((yield* Effect.promise(() => fetchReply(`${other.baseUrl}/v1/account`, "GET", { token }))).status).toBe(200)
        const sql = yield* SqlClient.SqlClient
        yield* sql`DELETE FROM memberships WHERE org_id = ${set.org_id}`
        yield* untilStatus(other.baseUrl, token, 401, BOUND_MS)
      }))
  })

  describe("the window is still counted on every request", () => {
    it.effect("a cached credential gets exactly 120 per 60 s", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const provisioning = yield* Provisioning
        const org = yield* provisioning.createOrganization({ name: "Counted", plan: "developer" })
        const { apiKey } = yield* provisioning.issueApiKey(org.id)
        const replies = yield* Effect.forEach(Array.from({ length: 125 }), () => call("GET", "/v1/account", { token: apiKey }), {
          concurrency: 8
        })
        expect(replies.filter((r) => r.status === 200).length).toBe(120)
        expect(replies.filter((r) => r.status === 429).length).toBe(5)
      }))
  })
})
