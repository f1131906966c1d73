/**
 * The platform over real HTTP: envelopes, validation, unknown routes, faults, authentication,
 * rate limiting, idempotency and the operational endpoints, on PGlite or PostgreSQL (DATABASE_URL).
 */
import { OpenApi } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Validator } from "@seriousme/openapi-schema-validator"
import { Effect, Layer } from "effect"
import { readFileSync } from "node:fs"
import { request } from "node:http"
import { MailroomApi } from "../src/Api.js"
import { Provisioning } from "../src/identity/Provisioning.js"
import { CREDENTIAL_CACHE_TTL_MS } from "../src/platform/Credentials.js"
import * as SqlCounters from "../src/platform/SqlCounters.js"
import { call } from "./support/http.js"
import { TestServer, testService, usingRealPostgres } from "./support/harness.js"

const newOrg = Effect.gen(function*() {
  const provisioning = yield* Provisioning
  const org = yield* provisioning.createOrganization({ name: "Acme", plan: "developer" })
  const key = yield* provisioning.issueApiKey(org.id)
  return { orgId: org.id, apiKey: key.apiKey, keyId: key.id }
})

const Env = Provisioning.Default.pipe(Layer.provideMerge(testService()))

layer(Env, { timeout: 120_000, excludeTestServices: true })(
  "platform",
  (it) => {
    describe("operational endpoints", () => {
      it.effect("health checks the database", () =>
        Effect.gen(function*() {
          const r = yield* call("GET", "/v1/health")
          expect(r.status).toBe(200)
          expect(r.body).toEqual({ success: true, data: { status: "ok", database: "ok", version: expect.any(String) } })
          expect(r.headers.get("ratelimit-limit")).toBeNull() // exempt
        }))

      it.effect("health answered at the server and by its handler alike: same status, headers and body; HEAD without a body", () =>
        Effect.gen(function*() {
          const server = yield* TestServer
          const probes = () => SqlCounters.snapshot().paths["http GET /v1/health"]?.finished ?? 0
          const before = probes()
          const get = (target: string, method = "GET") =>
            Effect.promise(async () => {
              const r = await fetch(`${server.baseUrl}${target}`, { method })
              const names: Array<string> = []
              r.headers.forEach((_value, name) => names.push(name))
              return { status: r.status, headers: names.sort(), requestId: r.headers.get("x-request-id"), text: await r.text(), length: r.headers.get("content-length") }
            })
          // `/v1/health` exactly takes the lane (platform/HealthLane.ts); any query string, the handler.
          const lane = yield* get("/v1/health")
          const handler = yield* get("/v1/health?from=handler")
          expect(lane.status).toBe(200)
          expect({ ...lane, requestId: undefined }).toEqual({ ...handler, requestId: undefined })
          expect(lane.requestId).toMatch(/^req_[A-Za-z0-9]{20}$/)
          expect(lane.requestId).not.toBe(handler.requestId)
          const head = yield* get("/v1/health", "HEAD")
          expect(head.status).toBe(200)
          expect(head.text).toBe("")
          expect(head.length).toBe(String(Buffer.byteLength(lane.text)))
          // Each answer is one operation of the counters, whichever way it was answered.
          expect(probes() - before).toBe(2)
          // A probe with a body goes to the handler, whose pipeline bounds the body: past the
          // operation's limit it is refused with 413, not read to its end.
          const withBody = (length: number, body: string) =>
            Effect.async<{ status: number; text: string }>((resume) => {
              const req = request(`${server.baseUrl}/v1/health`, { method: "GET", headers: { "content-length": String(length), connection: "close" } }, (res) => {
                let text = ""
                res.on("data", (c: Buffer) => (text += c.toString("utf8")))
                res.on("end", () => resume(Effect.succeed({ status: res.statusCode!, text })))
              })
              req.on("error", (e) => resume(Effect.die(e)))
              req.end(body)
            })
          const small = yield* withBody(2, "{}")
          expect(small.status).toBe(200)
          expect(small.text).toBe(lane.text)
          const huge = yield* withBody(1 << 30, "x")
          expect(huge.status).toBe(413)
          expect(JSON.parse(huge.text).error.code).toBe("payload_too_large")
        }))

      it.effect("discovery lists every operation callable without a token", () =>
        Effect.gen(function*() {
          const server = yield* TestServer
          const r = yield* call("GET", "/v1/discovery")
          expect(r.status).toBe(200)
          expect(r.body.data.base_url).toBe(`${server.baseUrl}/v1`)
          const ops = r.body.data.public_operations.map((o: { method: string; path: string }) => `${o.method} ${o.path}`)
          expect(ops).toContain("POST /v1/agent/accounts")
          expect(ops).toContain("GET /v1/health")
          expect(ops).not.toContain("GET /v1/account")
        }))

      it.effect("serves a valid OpenAPI 3.1 document equal to the committed snapshot", () =>
        Effect.gen(function*() {
          const r = yield* call("GET", "/v1/openapi.json")
          expect(r.status).toBe(200)
          expect(r.body.openapi).toBe("3.1.0")
          const snapshot = JSON.parse(readFileSync(new URL("./__snapshots__/openapi.json", import.meta.url), "utf8"))
          // Contract drift fails here: refresh with `npm run openapi` and review the diff.
          expect(r.body).toEqual(snapshot)
          expect(OpenApi.fromApi(MailroomApi)).toEqual(snapshot)
          const result = yield* Effect.promise(() => new Validator().validate(r.body))
          expect(JSON.stringify(result.errors ?? []).slice(0, 500)).toBe("[]")
          expect(result.valid).toBe(true)
          // Operations name their error responses; the built-in decode error is replaced by ours.
          const account = r.body.paths["/v1/account"].get
          expect(Object.keys(account.responses).sort()).toEqual(["200", "400", "401", "403", "404", "429", "500", "503"])
          expect(account.security).toEqual([{ bearer: [] }])
          expect(JSON.stringify(r.body)).not.toContain("HttpApiDecodeError")
          expect(r.body.components.schemas.NotFoundError.properties.error.properties.code.enum).toEqual(["not_found"])
          // What the request pipeline answers around every handler is declared on the operations it reaches
          // (and test/support/http.ts fails any test that sees an undeclared status).
          for (const [path, item] of Object.entries(r.body.paths as Record<string, Record<string, { responses: object; requestBody?: unknown }>>)) {
            for (const [method, op] of Object.entries(item)) {
              const statuses = Object.keys(op.responses)
              expect(statuses, `${method} ${path}`).toEqual(expect.arrayContaining(["400", "429", "500", "503"]))
              if (op.requestBody !== undefined) expect(statuses, `${method} ${path}`).toEqual(expect.arrayContaining(["413", "415"]))
              if (method === "post") expect(statuses, `${method} ${path}`).toContain("409")
            }
          }
          expect(Object.keys(r.body.paths["/v1/endpoints"].post.responses)).toEqual(expect.arrayContaining(["200", "201"]))
          expect(Object.keys(r.body.paths["/v1/agent/accounts"].post.responses)).toContain("409")
          expect(r.body.components.schemas.UnsupportedMediaTypeError.properties.error.properties.code.enum).toEqual(["unsupported_media_type"])
          // A path parameter past the router's limit is the request's fault (400), not a missing method (405).
          const long = yield* call("GET", `/v1/domains/${"a".repeat(5000)}`)
          expect(long.status).toBe(400)
          expect(long.body.error.code).toBe("validation_error")
          const wrongMethod = yield* call("PUT", "/v1/health")
          expect(wrongMethod.status).toBe(405)
          expect(wrongMethod.headers.get("allow")).toBe("GET")
        }))

      it.effect("serves docs, auth.md and protected-resource metadata", () =>
        Effect.gen(function*() {
          const server = yield* TestServer
          const docs = yield* call("GET", "/docs")
          expect(docs.status).toBe(200)
          expect(docs.text).toContain("<html")
          expect(docs.text).not.toMatch(/<script[^>]+src="https?:/) // everything inline: works offline
          const md = yield* call("GET", "/auth.md")
          expect(md.status).toBe(200)
          expect(md.headers.get("content-type")).toContain("text/markdown")
          expect(md.text).toContain("POST " + server.baseUrl + "/v1/agent/accounts")
          const meta = yield* call("GET", "/.well-known/oauth-protected-resource")
          expect(meta.status).toBe(200)
          expect(meta.body.resource).toBe(`${server.baseUrl}/v1`)
          expect(meta.body.bearer_methods_supported).toEqual(["header"])
        }))
    })

    describe("errors and validation", () => {
      it.effect("unknown routes are 404 not_found in the envelope", () =>
        Effect.gen(function*() {
          for (const [method, path] of [["GET", "/v1/nope"], ["POST", "/v1/nope"], ["GET", "/nothing"]] as const) {
            const r = yield* call(method, path)
            expect(r.status).toBe(404)
            expect(r.body.success).toBe(false)
            expect(r.body.error.code).toBe("not_found")
          }
        }))

      it.effect("unknown body property is 400 validation_error naming the field", () =>
        Effect.gen(function*() {
          const r = yield* call("POST", "/v1/agent/accounts", { body: { terms_accepted: true, extra: 1 } })
          expect(r.status).toBe(400)
          expect(r.body.error.code).toBe("validation_error")
          expect(r.body.error.message).toMatch(/^extra: /)
        }))

      it.effect("wrong types, too long values and missing fields list every field", () =>
        Effect.gen(function*() {
          const r = yield* call("POST", "/v1/agent/accounts", { body: { terms_accepted: "yes", device_name: "x".repeat(81) } })
          expect(r.status).toBe(400)
          expect(r.body.error.code).toBe("validation_error")
          const lines: Array<string> = r.body.error.message.split("; ")
          expect(lines.some((l) => l.startsWith("terms_accepted: "))).toBe(true)
          expect(lines.some((l) => l.startsWith("device_name: "))).toBe(true)
          expect(r.body.error.details.issues.map((i: { field: string }) => i.field).sort()).toEqual([
            "device_name",
            "terms_accepted"
          ])
          const missing = yield* call("POST", "/v1/agent/accounts", { body: {} })
          expect(missing.status).toBe(400)
          expect(missing.body.error.message).toMatch(/^terms_accepted: /)
          const notTrue = yield* call("POST", "/v1/agent/accounts", { body: { terms_accepted: false } })
          expect(notTrue.status).toBe(400)
          expect(notTrue.body.error.message).toContain("terms_accepted: must be true")
        }))

      it.effect("malformed JSON is 400 validation_error", () =>
        Effect.gen(function*() {
          const r = yield* call("POST", "/v1/agent/accounts", { raw: "{\"terms_accepted\": tru" })
          expect(r.status).toBe(400)
          expect(r.body.error.code).toBe("validation_error")
          expect(r.body.error.message).toContain("body: ")
          const notObject = yield* call("POST", "/v1/agent/accounts", { raw: "[1,2]" })
          expect(notObject.status).toBe(400)
          expect(notObject.body.error.code).toBe("validation_error")
        }))

      it.effect("an unhandled fault is 500 internal_error with a request id and no internals", () =>
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const { apiKey } = yield* newOrg
          // Break the account query: the handler dies with a database error.
          yield* sql`ALTER TABLE organizations RENAME COLUMN onboarding_step TO onboarding_step_x`
          const r = yield* call("GET", "/v1/account", { token: apiKey }).pipe(
            Effect.ensuring(
              Effect.orDie(sql`ALTER TABLE organizations RENAME COLUMN onboarding_step_x TO onboarding_step`)
            )
          )
          expect(r.status).toBe(500)
          expect(r.body.error.code).toBe("internal_error")
          expect(r.body.error.details.request_id).toBe(r.headers.get("x-request-id"))
          expect(r.text).not.toMatch(/onboarding_step|SqlError|at .*\.ts/)
          const ok = yield* call("GET", "/v1/account", { token: apiKey })
          expect(ok.status).toBe(200)
        }))
    })

    describe("authentication", () => {
      it.effect("missing, malformed, unknown and revoked credentials are 401 with WWW-Authenticate", () =>
        Effect.gen(function*() {
          const server = yield* TestServer
          const sql = yield* SqlClient.SqlClient
          const { apiKey, keyId } = yield* newOrg
          const challenge =
            `Bearer realm="mailroom", resource_metadata="${server.baseUrl}/.well-known/oauth-protected-resource"`
          const cases: Array<Record<string, string>> = [
            {},
            { authorization: `Basic ${Buffer.from("a:b").toString("base64")}` },
            { authorization: apiKey }, // no scheme
            { authorization: "Bearer mr_live_doesnotexist0000000000000000000" },
            { authorization: "Bearer mr_at_doesnotexist00000000000000000000" }
          ]
          for (const headers of cases) {
            const r = yield* call("GET", "/v1/account", { headers })
            expect(r.status).toBe(401)
            expect(r.body.error.code).toBe("unauthorized")
            expect(r.headers.get("www-authenticate")).toBe(challenge)
            expect(r.headers.get("ratelimit-limit")).toBe("120")
          }
          const ok = yield* call("GET", "/v1/account", { token: apiKey })
          expect(ok.status).toBe(200)
          // Revoked behind the service's back (as another process would): the credential cache hears
          // of it by NOTIFY on PostgreSQL, and its entries live CREDENTIAL_CACHE_TTL_MS at most.
          yield* sql`UPDATE api_keys SET revoked_at = now() WHERE id = ${keyId}`
          const bound = Date.now() + (usingRealPostgres() ? 1_000 : CREDENTIAL_CACHE_TTL_MS + 1_000)
          let revoked = yield* call("GET", "/v1/account", { token: apiKey })
          while (revoked.status === 200 && Date.now() < bound) {
            yield* Effect.sleep("50 millis")
            revoked = yield* call("GET", "/v1/account", { token: apiKey })
          }
          expect(revoked.status).toBe(401)
          expect(revoked.headers.get("www-authenticate")).toBe(challenge)
        }))

      it.effect("credentials are stored only as hashes", () =>
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const { apiKey } = yield* newOrg
          const rows = yield* sql<{ t: string }>`SELECT row_to_json(k)::text AS t FROM api_keys k`
          expect(rows.length).toBeGreaterThan(0)
          for (const r of rows) expect(r.t).not.toContain(apiKey.slice(8))
        }))
    })

    describe("rate limiting", () => {
      it.effect("the 121st request in 60 s is 429 rate_limited with Retry-After; other orgs unaffected", () =>
        Effect.gen(function*() {
          const a = yield* newOrg
          const b = yield* newOrg
          let last = yield* call("GET", "/v1/account", { token: a.apiKey })
          expect(last.headers.get("ratelimit-remaining")).toBe("119")
          expect(last.headers.get("ratelimit-policy")).toBe("120;w=60")
          const reset = Number(last.headers.get("ratelimit-reset"))
          expect(reset).toBeGreaterThan(Date.now() / 1000)
          expect(reset).toBeLessThanOrEqual(Math.ceil(Date.now() / 1000) + 60)
          const replies = yield* Effect.forEach(
            Array.from({ length: 119 }),
            () => call("GET", "/v1/account", { token: a.apiKey }),
            { concurrency: 8 }
          )
          expect(replies.every((r) => r.status === 200)).toBe(true)
          last = yield* call("GET", "/v1/account", { token: a.apiKey })
          expect(last.status).toBe(429)
          expect(last.body.error.code).toBe("rate_limited")
          expect(Number(last.headers.get("retry-after"))).toBeGreaterThan(0)
          expect(Number(last.headers.get("retry-after"))).toBeLessThanOrEqual(60)
          expect(last.headers.get("ratelimit-remaining")).toBe("0")
          expect(last.headers.get("ratelimit-limit")).toBe("120")
          expect(last.headers.get("ratelimit-reset")).not.toBeNull()
          const other = yield* call("GET", "/v1/account", { token: b.apiKey })
          expect(other.status).toBe(200)
          expect(other.headers.get("ratelimit-remaining")).toBe("119")
          // Exempt paths still answer.
          expect((yield* call("GET", "/v1/health")).status).toBe(200)
        }))
    })

    describe("idempotency", () => {
      it.effect("a retry with the same key replays the original result", () =>
        Effect.gen(function*() {
          const { apiKey } = yield* newOrg
          const headers = { "idempotency-key": `k-${Math.random()}` }
          const first = yield* call("POST", "/v1/filters", { token: apiKey, body: { type: "blocklist", pattern: "retry@example.com" }, headers })
          expect(first.status).toBe(201)
          expect(first.headers.get("idempotency-key")).toBe(headers["idempotency-key"])
          expect(first.headers.get("idempotent-replayed")).toBeNull()
          const again = yield* call("POST", "/v1/filters", {
            token: apiKey,
            // Same canonical body with keys in another order and other whitespace.
            raw: "{ \"pattern\" : \"retry@example.com\",\n \"type\":\"blocklist\" }",
            headers
          })
          expect(again.status).toBe(201)
          expect(again.text).toBe(first.text)
          expect(again.headers.get("idempotent-replayed")).toBe("true")
        }))

      it.effect("a key whose result handed out a credential: run once, never replayed to an anonymous caller, nothing of it at rest", () =>
        Effect.gen(function*() {
          const headers = { "idempotency-key": `k-${Math.random()}` }
          const first = yield* call("POST", "/v1/agent/accounts", { body: { terms_accepted: true }, headers })
          expect(first.status).toBe(200)
          expect(first.headers.get("cache-control")).toBe("no-store")
          const again = yield* call("POST", "/v1/agent/accounts", { raw: "{ \"terms_accepted\" : true }", headers })
          expect(again.status).toBe(409)
          expect(again.body.error.code).toBe("conflict")
          const apiKey: string = first.body.data.api_key
          expect(again.text).not.toContain(apiKey)
          // The row is addressed by a hash of the key and holds no credential.
          const sql = yield* SqlClient.SqlClient
          const rows = yield* sql<{ t: string }>`SELECT row_to_json(k)::text AS t FROM idempotency_keys k`
          for (const r of rows) {
            expect(r.t).not.toContain(apiKey.slice(8))
            expect(r.t).not.toContain(headers["idempotency-key"])
          }
        }))

      it.effect("derived keys are per credential: another key of the same organization is not replayed", () =>
        Effect.gen(function*() {
          const provisioning = yield* Provisioning
          const { orgId, apiKey } = yield* newOrg
          const second = yield* provisioning.issueApiKey(orgId)
          const body = { type: "blocklist", pattern: `@derived-${Math.random().toString(36).slice(2)}.example` }
          const a = yield* call("POST", "/v1/filters", { token: apiKey, body })
          expect(a.status).toBe(201)
          const again = yield* call("POST", "/v1/filters", { token: apiKey, body })
          expect(again.headers.get("idempotent-replayed")).toBe("true")
          const b = yield* call("POST", "/v1/filters", { token: second.apiKey, body })
          expect(b.headers.get("idempotent-replayed")).toBeNull()
          expect(b.status).toBe(409)
        }))

      it.effect("the same key with another body is 409 conflict", () =>
        Effect.gen(function*() {
          const headers = { "idempotency-key": `k-${Math.random()}` }
          const first = yield* call("POST", "/v1/agent/accounts", { body: { terms_accepted: true }, headers })
          expect(first.status).toBe(200)
          const other = yield* call("POST", "/v1/agent/accounts", {
            body: { terms_accepted: true, device_name: "other" },
            headers
          })
          expect(other.status).toBe(409)
          expect(other.body.error.code).toBe("conflict")
        }))

      it.effect("concurrent duplicates run once", () =>
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const name = `concurrent-${Math.random().toString(36).slice(2)}`
          const headers = { "idempotency-key": name }
          const replies = yield* Effect.forEach(
            Array.from({ length: 10 }),
            () => call("POST", "/v1/agent/accounts", { body: { terms_accepted: true, device_name: name }, headers }),
            { concurrency: "unbounded" }
          )
          const ok = replies.filter((r) => r.status === 200)
          const conflicts = replies.filter((r) => r.status === 409)
          expect(ok.length + conflicts.length).toBe(10)
          expect(ok.length).toBeGreaterThanOrEqual(1)
          expect(new Set(ok.map((r) => r.body.data.api_key)).size).toBe(1)
          for (const c of conflicts) expect(c.body.error.code).toBe("conflict")
          const orgs = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM organizations WHERE name = ${name}`
          expect(orgs[0]!.n).toBe(1)
        }))

      it.effect("without a key an action runs every time: a second anonymous account of its own, no derived key", () =>
        Effect.gen(function*() {
          const body = { terms_accepted: true, device_name: `derived-${Math.random()}` }
          const a = yield* call("POST", "/v1/agent/accounts", { body })
          const b = yield* call("POST", "/v1/agent/accounts", { body })
          expect(a.status).toBe(200)
          expect(b.status).toBe(200)
          expect(a.headers.get("idempotency-key")).toBeNull()
          expect(b.headers.get("idempotent-replayed")).toBeNull()
          expect(b.body.data.api_key).not.toBe(a.body.data.api_key)
        }))

      it.effect("a key outside 1-255 characters is 400 validation_error and nothing runs", () =>
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const name = `toolong-${Math.random()}`
          const r = yield* call("POST", "/v1/agent/accounts", {
            body: { terms_accepted: true, device_name: name.slice(0, 80) },
            headers: { "idempotency-key": "k".repeat(256) }
          })
          expect(r.status).toBe(400)
          expect(r.body.error.code).toBe("validation_error")
          expect(r.body.error.message).toMatch(/^idempotency-key: /)
          const orgs = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM organizations WHERE name = ${name.slice(0, 80)}`
          expect(orgs[0]!.n).toBe(0)
        }))

      it.effect("validation errors are not stored: the key can be reused after fixing the body", () =>
        Effect.gen(function*() {
          const headers = { "idempotency-key": `k-${Math.random()}` }
          const bad = yield* call("POST", "/v1/agent/accounts", { body: { terms_accepted: false }, headers })
          expect(bad.status).toBe(400)
          const good = yield* call("POST", "/v1/agent/accounts", { body: { terms_accepted: true }, headers })
          expect(good.status).toBe(200)
        }))
    })
  }
)

