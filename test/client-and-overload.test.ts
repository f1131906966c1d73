/**
 * The request pipeline's view of its clients: which address a request comes from (TRUSTED_PROXIES),
 * what an anonymous caller may be replayed, and how an overloaded process sheds work
 * (MAX_INFLIGHT_REQUESTS: a bounded wait, then 503 `service_unavailable` with `Retry-After`, then recovery).
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { ConfigProvider, Effect, Either, Layer } from "effect"
import { connect, type Socket } from "node:net"
import { Provisioning } from "../src/identity/Provisioning.js"
import { clientAddress, parseTrustedProxies } from "../src/platform/ClientAddress.js"
import { AppConfig, appConfig } from "../src/platform/Config.js"
import { extraServer, testService } from "./support/harness.js"
import { call, fetchReply } from "./support/http.js"

const Env = Provisioning.Default.pipe(Layer.provideMerge(testService()))

/** One more server on the test database with some configuration changed. */
const serverWith = (changes: Partial<{ trustedProxies: ReadonlyArray<string>; maxInflightRequests: number }>) =>
  Effect.flatMap(AppConfig, (base) => extraServer.pipe(Effect.provideService(AppConfig, { ...base, ...changes })))

const resetLimits = Effect.flatMap(SqlClient.SqlClient, (sql) => sql`DELETE FROM rate_limit_windows`).pipe(Effect.orDie)

const anonymousWindows = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql<{ key: string; n: number }>`SELECT key, cardinality(hits)::int AS n FROM rate_limit_windows
                                  WHERE key LIKE 'api:ip:%' ORDER BY key`).pipe(Effect.orDie)

const trusted = (list: string) => {
  const parsed = parseTrustedProxies(list)
  if ("error" in parsed) throw new Error(parsed.error)
  return parsed.ok
}

layer(Env, { timeout: 120_000, excludeTestServices: true })("client address and overload", (it) => {
  describe("anonymous callers and credentials", () => {
    it.effect("two anonymous clients sending one Idempotency-Key never receive each other's API key", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const headers = { "idempotency-key": `shared-${Math.random()}` }
        const body = { terms_accepted: true }
        const first = yield* call("POST", "/v1/agent/accounts", { body, headers })
        expect(first.status).toBe(200)
        const apiKey: string = first.body.data.api_key
        // The second client shares the address (same host, or behind the same proxy): no replay.
        const second = yield* call("POST", "/v1/agent/accounts", { body, headers })
        expect(second.status).toBe(409)
        expect(second.body.error.code).toBe("conflict")
        expect(second.headers.get("idempotent-replayed")).toBeNull()
        expect(second.text).not.toContain(apiKey)
        // Nor is the credential kept at rest in the record.
        const sql = yield* SqlClient.SqlClient
        const rows = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM idempotency_keys
                                               WHERE path = '/v1/agent/accounts' AND octet_length(response_body) > 28`
        expect(rows[0]!.n).toBe(0)
      }))

    it.scoped("behind a trusted proxy, clients with one key are separate scopes: each gets an account of its own", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const proxy = yield* serverWith({ trustedProxies: ["127.0.0.1"] })
        const headers = { "idempotency-key": `proxied-${Math.random()}` }
        const body = { terms_accepted: true }
        const a = yield* Effect.promise(() =>
          fetchReply(`${proxy.baseUrl}/v1/agent/accounts`, "POST", { body, headers: { ...headers, "x-forwarded-for": "198.51.100.1" } })
        )
        const b = yield* Effect.promise(() =>
          fetchReply(`${proxy.baseUrl}/v1/agent/accounts`, "POST", { body, headers: { ...headers, "x-forwarded-for": "198.51.100.2" } })
        )
        expect(a.status).toBe(200)
        expect(b.status).toBe(200)
        expect(b.headers.get("idempotent-replayed")).toBeNull()
        expect(b.body.data.api_key).not.toBe(a.body.data.api_key)
      }))
  })

  describe("TRUSTED_PROXIES", () => {
    it.effect("by default forwarding headers are ignored: a spoofed X-Forwarded-For shares the peer's bucket", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const one = yield* call("GET", "/v1/account", { headers: { "x-forwarded-for": "203.0.113.7" } })
        const two = yield* call("GET", "/v1/account", { headers: { "x-forwarded-for": "203.0.113.8", forwarded: "for=203.0.113.9" } })
        expect(one.status).toBe(401)
        expect(Number(two.headers.get("ratelimit-remaining"))).toBe(Number(one.headers.get("ratelimit-remaining")) - 1)
        expect(yield* anonymousWindows).toEqual([{ key: "api:ip:127.0.0.1", n: 2 }])
      }))

    it.scoped("from a peer outside the list they are ignored too", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const other = yield* serverWith({ trustedProxies: ["10.0.0.0/8", "::2"] })
        for (const xff of ["203.0.113.7", "203.0.113.8"]) {
          const r = yield* Effect.promise(() => fetchReply(`${other.baseUrl}/v1/account`, "GET", { headers: { "x-forwarded-for": xff } }))
          expect(r.status).toBe(401)
        }
        expect(yield* anonymousWindows).toEqual([{ key: "api:ip:127.0.0.1", n: 2 }])
      }))

    it.scoped("from a trusted peer each forwarded client has its own bucket", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const proxy = yield* serverWith({ trustedProxies: ["127.0.0.0/8"] })
        const get = (headers: Record<string, string>) =>
          Effect.promise(() => fetchReply(`${proxy.baseUrl}/v1/account`, "GET", { headers }))
        const a1 = yield* get({ "x-forwarded-for": "203.0.113.7" })
        const b1 = yield* get({ "x-forwarded-for": "203.0.113.8" })
        const a2 = yield* get({ "x-forwarded-for": "203.0.113.7" })
        expect(a1.headers.get("ratelimit-remaining")).toBe("119")
        expect(b1.headers.get("ratelimit-remaining")).toBe("119")
        expect(a2.headers.get("ratelimit-remaining")).toBe("118")
        // RFC 7239 wins over X-Forwarded-For; a value the client prepended itself is not believed.
        yield* get({ forwarded: "for=\"[2001:db8::1]:4711\"", "x-forwarded-for": "203.0.113.7" })
        yield* get({ "x-forwarded-for": "6.6.6.6, 203.0.113.8" })
        expect(yield* anonymousWindows).toEqual([
          { key: "api:ip:2001:db8::1", n: 1 },
          { key: "api:ip:203.0.113.7", n: 2 },
          { key: "api:ip:203.0.113.8", n: 2 }
        ])
      }))

    it("picks the nearest untrusted hop; a trusted peer forwarding nothing is the client", () => {
      const list = trusted("127.0.0.1, 10.0.0.0/8, fd00::/8")
      expect(clientAddress("127.0.0.1", { "x-forwarded-for": "1.2.3.4, 10.0.0.5" }, list)).toBe("1.2.3.4")
      expect(clientAddress("::ffff:127.0.0.1", { "x-forwarded-for": "6.6.6.6, 1.2.3.4" }, list)).toBe("1.2.3.4")
      expect(clientAddress("127.0.0.1", { "x-forwarded-for": "10.0.0.9, 10.0.0.5" }, list)).toBe("10.0.0.9")
      expect(clientAddress("127.0.0.1", {}, list)).toBe("127.0.0.1")
      expect(clientAddress("127.0.0.1", { forwarded: "for=unknown" }, list)).toBe("127.0.0.1")
      expect(clientAddress("fd00::1", { forwarded: "for=192.0.2.60;proto=http;by=203.0.113.43, for=\"[fd00::7]\"" }, list)).toBe("192.0.2.60")
      expect(clientAddress("192.0.2.1", { "x-forwarded-for": "1.2.3.4" }, list)).toBe("192.0.2.1")
      expect(clientAddress("127.0.0.1", { "x-forwarded-for": "1.2.3.4" }, undefined)).toBe("127.0.0.1")
    })

    it("a malformed list is refused at start-up, naming the variable", () => {
      const load = (env: Record<string, string>) =>
        Effect.runSync(Effect.either(Effect.withConfigProvider(appConfig, ConfigProvider.fromMap(new Map(Object.entries(env))))))
      const bad = load({ TRUSTED_PROXIES: "10.0.0.0/8, nonsense" })
      expect(Either.isLeft(bad) && String(bad.left)).toMatch(/TRUSTED_PROXIES.*nonsense/)
      const badPrefix = load({ TRUSTED_PROXIES: "10.0.0.0/33" })
      expect(Either.isLeft(badPrefix) && String(badPrefix.left)).toMatch(/TRUSTED_PROXIES/)
      const negative = load({ MAX_INFLIGHT_REQUESTS: "-1" })
      expect(Either.isLeft(negative) && String(negative.left)).toMatch(/MAX_INFLIGHT_REQUESTS/)
      const ok = load({ TRUSTED_PROXIES: " 10.0.0.0/8 ,::1 ", MAX_INFLIGHT_REQUESTS: "0" })
      expect(Either.isRight(ok) && ok.right.trustedProxies).toEqual(["10.0.0.0/8", "::1"])
      expect(Either.isRight(ok) && ok.right.maxInflightRequests).toBe(0)
      const defaults = load({})
      expect(Either.isRight(defaults) && defaults.right.trustedProxies).toEqual([])
    })
  })

  describe("MAX_INFLIGHT_REQUESTS", () => {
    it.scoped("past the cap a request waits, then is 503 service_unavailable with Retry-After; health says so; it recovers when load drops", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const provisioning = yield* Provisioning
        const org = yield* provisioning.createOrganization({ name: "Overload", plan: "developer" })
        const { apiKey } = yield* provisioning.issueApiKey(org.id)
        // One organization holds at most a quarter of the cap: two others hold one request each.
        const holders = yield* Effect.forEach([1, 2], () =>
          Effect.flatMap(provisioning.createOrganization({ name: "Holder", plan: "developer" }), (o) => provisioning.issueApiKey(o.id)))
        const server = yield* serverWith({ maxInflightRequests: 2 })

        // Two requests held in progress: their bodies arrive slowly.
        const body = (i: number) => JSON.stringify({ type: "blocklist", pattern: `slow-${i}-${Math.random()}@example.com` })
        const slow: Array<{ socket: Socket; rest: string; reply: Promise<string> }> = []
        for (const i of [1, 2]) {
          const b = body(i)
          const socket = yield* Effect.async<Socket>((resume) => {
            const s = connect(server.port, "127.0.0.1", () => resume(Effect.succeed(s)))
          })
          const reply = new Promise<string>((resolve) => {
            let data = ""
            socket.on("data", (c) => {
              data += c.toString()
            })
            socket.on("close", () => resolve(data))
          })
          socket.write(
            `POST /v1/filters HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${holders[i - 1]!.apiKey}\r\n` +
              `content-type: application/json\r\ncontent-length: ${Buffer.byteLength(b)}\r\nconnection: close\r\n\r\n${b.slice(0, 5)}`
          )
          slow.push({ socket, rest: b.slice(5), reply })
        }
        yield* Effect.addFinalizer(() => Effect.sync(() => slow.forEach((s) => s.socket.destroy())))

        const get = (path: string) =>
          Effect.promise(() => fetchReply(`${server.baseUrl}${path}`, "GET", { token: apiKey }))
        // Wait until both are admitted (the cap is then reached).
        let shed = yield* get("/v1/account")
        for (let i = 0; i < 100 && shed.status !== 503; i++) {
          yield* Effect.sleep("50 millis")
          shed = yield* get("/v1/account")
        }
        expect(shed.status).toBe(503)
        expect(shed.headers.get("retry-after")).toBe("1")
        expect(shed.headers.get("x-request-id")).toMatch(/^req_/)
        expect(shed.body).toEqual({
          success: false,
          error: { code: "service_unavailable", message: expect.stringContaining("capacity"), details: { retry_after: 1 } }
        })
        // Refused before any work: nothing counted against the organization's window. Admission
        // commits its bookkeeping asynchronously, so compare counts once they have settled.
        const sql = yield* SqlClient.SqlClient
        const count = sql<{ n: number }>`SELECT coalesce(sum(cardinality(hits)), 0)::int AS n FROM rate_limit_windows
                                         WHERE key = ${`api:org:${org.id}`}`.pipe(Effect.map((rows) => rows[0]!.n))
        const settled = Effect.gen(function*() {
          let last = yield* count
          for (let i = 0; i < 50; i++) {
            yield* Effect.sleep("150 millis")
            const now = yield* count
            if (now === last) return now
            last = now
          }
          return last
        })
        // The probes that got in before both were admitted.
        const before = yield* settled
        const refused = yield* get("/v1/account")
        expect(refused.status).toBe(503)
        const after = yield* settled
        expect(after).toBe(before)

        // The health probe tells a balancer the truth: nothing is admitted here now.
        const health = yield* get("/v1/health")
        expect(health.status).toBe(503)
        expect(health.body.error.code).toBe("service_unavailable")

        // The held requests finish normally, and the very next request is served.
        for (const s of slow) s.socket.write(s.rest)
        const replies = yield* Effect.promise(() => Promise.all(slow.map((s) => s.reply)))
        for (const r of replies) expect(r).toMatch(/^HTTP\/1\.1 201 /)
        let recovered = yield* get("/v1/account")
        for (let i = 0; i < 20 && recovered.status !== 200; i++) {
          yield* Effect.sleep("20 millis")
          recovered = yield* get("/v1/account")
        }
        expect(recovered.status).toBe(200)
      }))

    it.effect("the default configuration sheds nothing under ordinary concurrency", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const provisioning = yield* Provisioning
        const org = yield* provisioning.createOrganization({ name: "Ordinary", plan: "developer" })
        const { apiKey } = yield* provisioning.issueApiKey(org.id)
        const replies = yield* Effect.forEach(
          Array.from({ length: 40 }),
          () => call("GET", "/v1/account", { token: apiKey }),
          // An organization's share of the default cap (128 / 4) at once.
          { concurrency: 32 }
        )
        expect(replies.map((r) => r.status).filter((s) => s !== 200)).toEqual([])
      }))
  })
})
