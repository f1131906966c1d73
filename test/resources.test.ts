/**
 * Domains, endpoints, filters and routes over real HTTP with a test DNS server: claim and verify,
 * every Endpoint rule and state-table row, test sends to a real receiver, filters, routes and the
 * resolver, plan gating, tenant isolation, and the platform's path/query validation and derived
 * idempotency on an authenticated POST.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Context, Effect, Layer, Option, Redacted } from "effect"
import { execFile } from "node:child_process"
import { AppConfig } from "../src/platform/Config.js"
import { createHmac, timingSafeEqual } from "node:crypto"
import { Provisioning } from "../src/identity/Provisioning.js"
import { RouteResolver } from "../src/routes/Resolver.js"
import { TestDns, testServiceWithDns } from "./support/dns.js"
import { type JsonBody, call } from "./support/http.js"
import { startReceiver } from "./support/receiver.js"

const Env = Provisioning.Default.pipe(Layer.provideMerge(testServiceWithDns()))
const MANAGED = "agents.localhost"

type Plan = "agent" | "developer" | "pro"

const newOrg = (plan: Plan = "developer") =>
  Effect.gen(function*() {
    const p = yield* Provisioning
    const org = yield* p.createOrganization({ name: "Res", plan })
    const key = yield* p.issueApiKey(org.id)
    return { orgId: org.id, token: key.apiKey, inbox: org.managedInboxAddress }
  })

/**
 * `npm run admin -- set-plan <org> <plan>`. On PostgreSQL the real command runs in a child process
 * against this file's database; the embedded database belongs to this process, so there the test
 * calls what the command calls (Provisioning.setPlan).
 */
const setPlan = (orgId: string, plan: Plan) =>
  Effect.gen(function*() {
    const config = yield* AppConfig
    if (Option.isNone(config.databaseUrl)) return yield* Effect.flatMap(Provisioning, (p) => p.setPlan(orgId, plan))
    const databaseUrl = Redacted.value(config.databaseUrl.value)
    const out = yield* Effect.promise(() =>
      new Promise<string>((resolve, reject) =>
        execFile("npx", ["tsx", "src/admin.ts", "set-plan", orgId, plan], {
          env: { ...process.env, DATABASE_URL: databaseUrl, LOG_LEVEL: "warning" }
        }, (error, stdout, stderr) => error ? reject(new Error(`${error.message}\n${stderr}`)) : resolve(stdout))
      )
    )
    expect(out).toContain(`org_id=${orgId} plan=${plan}`)
    return Option.some(orgId)
  })

/** A function of the caller's organization: these tests need its id, not a running module. */
const newFunction = (token: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const account = yield* call("GET", "/v1/account", { token })
    const rows = yield* sql<{ id: string }>`INSERT INTO functions (org_id, name, code, code_sha256, code_size_bytes)
      VALUES (${account.body.data.id}, ${`fn-${Math.random().toString(36).slice(2, 10)}`}, 'export default {}', '', 17)
      RETURNING id`.pipe(Effect.orDie)
    return rows[0]!.id
  })

let seq = 0
const uniqueDomain = (label: string) => `${label}-${++seq}-${Math.random().toString(36).slice(2, 7)}.test`

/** Claims a domain and publishes its TXT token in the test DNS, then verifies it. */
const verifiedDomain = (token: string, domain = uniqueDomain("acme")) =>
  Effect.gen(function*() {
    const dns = yield* TestDns
    const claim = yield* call("POST", "/v1/domains", { token, body: { domain } })
    expect(claim.status).toBe(201)
    dns.zone.set(`_mailroom.${domain}`, { TXT: [`mailroom-verification=${claim.body.data.verification_token}`] })
    dns.zone.set(domain, { MX: [{ exchange: `mx.${MANAGED}`, priority: 10 }], A: ["127.0.0.1"] })
    const v = yield* call("POST", `/v1/domains/${claim.body.data.id}/verify`, { token })
    expect(v.status).toBe(200)
    expect(v.body.data.verified).toBe(true)
    return { id: claim.body.data.id as string, domain }
  })

const expectError = (r: { status: number; body: JsonBody }, status: number, code: string) => {
  expect([r.status, r.body?.error?.code]).toEqual([status, code])
}

const hmacHex = (secret: string, message: string) => createHmac("sha256", secret).update(message).digest("hex")

/**
 * The receiving side's own check, written from the documented signature format, not from
 * src/webhooks/Signing.ts. Stripe-style: the header is accepted when any of its `v1` values matches.
 */
const independentVerify = (secret: string, rawBody: string, header: string, nowSeconds: number) => {
  const parts = header.split(",").map((kv) => kv.split("=") as [string, string])
  const t = Number(parts.find(([k]) => k === "t")?.[1])
  if (!Number.isInteger(t) || Math.abs(nowSeconds - t) > 300) return false
  const expected = Buffer.from(hmacHex(secret, `${t}.${rawBody}`), "hex")
  return parts.some(([k, v]) => {
    const given = Buffer.from(v ?? "", "hex")
    return k === "v1" && expected.length === given.length && timingSafeEqual(expected, given)
  })
}

layer(Env, { timeout: 120_000, excludeTestServices: true })("resources", (it) => {
  describe("domains", () => {
    it.effect("claim → unverified shape → verify without TXT stays unverified → with TXT verified", () =>
      Effect.gen(function*() {
        const dns = yield* TestDns
        const sql = yield* SqlClient.SqlClient
        const { orgId, token } = yield* newOrg()
        const domain = uniqueDomain("claim")
        const claim = yield* call("POST", "/v1/domains", { token, body: { domain: ` ${domain.toUpperCase()}` } })
        expect(claim.status).toBe(201)
        const d = claim.body.data
        expect(d).toMatchObject({ org_id: orgId, domain, verified: false })
        expect(d.verification_token).toMatch(/^[A-Za-z0-9]{32}$/)
        expect(d.dns_records).toEqual([
          { type: "TXT", name: `_mailroom.${domain}`, value: `mailroom-verification=${d.verification_token}`, priority: null, purpose: "verification" },
          { type: "MX", name: domain, value: MANAGED, priority: 10, purpose: "inbound" },
          { type: "TXT", name: `mailroom._domainkey.${domain}`, value: expect.stringMatching(/^v=DKIM1; k=rsa; p=/), priority: null, purpose: "dkim" }
        ])
        expect(d).not.toHaveProperty("is_active")
        expect(d).not.toHaveProperty("spam_threshold")

        const missing = yield* call("POST", `/v1/domains/${d.id}/verify`, { token })
        expect(missing.status).toBe(200)
        expect(missing.body.data.verified).toBe(false)
        expect(missing.body.data.verification).toMatchObject({ txt: "missing", mx: "missing" })
        expect(dns.queries).toContain(`TXT _mailroom.${domain}`)

        dns.zone.set(`_mailroom.${domain}`, { TXT: ["unrelated", "mailroom-verification=wrong"] })
        const wrong = yield* call("POST", `/v1/domains/${d.id}/verify`, { token, body: {} })
        expect(wrong.body.data.verification.txt).toBe("missing")

        dns.zone.set(`_mailroom.${domain}`, { TXT: [`mailroom-verification=${d.verification_token}`] })
        dns.zone.set(domain, { MX: [{ exchange: `mx1.${MANAGED}`, priority: 10 }] })
        const ok = yield* call("POST", `/v1/domains/${d.id}/verify`, { token })
        expect(ok.status).toBe(200)
        expect(ok.body.data).toMatchObject({ id: d.id, verified: true, is_active: true, spam_threshold: null })
        expect(ok.body.data.verification).toMatchObject({ txt: "ok", mx: "ok" })
        expect(ok.body.data).not.toHaveProperty("verification_token")
        // Once verified, the records to keep: MX and the DKIM key outgoing mail is signed with.
        expect(ok.body.data.dns_records.map((r: { purpose: string }) => r.purpose)).toEqual(["inbound", "dkim"])
        const rows = yield* sql<{ v: Date | null }>`SELECT verified_at AS v FROM domains WHERE id = ${d.id}`
        expect(rows[0]!.v).not.toBeNull()
        // Verifying again is harmless.
        expect((yield* call("POST", `/v1/domains/${d.id}/verify`, { token })).body.data.verified).toBe(true)
      }))

    it.effect("MX at another provider: claim is mx_conflict unless confirmed: true", () =>
      Effect.gen(function*() {
        const dns = yield* TestDns
        const sql = yield* SqlClient.SqlClient
        const { token } = yield* newOrg()
        const domain = uniqueDomain("gmail")
        dns.zone.set(domain, { MX: [{ exchange: "aspmx.l.google.test", priority: 1 }, { exchange: "alt1.google.test", priority: 5 }] })
        const refused = yield* call("POST", "/v1/domains", { token, body: { domain } })
        expectError(refused, 409, "mx_conflict")
        expect(refused.body.error.details).toEqual({ mx_hosts: ["aspmx.l.google.test", "alt1.google.test"], expected_mx: MANAGED })
        const none = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM domains WHERE domain = ${domain}`
        expect(none[0]!.n).toBe(0)
        const confirmed = yield* call("POST", "/v1/domains", { token, body: { domain, confirmed: true } })
        expect(confirmed.status).toBe(201)
        const row = yield* sql<{ o: boolean }>`SELECT mx_override AS o FROM domains WHERE domain = ${domain}`
        expect(row[0]!.o).toBe(true)
        dns.zone.set(`_mailroom.${domain}`, { TXT: [`mailroom-verification=${confirmed.body.data.verification_token}`] })
        const v = yield* call("POST", `/v1/domains/${confirmed.body.data.id}/verify`, { token })
        expect(v.status).toBe(200)
        expect(v.body.data.verified).toBe(true)
        expect(v.body.data.verification.mx).toBe("other_provider_confirmed")
      }))

    it.effect("MX that moved to another provider after the claim: verify is mx_conflict unless confirmed: true", () =>
      Effect.gen(function*() {
        const dns = yield* TestDns
        const { token } = yield* newOrg()
        const domain = uniqueDomain("moved")
        const claim = yield* call("POST", "/v1/domains", { token, body: { domain } })
        expect(claim.status).toBe(201)
        dns.zone.set(domain, { MX: [{ exchange: "mx.other-provider.test", priority: 10 }] })
        dns.zone.set(`_mailroom.${domain}`, { TXT: [`mailroom-verification=${claim.body.data.verification_token}`] })
        const refused = yield* call("POST", `/v1/domains/${claim.body.data.id}/verify`, { token })
        expectError(refused, 409, "mx_conflict")
        expect(refused.body.error.details.mx_hosts).toEqual(["mx.other-provider.test"])
        const bad = yield* call("POST", `/v1/domains/${claim.body.data.id}/verify`, { token, body: { confirmed: "yes" } })
        expectError(bad, 400, "validation_error")
        const ok = yield* call("POST", `/v1/domains/${claim.body.data.id}/verify`, { token, body: { confirmed: true } })
        expect(ok.status).toBe(200)
        expect(ok.body.data.verified).toBe(true)
      }))

    it.effect("claim rules: plan, managed domain, duplicates, domains verified elsewhere, bad names", () =>
      Effect.gen(function*() {
        const agent = yield* newOrg("agent")
        const refused = yield* call("POST", "/v1/domains", { token: agent.token, body: { domain: uniqueDomain("agent") } })
        expectError(refused, 403, "forbidden")
        expect(refused.body.error.details.required_plan).toBe("developer")
        const a = yield* newOrg()
        const b = yield* newOrg()
        for (const domain of [MANAGED, `x.${MANAGED}`]) {
          const r = yield* call("POST", "/v1/domains", { token: a.token, body: { domain } })
          expectError(r, 400, "validation_error")
          expect(r.body.error.message).toMatch(/^domain: /)
        }
        for (const body of [{ domain: "not a domain" }, { domain: "acme" }, {}, { domain: "a.test", extra: 1 }]) {
          expectError(yield* call("POST", "/v1/domains", { token: a.token, body }), 400, "validation_error")
        }
        const { domain } = yield* verifiedDomain(a.token)
        // (confirmed: false makes the body differ from the first claim's: an identical body within 60 s
        // would be a derived-key replay of that claim.)
        expectError(yield* call("POST", "/v1/domains", { token: a.token, body: { domain, confirmed: false } }), 409, "conflict")
        const taken = yield* call("POST", "/v1/domains", { token: b.token, body: { domain } })
        expectError(taken, 409, "conflict")
        expect(taken.body.error.message).toContain("another organization")
        // Two organizations may both claim an unverified domain; only one can verify it.
        const dns = yield* TestDns
        const contested = uniqueDomain("contested")
        const ca = yield* call("POST", "/v1/domains", { token: a.token, body: { domain: contested } })
        const cb = yield* call("POST", "/v1/domains", { token: b.token, body: { domain: contested } })
        expect([ca.status, cb.status]).toEqual([201, 201])
        dns.zone.set(`_mailroom.${contested}`, {
          TXT: [`mailroom-verification=${ca.body.data.verification_token}`, `mailroom-verification=${cb.body.data.verification_token}`]
        })
        expect((yield* call("POST", `/v1/domains/${ca.body.data.id}/verify`, { token: a.token })).body.data.verified).toBe(true)
        expectError(yield* call("POST", `/v1/domains/${cb.body.data.id}/verify`, { token: b.token }), 409, "conflict")
      }))

    it.effect("verification is limited to 20 checks per minute per organization (429 rate_limit_exceeded)", () =>
      Effect.gen(function*() {
        const { token } = yield* newOrg()
        const claim = yield* call("POST", "/v1/domains", { token, body: { domain: uniqueDomain("limit") } })
        for (let i = 0; i < 20; i++) {
          const r = yield* call("POST", `/v1/domains/${claim.body.data.id}/verify`, { token })
          expect([i, r.status, r.body.data.verified]).toEqual([i, 200, false])
        }
        const limited = yield* call("POST", `/v1/domains/${claim.body.data.id}/verify`, { token })
        expectError(limited, 429, "rate_limit_exceeded")
        expect(Number(limited.headers.get("retry-after"))).toBeGreaterThan(0)
        expect(limited.headers.get("ratelimit-limit")).toBe("20")
        // Another organization is unaffected.
        const other = yield* newOrg()
        const theirs = yield* call("POST", "/v1/domains", { token: other.token, body: { domain: uniqueDomain("limit") } })
        expect((yield* call("POST", `/v1/domains/${theirs.body.data.id}/verify`, { token: other.token })).status).toBe(200)
      }))

    it.effect("GET /domains lists both shapes newest first with pagination; bad query parameters are 400", () =>
      Effect.gen(function*() {
        const { token } = yield* newOrg()
        const first = yield* verifiedDomain(token)
        const second = yield* call("POST", "/v1/domains", { token, body: { domain: uniqueDomain("second") } })
        const list = yield* call("GET", "/v1/domains", { token })
        expect(list.status).toBe(200)
        expect(list.body.data.map((d: { id: string }) => d.id)).toEqual([second.body.data.id, first.id])
        expect(list.body.data[0].verified).toBe(false)
        expect(list.body.data[0].verification_token).toBeDefined()
        expect(list.body.data[1]).toMatchObject({ verified: true, is_active: true, spam_threshold: null })
        expect(list.body.meta).toEqual({ total: 2, limit: 50, cursor: null })
        const page1 = yield* call("GET", "/v1/domains?limit=1", { token })
        expect(page1.body.data.map((d: { id: string }) => d.id)).toEqual([second.body.data.id])
        expect(page1.body.meta.cursor).toEqual(expect.any(String))
        const page2 = yield* call("GET", `/v1/domains?limit=1&cursor=${page1.body.meta.cursor}`, { token })
        expect(page2.body.data.map((d: { id: string }) => d.id)).toEqual([first.id])
        expect(page2.body.meta.cursor).toBeNull()
        for (const q of ["limit=abc", "limit=0", "limit=101", "limit=1.5"]) {
          const r = yield* call("GET", `/v1/domains?${q}`, { token })
          expectError(r, 400, "validation_error")
          expect(r.body.error.message).toMatch(/^limit: /)
          expect(r.body.error.details.issues[0].field).toBe("limit")
        }
        const badCursor = yield* call("GET", "/v1/domains?cursor=nonsense", { token })
        expectError(badCursor, 400, "validation_error")
        expect(badCursor.body.error.message).toMatch(/^cursor: /)
      }))

    it.effect("PATCH: is_active on any plan, spam_threshold on paid plans only (after set-plan), strict; DELETE", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const { orgId, token } = yield* newOrg()
        const { id } = yield* verifiedDomain(token)
        const off = yield* call("PATCH", `/v1/domains/${id}`, { token, body: { is_active: false } })
        expect(off.status).toBe(200)
        expect(off.body.data.is_active).toBe(false)
        const gated = yield* call("PATCH", `/v1/domains/${id}`, { token, body: { spam_threshold: 5 } })
        expectError(gated, 403, "forbidden")
        expect(gated.body.error.details.required_plan).toBe("pro")
        expect(gated.body.error.details.hint).toContain("npm run admin -- set-plan <org_id> pro")
        expect((yield* setPlan(orgId, "pro"))._tag).toBe("Some")
        const set = yield* call("PATCH", `/v1/domains/${id}`, { token, body: { spam_threshold: 5, is_active: true } })
        expect(set.status).toBe(200)
        expect(set.body.data).toMatchObject({ spam_threshold: 5, is_active: true })
        for (const body of [{}, { spam_threshold: 16 }, { verified: true }, { is_active: "no" }]) {
          expectError(yield* call("PATCH", `/v1/domains/${id}`, { token, body }), 400, "validation_error")
        }
        yield* setPlan(orgId, "developer")
        expectError(yield* call("PATCH", `/v1/domains/${id}`, { token, body: { spam_threshold: 6 } }), 403, "forbidden")
        const unverified = yield* call("POST", "/v1/domains", { token, body: { domain: uniqueDomain("unv") } })
        expectError(yield* call("PATCH", `/v1/domains/${unverified.body.data.id}`, { token, body: { is_active: false } }), 409, "conflict")
        const removed = yield* call("DELETE", `/v1/domains/${unverified.body.data.id}`, { token })
        expect(removed.status).toBe(200)
        expect(removed.body.data.id).toBe(unverified.body.data.id)
        expectError(yield* call("DELETE", `/v1/domains/${unverified.body.data.id}`, { token }), 404, "not_found")
        const left = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM domains WHERE org_id = ${orgId}`
        expect(left[0]!.n).toBe(1)
      }))
  })

  describe("endpoints", () => {
    it.effect("rule 1: kinds and their required and forbidden fields; defaults", () =>
      Effect.gen(function*() {
        const { token } = yield* newOrg("pro")
        const cases: Array<[unknown, string]> = [
          [{}, "url"], [{ kind: "http" }, "url"],
          [{ url: "https://example.com/h", function_id: crypto.randomUUID() }, "function_id"],
          [{ kind: "function" }, "function_id"],
          [{ kind: "function", function_id: crypto.randomUUID(), url: "https://example.com/h" }, "url"],
          [{ kind: "smtp", url: "https://example.com" }, "kind"], [{ url: "https://example.com", foo: 1 }, "foo"],
          [{ kind: "function", function_id: "not-a-uuid" }, "function_id"]
        ]
        for (const [body, field] of cases) {
          const r = yield* call("POST", "/v1/endpoints", { token, body })
          expect([JSON.stringify(body), r.status, r.body.error.code]).toEqual([JSON.stringify(body), 400, "validation_error"])
          expect(r.body.error.message.startsWith(`${field}: `)).toBe(true)
        }
        const http = yield* call("POST", "/v1/endpoints", { token, body: { url: "https://example.com/hook" } })
        expect(http.status).toBe(201)
        expect(Object.keys(http.body.data).sort()).toEqual(
          ["created_at", "domain_id", "enabled", "function_id", "id", "is_route_target", "kind", "rules", "updated_at", "url"]
        )
        expect(http.body.data).toMatchObject({
          kind: "http", url: "https://example.com/hook", function_id: null, enabled: true, domain_id: null, rules: {},
          is_route_target: false
        })
        const fn = yield* newFunction(token)
        const f = yield* call("POST", "/v1/endpoints", { token, body: { kind: "function", function_id: fn, is_route_target: true } })
        expect(f.status).toBe(201)
        expect(f.body.data).toMatchObject({ kind: "function", url: null, function_id: fn, is_route_target: true })
      }))

    it.effect("rule 2: url cannot be set on a function endpoint", () =>
      Effect.gen(function*() {
        const { token } = yield* newOrg()
        const f = yield* call("POST", "/v1/endpoints", { token, body: { kind: "function", function_id: yield* newFunction(token) } })
        const r = yield* call("PATCH", `/v1/endpoints/${f.body.data.id}`, { token, body: { url: "https://example.com/x" } })
        expectError(r, 400, "validation_error")
        expect(r.body.error.message).toMatch(/^url: /)
        const h = yield* call("POST", "/v1/endpoints", { token, body: { url: "https://example.com/a", is_route_target: true, enabled: false } })
        const moved = yield* call("PATCH", `/v1/endpoints/${h.body.data.id}`, { token, body: { url: "https://example.org/b" } })
        expect(moved.status).toBe(200)
        expect(moved.body.data.url).toBe("https://example.org/b")
        for (const body of [{}, { kind: "function" }, { is_route_target: true }, { function_id: crypto.randomUUID() }]) {
          expectError(yield* call("PATCH", `/v1/endpoints/${h.body.data.id}`, { token, body }), 400, "validation_error")
        }
      }))

    it.effect("rule 3: one default slot per domain and one fallback slot; route targets share; re-enable into an occupied slot is 409", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const { token } = yield* newOrg("pro")
        const d1 = yield* verifiedDomain(token)
        const d2 = yield* verifiedDomain(token)
        const fallback = yield* call("POST", "/v1/endpoints", { token, body: { url: "https://example.com/fallback" } })
        expect(fallback.status).toBe(201)
        const second = yield* call("POST", "/v1/endpoints", { token, body: { url: "https://example.com/other" } })
        expectError(second, 409, "conflict")
        expect(second.body.error.details.endpoint_id).toBe(fallback.body.data.id)
        const def1 = yield* call("POST", "/v1/endpoints", { token, body: { url: "https://example.com/d1", domain_id: d1.id } })
        expect(def1.status).toBe(201)
        expectError(yield* call("POST", "/v1/endpoints", { token, body: { url: "https://example.com/d1b", domain_id: d1.id } }), 409, "conflict")
        const def2 = yield* call("POST", "/v1/endpoints", { token, body: { url: "https://example.com/d2", domain_id: d2.id } })
        expect(def2.status).toBe(201)
        for (const domain_id of [null, d1.id, d1.id]) {
          const rt = yield* call("POST", "/v1/endpoints", { token, body: { url: "https://example.com/rt", domain_id, is_route_target: true } })
          expect(rt.status).toBe(201)
        }
        // Moving a default into another occupied slot is refused too.
        expectError(yield* call("PATCH", `/v1/endpoints/${def2.body.data.id}`, { token, body: { domain_id: d1.id } }), 409, "conflict")

        // State table: disabled + PATCH enabled:true while another endpoint holds the slot → 409, unchanged.
        const disabled = yield* call("PATCH", `/v1/endpoints/${def1.body.data.id}`, { token, body: { enabled: false } })
        expect(disabled.status).toBe(200)
        expect(disabled.body.data.enabled).toBe(false)
        const replacement = yield* call("POST", "/v1/endpoints", { token, body: { url: "https://example.com/d1-new", domain_id: d1.id } })
        expect(replacement.status).toBe(201)
        const reenable = yield* call("PATCH", `/v1/endpoints/${def1.body.data.id}`, { token, body: { enabled: true } })
        expectError(reenable, 409, "conflict")
        const row = yield* sql<{ enabled: boolean }>`SELECT enabled FROM endpoints WHERE id = ${def1.body.data.id}`
        expect(row[0]!.enabled).toBe(false)
        // Once the slot is free, re-enabling works.
        expect((yield* call("DELETE", `/v1/endpoints/${replacement.body.data.id}`, { token })).status).toBe(200)
        const ok = yield* call("PATCH", `/v1/endpoints/${def1.body.data.id}`, { token, body: { enabled: true } })
        expect(ok.status).toBe(200)
        expect(ok.body.data.enabled).toBe(true)
        // A disabled endpoint may be created into an occupied slot; enabling it is what conflicts.
        const parked = yield* call("POST", "/v1/endpoints", { token, body: { url: "https://example.com/p", enabled: false } })
        expect(parked.status).toBe(201)
        expectError(yield* call("PATCH", `/v1/endpoints/${parked.body.data.id}`, { token, body: { enabled: true } }), 409, "conflict")
      }))

    it.effect("rule 4: a function has one endpoint; creating it again returns it (200) without a second row", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const { orgId, token } = yield* newOrg()
        const fn = yield* newFunction(token)
        const a = yield* call("POST", "/v1/endpoints", { token, body: { kind: "function", function_id: fn } })
        expect(a.status).toBe(201)
        const b = yield* call("POST", "/v1/endpoints", {
          token,
          body: { kind: "function", function_id: fn, rules: { event_types: ["email.received"] } },
          headers: { "idempotency-key": `again-${fn}` }
        })
        expect(b.status).toBe(200)
        expect(b.body.data.id).toBe(a.body.data.id)
        const rows = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM endpoints WHERE org_id = ${orgId} AND function_id = ${fn}`
        expect(rows[0]!.n).toBe(1)
        // Another organization cannot aim an endpoint at this organization's function.
        const other = yield* newOrg()
        const c = yield* call("POST", "/v1/endpoints", { token: other.token, body: { kind: "function", function_id: fn } })
        expectError(c, 404, "not_found")
      }))

    it.effect("rule 5: one organization-wide webhook and no per-domain endpoints on free plans; set-plan pro lifts both", () =>
      Effect.gen(function*() {
        const { orgId, token } = yield* newOrg("developer")
        const { id: domainId } = yield* verifiedDomain(token)
        const perDomain = yield* call("POST", "/v1/endpoints", { token, body: { url: "https://example.com/d", domain_id: domainId } })
        expectError(perDomain, 403, "forbidden")
        expect(perDomain.body.error.details.required_plan).toBe("pro")
        const fnPerDomain = yield* call("POST", "/v1/endpoints", {
          token,
          body: { kind: "function", function_id: yield* newFunction(token), domain_id: domainId }
        })
        expectError(fnPerDomain, 403, "forbidden")
        const global = yield* call("POST", "/v1/endpoints", { token, body: { url: "https://example.com/g" } })
        expect(global.status).toBe(201)
        // A second organization-wide default webhook (disabled, so no slot conflict first) cannot be enabled.
        const secondWebhook = yield* call("POST", "/v1/endpoints", { token, body: { url: "https://example.com/g2", enabled: false } })
        expect(secondWebhook.status).toBe(201)
        yield* call("DELETE", `/v1/endpoints/${global.body.data.id}`, { token })
        const third = yield* call("POST", "/v1/endpoints", { token, body: { url: "https://example.com/g3" } })
        expect(third.status).toBe(201)
        const enableSecond = yield* call("PATCH", `/v1/endpoints/${secondWebhook.body.data.id}`, { token, body: { enabled: true } })
        expectError(enableSecond, 409, "conflict")
        // Functions are not webhooks.
        const fn = yield* call("POST", "/v1/endpoints", { token, body: { kind: "function", function_id: yield* newFunction(token), is_route_target: true } })
        expect(fn.status).toBe(201)
        // Moving the webhook onto a domain is per-domain too.
        expectError(yield* call("PATCH", `/v1/endpoints/${third.body.data.id}`, { token, body: { domain_id: domainId } }), 403, "forbidden")

        yield* setPlan(orgId, "pro")
        expect((yield* call("GET", "/v1/account", { token })).body.data.limits.webhooks_per_domain).toBe(true)
        expect((yield* call("POST", "/v1/endpoints", { token, body: { url: "https://example.com/d", domain_id: domainId } })).status).toBe(201)
        expect((yield* call("POST", "/v1/endpoints", { token, body: { url: "https://example.com/g2", is_route_target: true } })).status).toBe(201)
      }))

    it.effect("route targets use no plan slot: an agent account has its one fallback webhook and several route targets", () =>
      Effect.gen(function*() {
        const { token } = yield* newOrg("agent")
        const fallback = yield* call("POST", "/v1/endpoints", { token, body: { url: "https://example.com/fallback" } })
        expect(fallback.status).toBe(201)
        for (let i = 0; i < 3; i++) {
          const target = yield* call("POST", "/v1/endpoints", { token, body: { url: `https://example.com/target-${i}`, is_route_target: true } })
          expect([i, target.status, target.body.data?.is_route_target]).toEqual([i, 201, true])
        }
        // A disabled route target re-enabled is still no slot.
        const off = yield* call("POST", "/v1/endpoints", { token, body: { url: "https://example.com/off", is_route_target: true, enabled: false } })
        expect((yield* call("PATCH", `/v1/endpoints/${off.body.data.id}`, { token, body: { enabled: true } })).status).toBe(200)
        // A second fallback is refused as before: the slot is held.
        const second = yield* call("POST", "/v1/endpoints", { token, body: { url: "https://example.com/fallback2" } })
        expectError(second, 409, "conflict")
        expect(second.body.error.details.endpoint_id).toBe(fallback.body.data.id)
        // Even with the slot freed by disabling the first, the plan allows one organization-wide webhook at a time.
        const disabledSecond = yield* call("POST", "/v1/endpoints", { token, body: { url: "https://example.com/fallback2", enabled: false } })
        expect(disabledSecond.status).toBe(201)
        expectError(yield* call("PATCH", `/v1/endpoints/${disabledSecond.body.data.id}`, { token, body: { enabled: true } }), 409, "conflict")
        const list = (yield* call("GET", "/v1/endpoints", { token })).body.data as Array<{ is_route_target: boolean; enabled: boolean }>
        expect(list.filter((e) => e.is_route_target && e.enabled).length).toBe(4)
      }))

    it.effect("rules validation: event_types 1-50, emails in sender lists, non-negative sizes, strict", () =>
      Effect.gen(function*() {
        const { token } = yield* newOrg("pro")
        const url = "https://example.com/r"
        const bad: Array<[unknown, string]> = [
          [{ event_types: [] }, "rules.event_types"],
          [{ event_types: Array.from({ length: 51 }, (_, i) => `t${i}`) }, "rules.event_types"],
          [{ event_types: [""] }, "rules.event_types[0]"],
          [{ sender_whitelist: ["not-an-email"] }, "rules.sender_whitelist[0]"],
          [{ sender_blacklist: ["ok@example.com", "@example.com"] }, "rules.sender_blacklist[1]"],
          [{ max_size_bytes: -1 }, "rules.max_size_bytes"], [{ max_size_bytes: 1.5 }, "rules.max_size_bytes"],
          [{ attachment_limit_mb: -0.5 }, "rules.attachment_limit_mb"], [{ exclude_attachments: "yes" }, "rules.exclude_attachments"],
          [{ unknown_rule: true }, "rules.unknown_rule"]
        ]
        for (const [rules, field] of bad) {
          const r = yield* call("POST", "/v1/endpoints", { token, body: { url, is_route_target: true, rules } })
          expect([JSON.stringify(rules), r.status]).toEqual([JSON.stringify(rules), 400])
          expect(r.body.error.details.issues.map((i: { field: string }) => i.field)).toContain(field)
        }
        const rules = {
          max_size_bytes: 0, exclude_attachments: true, attachment_limit_mb: 2.5, sender_whitelist: ["a@example.com"],
          sender_blacklist: ["b@example.com"], event_types: Array.from({ length: 50 }, (_, i) => `custom.${i}`)
        }
        const ok = yield* call("POST", "/v1/endpoints", { token, body: { url, is_route_target: true, rules } })
        expect(ok.status).toBe(201)
        expect(ok.body.data.rules).toEqual(rules)
        const replaced = yield* call("PATCH", `/v1/endpoints/${ok.body.data.id}`, { token, body: { rules: { event_types: ["emial.recieved"] } } })
        expect(replaced.body.data.rules).toEqual({ event_types: ["emial.recieved"] }) // stored as given, matches nothing
      }))

    it.effect("state table: DELETE deactivates (not listed, slot freed, routes removed, 404 afterwards); disable keeps it listed", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const { token, inbox } = yield* newOrg()
        const a = yield* call("POST", "/v1/endpoints", { token, body: { url: "https://example.com/a" } })
        const route = yield* call("POST", "/v1/routes", { token, body: { pattern: inbox, endpoint_id: a.body.data.id } })
        expect(route.status).toBe(201)
        const disabled = yield* call("PATCH", `/v1/endpoints/${a.body.data.id}`, { token, body: { enabled: false } })
        expect(disabled.body.data.enabled).toBe(false)
        expect((yield* call("GET", "/v1/endpoints", { token })).body.data.map((e: { id: string }) => e.id)).toContain(a.body.data.id)
        yield* call("PATCH", `/v1/endpoints/${a.body.data.id}`, { token, body: { enabled: true } })
        const del = yield* call("DELETE", `/v1/endpoints/${a.body.data.id}`, { token })
        expect(del.status).toBe(200)
        expect(del.body.data.id).toBe(a.body.data.id)
        const row = yield* sql<{ d: Date | null }>`SELECT deactivated_at AS d FROM endpoints WHERE id = ${a.body.data.id}`
        expect(row[0]!.d).not.toBeNull() // kept as a tombstone for deliveries
        const list = yield* call("GET", "/v1/endpoints", { token })
        expect(list.body.data.map((e: { id: string }) => e.id)).not.toContain(a.body.data.id)
        expect(list.body.meta.total).toBe(0)
        const routes = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM routes WHERE endpoint_id = ${a.body.data.id}`
        expect(routes[0]!.n).toBe(0)
        expectError(yield* call("PATCH", `/v1/endpoints/${a.body.data.id}`, { token, body: { enabled: true } }), 404, "not_found")
        expectError(yield* call("DELETE", `/v1/endpoints/${a.body.data.id}`, { token }), 404, "not_found")
        expectError(yield* call("POST", `/v1/endpoints/${a.body.data.id}/test`, { token }), 404, "not_found")
        // Its fallback slot (and the free plan's one webhook) is free again.
        expect((yield* call("POST", "/v1/endpoints", { token, body: { url: "https://example.com/b" } })).status).toBe(201)
      }))

    it.effect("GET /endpoints lists active endpoints newest first", () =>
      Effect.gen(function*() {
        const { token } = yield* newOrg("pro")
        const ids: Array<string> = []
        for (let i = 0; i < 3; i++) {
          ids.push((yield* call("POST", "/v1/endpoints", { token, body: { url: `https://example.com/${i}`, is_route_target: true } })).body.data.id)
        }
        const list = yield* call("GET", "/v1/endpoints?limit=2", { token })
        expect(list.body.data.map((e: { id: string }) => e.id)).toEqual([ids[2], ids[1]])
        expect(list.body.meta.total).toBe(3)
        const rest = yield* call("GET", `/v1/endpoints?limit=2&cursor=${list.body.meta.cursor}`, { token })
        expect(rest.body.data.map((e: { id: string }) => e.id)).toEqual([ids[0]])
      }))
  })

  describe("endpoint test send", () => {
    it.effect("reaches a real receiver signed with the account secret; signature equals the header received", () =>
      Effect.scoped(Effect.gen(function*() {
        const receiver = yield* startReceiver
        receiver.answer = { status: 202, body: "accepted by test receiver" }
        const { token, inbox } = yield* newOrg()
        const secret = (yield* call("GET", "/v1/account/webhook-secret", { token })).body.data.secret as string
        const e = yield* call("POST", "/v1/endpoints", { token, body: { url: receiver.url("/hook?x=1") } })
        const r = yield* call("POST", `/v1/endpoints/${e.body.data.id}/test`, { token })
        expect(r.status).toBe(200)
        expect(r.headers.get("cache-control")).toBe("no-store")
        expect(Object.keys(r.body.data).sort()).toEqual(["delivered", "duration_ms", "error", "response_body", "signature", "status_code"])
        expect(r.body.data).toMatchObject({ status_code: 202, response_body: "accepted by test receiver", delivered: true, error: null })
        expect(Number.isInteger(r.body.data.duration_ms)).toBe(true)
        expect(receiver.received.length).toBe(1)
        const got = receiver.received[0]!
        expect(got.method).toBe("POST")
        expect(got.path).toBe("/hook?x=1")
        expect(got.headers["content-type"]).toBe("application/json")
        expect(got.headers["mailroom-signature"]).toBe(r.body.data.signature)
        expect(got.headers["legacy-signature"]).toBe(r.body.data.signature)
        expect(independentVerify(secret, got.body, String(got.headers["mailroom-signature"]), Math.floor(Date.now() / 1000))).toBe(true)
        expect(independentVerify("whsec_wrong", got.body, String(got.headers["mailroom-signature"]), Math.floor(Date.now() / 1000))).toBe(false)
        expect(independentVerify(secret, got.body + " ", String(got.headers["mailroom-signature"]), Math.floor(Date.now() / 1000))).toBe(false)
        const payload = JSON.parse(got.body)
        expect(Object.keys(payload)).toEqual(["id", "event", "created_at", "email"])
        expect(payload.id).toMatch(/^evt_/)
        expect(payload.event).toBe("email.received")
        expect(got.headers["mailroom-event-id"]).toBe(payload.id)
        expect(Object.keys(payload.email).sort()).toEqual([
          "attachments", "attachments_url", "auth", "auto_submitted", "content_truncated", "date", "extracted_text", "from", "headers", "html", "id", "in_reply_to",
          "inbox_id", "message_id", "raw_url", "recipient", "references", "size_bytes", "spam_score", "subject", "text", "thread_id", "to", "trust"
        ])
        expect(payload.email.recipient).toBe(inbox)
        expect(payload.email.inbox_id).toBeNull()
        expect(payload.email.auth).toEqual({ spf: "none", dkim: "none", dmarc: "none" })

        // After a rotation the test is signed with the new secret, and with the old one during its grace period.
        yield* call("POST", "/v1/account/webhook-secret/rotate", { token })
        const rotated = (yield* call("GET", "/v1/account/webhook-secret", { token })).body.data.secret as string
        const r2 = yield* call("POST", `/v1/endpoints/${e.body.data.id}/test`, { token })
        expect(r2.headers.get("idempotent-replayed")).toBeNull()
        const got2 = receiver.received[1]!
        expect(independentVerify(rotated, got2.body, r2.body.data.signature, Math.floor(Date.now() / 1000))).toBe(true)
        expect(independentVerify(secret, got2.body, r2.body.data.signature, Math.floor(Date.now() / 1000))).toBe(true)
        expect(r2.body.data.signature.split(",").filter((p: string) => p.startsWith("v1="))).toHaveLength(2)
        expect(independentVerify("whsec_wrong", got2.body, r2.body.data.signature, Math.floor(Date.now() / 1000))).toBe(false)
      })))

    it.effect("reports failures without following redirects and truncates the response body to 2 KiB; functions are refused", () =>
      Effect.scoped(Effect.gen(function*() {
        const receiver = yield* startReceiver
        const { token } = yield* newOrg("pro")
        const e = yield* call("POST", "/v1/endpoints", { token, body: { url: receiver.url(), is_route_target: true } })
        receiver.answer = { status: 500, body: "x".repeat(5000) }
        const failed = yield* call("POST", `/v1/endpoints/${e.body.data.id}/test`, { token })
        expect(failed.body.data).toMatchObject({ status_code: 500, delivered: false, error: "http_500" })
        expect(failed.body.data.response_body).toBe("x".repeat(2048))
        receiver.answer = { status: 302, body: "", headers: { location: receiver.url("/elsewhere") } }
        const redirected = yield* call("POST", `/v1/endpoints/${e.body.data.id}/test`, { token })
        expect(redirected.body.data).toMatchObject({ status_code: 302, delivered: false })
        expect(receiver.received.map((x) => x.path)).toEqual(["/hook", "/hook"])
        const dead = yield* call("POST", "/v1/endpoints", { token, body: { url: "http://127.0.0.1:9/none", is_route_target: true } })
        const refused = yield* call("POST", `/v1/endpoints/${dead.body.data.id}/test`, { token })
        expect(refused.body.data).toMatchObject({ status_code: null, delivered: false, response_body: "" })
        expect(refused.body.data.error).toEqual(expect.any(String))
        const fn = yield* call("POST", "/v1/endpoints", { token, body: { kind: "function", function_id: yield* newFunction(token) } })
        const r = yield* call("POST", `/v1/endpoints/${fn.body.data.id}/test`, { token })
        expectError(r, 400, "validation_error")
        expect(r.body.error.message).toMatch(/^kind: /)
      })))

    it.effect("4 failed tests per minute (successful ones and verified-domain URLs exempt), 30 per hour", () =>
      Effect.scoped(Effect.gen(function*() {
        const receiver = yield* startReceiver
        const dns = yield* TestDns
        const { token } = yield* newOrg("pro")
        const e = yield* call("POST", "/v1/endpoints", { token, body: { url: receiver.url(), is_route_target: true } })
        const test = () => call("POST", `/v1/endpoints/${e.body.data.id}/test`, { token })
        receiver.answer = { status: 200, body: "ok" }
        for (let i = 0; i < 6; i++) expect((yield* test()).body.data.delivered).toBe(true)
        receiver.answer = { status: 503, body: "down" }
        for (let i = 0; i < 4; i++) {
          const r = yield* test()
          expect([i, r.status, r.body.data.delivered]).toEqual([i, 200, false])
        }
        const limited = yield* test()
        expectError(limited, 429, "rate_limit_exceeded")
        expect(Number(limited.headers.get("retry-after"))).toBeGreaterThan(0)
        expect(Number(limited.headers.get("retry-after"))).toBeLessThanOrEqual(60)
        expect(limited.headers.get("ratelimit-limit")).toBe("4")
        expect(receiver.received.length).toBe(10) // the refused test sent nothing

        // A URL on one of the organization's verified domains is exempt from the per-minute limit.
        const { domain } = yield* verifiedDomain(token)
        dns.zone.set(`hooks.${domain}`, { A: ["127.0.0.1"] })
        const onDomain = yield* call("POST", "/v1/endpoints", {
          token,
          body: { url: `http://hooks.${domain}:${receiver.port}/hook`, is_route_target: true }
        })
        expect(onDomain.status).toBe(201)
        const exempt = yield* call("POST", `/v1/endpoints/${onDomain.body.data.id}/test`, { token })
        expect(exempt.status).toBe(200)
        expect(exempt.body.data.status_code).toBe(503)

        // 30 per hour counts every test that was sent: 11 so far.
        receiver.answer = { status: 200, body: "ok" }
        for (let i = 0; i < 19; i++) {
          const r = yield* call("POST", `/v1/endpoints/${onDomain.body.data.id}/test`, { token })
          expect([i, r.status]).toEqual([i, 200])
        }
        const hourly = yield* call("POST", `/v1/endpoints/${onDomain.body.data.id}/test`, { token })
        expectError(hourly, 429, "rate_limit_exceeded")
        expect(hourly.headers.get("ratelimit-limit")).toBe("30")
        expect(Number(hourly.headers.get("retry-after"))).toBeGreaterThan(3000)
      })))
  })

  describe("endpoint test send, concurrent", () => {
    it.effect("the failed-test limit is reserved atomically: 12 parallel failing tests with 3 left reach the receiver 3 times", () =>
      Effect.scoped(Effect.gen(function*() {
        const receiver = yield* startReceiver
        const { token } = yield* newOrg("pro")
        const e = yield* call("POST", "/v1/endpoints", { token, body: { url: receiver.url(), is_route_target: true } })
        // Each request its own key, so only the limiter decides.
        const test = () => call("POST", `/v1/endpoints/${e.body.data.id}/test`, { token, headers: { "idempotency-key": crypto.randomUUID() } })
        receiver.answer = { status: 500, body: "down" }
        expect((yield* test()).body.data.delivered).toBe(false)
        const results = yield* Effect.all(Array.from({ length: 12 }, test), { concurrency: "unbounded" })
        const statuses = results.map((r) => r.status).sort()
        expect(statuses).toEqual([200, 200, 200, ...Array<number>(9).fill(429)])
        for (const r of results.filter((x) => x.status === 429)) expectError(r, 429, "rate_limit_exceeded")
        expect(receiver.received.length).toBe(4)
        // Successful tests hold a slot only while in flight: once the receiver recovers, they pass,
        // but the per-minute budget of failures stays spent.
        receiver.answer = { status: 200, body: "ok" }
        expect((yield* test()).status).toBe(429)
      })))
  })

  describe("filters", () => {
    it.effect("create normalises, validates, lists newest first; PATCH only enabled; DELETE; per-domain on paid plans", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const { orgId, token } = yield* newOrg()
        const a = yield* call("POST", "/v1/filters", { token, body: { type: "blocklist", pattern: "  Spammer@Example.COM \n" } })
        expect(a.status).toBe(201)
        expect(Object.keys(a.body.data).sort()).toEqual(["created_at", "domain_id", "enabled", "id", "pattern", "type", "updated_at"])
        expect(a.body.data).toMatchObject({ type: "blocklist", pattern: "spammer@example.com", domain_id: null, enabled: true })
        const b = yield* call("POST", "/v1/filters", { token, body: { type: "whitelist", pattern: "*.Partner.example", domain_id: null } })
        expect(b.body.data.pattern).toBe("*.partner.example")
        const c = yield* call("POST", "/v1/filters", { token, body: { type: "whitelist", pattern: "@trusted.example" } })
        expect(c.status).toBe(201)
        const longOk = `${"a".repeat(60)}@${"b".repeat(60)}.${"c".repeat(60)}.example`
        expect((yield* call("POST", "/v1/filters", { token, body: { type: "blocklist", pattern: longOk } })).status).toBe(201)
        const bad: Array<[unknown, string]> = [
          [{ type: "allowlist", pattern: "a@b.com" }, "type"], [{ type: "blocklist" }, "pattern"],
          [{ type: "blocklist", pattern: "   " }, "pattern"], [{ type: "blocklist", pattern: "not a pattern" }, "pattern"],
          [{ type: "blocklist", pattern: `${"a".repeat(495)}@b.com` }, "pattern"],
          [{ type: "blocklist", pattern: "a@b.com", enabled: false }, "enabled"],
          [{ type: "blocklist", pattern: "a@b.com", domain_id: "nope" }, "domain_id"]
        ]
        for (const [body, field] of bad) {
          const r = yield* call("POST", "/v1/filters", { token, body })
          expect([JSON.stringify(body).slice(0, 60), r.status]).toEqual([JSON.stringify(body).slice(0, 60), 400])
          expect(r.body.error.message.startsWith(`${field}: `)).toBe(true)
        }
        expectError(yield* call("POST", "/v1/filters", { token, body: { type: "blocklist", pattern: "SPAMMER@example.com" } }), 409, "conflict")
        const list = yield* call("GET", "/v1/filters", { token })
        expect(list.body.data.slice(1).map((f: { id: string }) => f.id)).toEqual([c.body.data.id, b.body.data.id, a.body.data.id])
        expect(list.body.meta.total).toBe(4)

        const off = yield* call("PATCH", `/v1/filters/${a.body.data.id}`, { token, body: { enabled: false } })
        expect(off.status).toBe(200)
        expect(off.body.data).toMatchObject({ id: a.body.data.id, enabled: false, pattern: "spammer@example.com" })
        for (const body of [{}, { pattern: "x@y.com" }, { type: "whitelist" }, { enabled: false, pattern: "x@y.com" }, { enabled: "no" }]) {
          const r = yield* call("PATCH", `/v1/filters/${a.body.data.id}`, { token, body })
          expectError(r, 400, "validation_error")
        }
        const stored = yield* sql<{ pattern: string; type: string; enabled: boolean }>`SELECT pattern, type, enabled FROM filters WHERE id = ${a.body.data.id}`
        expect(stored[0]).toEqual({ pattern: "spammer@example.com", type: "blocklist", enabled: false })

        const { id: domainId } = yield* verifiedDomain(token)
        const gated = yield* call("POST", "/v1/filters", { token, body: { type: "blocklist", pattern: "@x.example", domain_id: domainId } })
        expectError(gated, 403, "forbidden")
        expect(gated.body.error.details.required_plan).toBe("pro")
        yield* setPlan(orgId, "pro")
        const scoped = yield* call("POST", "/v1/filters", { token, body: { type: "blocklist", pattern: "@x.example", domain_id: domainId } })
        expect(scoped.status).toBe(201)
        expect(scoped.body.data.domain_id).toBe(domainId)

        const del = yield* call("DELETE", `/v1/filters/${b.body.data.id}`, { token })
        expect(del.status).toBe(200)
        expect(del.body.data.id).toBe(b.body.data.id)
        expectError(yield* call("DELETE", `/v1/filters/${b.body.data.id}`, { token }), 404, "not_found")
        expectError(yield* call("PATCH", `/v1/filters/${b.body.data.id}`, { token, body: { enabled: true } }), 404, "not_found")
      }))

    it.effect("a repeated POST without Idempotency-Key within 60 s replays the first result (derived key)", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const { orgId, token } = yield* newOrg()
        const body = { type: "blocklist", pattern: "derived@example.com" }
        const first = yield* call("POST", "/v1/filters", { token, body })
        expect(first.status).toBe(201)
        expect(first.headers.get("idempotency-key")).toMatch(/^derived_[0-9a-f]{64}$/)
        const second = yield* call("POST", "/v1/filters", { token, raw: "{\"pattern\":\"derived@example.com\",\"type\":\"blocklist\"}" })
        expect(second.status).toBe(201)
        expect(second.headers.get("idempotent-replayed")).toBe("true")
        expect(second.headers.get("idempotency-key")).toBe(first.headers.get("idempotency-key"))
        expect(second.body).toEqual(first.body)
        const rows = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM filters WHERE org_id = ${orgId}`
        expect(rows[0]!.n).toBe(1)
        // Another organization with the same body is not a replay.
        const other = yield* newOrg()
        const theirs = yield* call("POST", "/v1/filters", { token: other.token, body })
        expect(theirs.status).toBe(201)
        expect(theirs.headers.get("idempotent-replayed")).toBeNull()
        expect(theirs.body.data.id).not.toBe(first.body.data.id)
      }))
  })

  describe("routes", () => {
    it.effect("create, list, update and delete routes; function targets create or reuse a route-target endpoint", () =>
      Effect.gen(function*() {
        const { token, inbox } = yield* newOrg("pro")
        const { id: domainId, domain } = yield* verifiedDomain(token)
        const e = yield* call("POST", "/v1/endpoints", { token, body: { url: "https://example.com/r", is_route_target: true } })
        const r = yield* call("POST", "/v1/routes", { token, body: { pattern: `Support@${domain.toUpperCase()}`, endpoint_id: e.body.data.id } })
        expect(r.status).toBe(201)
        expect(Object.keys(r.body.data).sort()).toEqual(["created_at", "domain_id", "endpoint_id", "id", "inbox_id", "pattern", "updated_at"])
        expect(r.body.data).toMatchObject({ pattern: `support@${domain}`, domain_id: domainId, endpoint_id: e.body.data.id })
        expectError(yield* call("POST", "/v1/routes", { token, body: { pattern: `support@${domain}`, endpoint_id: e.body.data.id } }), 409, "conflict")

        const fn = yield* newFunction(token)
        const viaFn = yield* call("POST", "/v1/routes", { token, body: { pattern: `*+agent@${domain}`, function_id: fn } })
        expect(viaFn.status).toBe(201)
        const endpoints = (yield* call("GET", "/v1/endpoints", { token })).body.data as Array<{ id: string; function_id: string | null; is_route_target: boolean; kind: string }>
        const fnEndpoint = endpoints.find((x) => x.function_id === fn)!
        expect(fnEndpoint).toMatchObject({ id: viaFn.body.data.endpoint_id, kind: "function", is_route_target: true })
        const again = yield* call("POST", "/v1/routes", { token, body: { pattern: `bot@${domain}`, function_id: fn } })
        expect(again.body.data.endpoint_id).toBe(fnEndpoint.id)

        const managed = yield* call("POST", "/v1/routes", { token, body: { pattern: inbox.replace("@", "+orders@"), endpoint_id: e.body.data.id } })
        expect(managed.status).toBe(201)
        expect(managed.body.data.domain_id).toBeNull()

        const bad: Array<[unknown, number, string]> = [
          [{ pattern: "support@unverified.example", endpoint_id: e.body.data.id }, 400, "validation_error"],
          [{ pattern: `someone-else@${MANAGED}`, endpoint_id: e.body.data.id }, 400, "validation_error"],
          [{ pattern: "no-at-sign", endpoint_id: e.body.data.id }, 400, "validation_error"],
          [{ pattern: `x@${domain}` }, 400, "validation_error"],
          [{ pattern: `x@${domain}`, endpoint_id: e.body.data.id, function_id: fn }, 400, "validation_error"],
          [{ pattern: `x@${domain}`, endpoint_id: crypto.randomUUID() }, 404, "not_found"]
        ]
        for (const [body, status, code] of bad) {
          const res = yield* call("POST", "/v1/routes", { token, body })
          expect([JSON.stringify(body), res.status, res.body.error.code]).toEqual([JSON.stringify(body), status, code])
        }
        const list = yield* call("GET", "/v1/routes", { token })
        expect(list.body.data.map((x: { id: string }) => x.id)).toEqual(
          [managed.body.data.id, again.body.data.id, viaFn.body.data.id, r.body.data.id]
        )
        const moved = yield* call("PATCH", `/v1/routes/${r.body.data.id}`, { token, body: { pattern: `help@${domain}`, function_id: fn } })
        expect(moved.status).toBe(200)
        expect(moved.body.data).toMatchObject({ pattern: `help@${domain}`, endpoint_id: fnEndpoint.id })
        expectError(yield* call("PATCH", `/v1/routes/${r.body.data.id}`, { token, body: {} }), 400, "validation_error")
        expectError(yield* call("PATCH", `/v1/routes/${r.body.data.id}`, { token, body: { pattern: `bot@${domain}` } }), 409, "conflict")
        expect((yield* call("DELETE", `/v1/routes/${r.body.data.id}`, { token })).status).toBe(200)
        expectError(yield* call("DELETE", `/v1/routes/${r.body.data.id}`, { token }), 404, "not_found")
      }))

    it.scoped("resolver precedence: exact route → most specific wildcard → domain default → organization fallback", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const { orgId, token, inbox } = yield* newOrg("pro")
        const { id: domainId, domain } = yield* verifiedDomain(token)
        const mk = (body: Record<string, unknown>) =>
          Effect.map(call("POST", "/v1/endpoints", { token, body }), (r) => {
            expect(r.status).toBe(201)
            return r.body.data.id as string
          })
        const fallback = yield* mk({ url: "https://example.com/fallback" })
        const domainDefault = yield* mk({ url: "https://example.com/default", domain_id: domainId })
        const exact = yield* mk({ url: "https://example.com/exact", is_route_target: true })
        const tagged = yield* mk({ url: "https://example.com/tagged", is_route_target: true })
        const catchAll = yield* mk({ url: "https://example.com/all", is_route_target: true })
        const route = (pattern: string, endpoint_id: string) =>
          Effect.map(call("POST", "/v1/routes", { token, body: { pattern, endpoint_id } }), (r) => {
            expect(r.status).toBe(201)
            return r.body.data.id as string
          })
        const catchAllRoute = yield* route(`*@${domain}`, catchAll)
        yield* route(`*+tag@${domain}`, tagged)
        yield* route(`support@${domain}`, exact)

        // The resolver batches its lookups with fibers of its own: it lives as long as this test's scope.
        const resolver = Context.get(yield* Layer.build(RouteResolver.Default), RouteResolver)
        const resolve = (address: string) =>
          Effect.map(resolver.resolve(address), Option.map((r) => ({ via: r.via, endpoint: Option.getOrNull(Option.map(r.endpoint, (e) => e.id)), orgId: r.orgId })))
        expect(yield* resolve(`Support@${domain.toUpperCase()}`)).toEqual(Option.some({ via: "route", endpoint: exact, orgId }))
        expect(yield* resolve(`support+tag@${domain}`)).toEqual(Option.some({ via: "route", endpoint: tagged, orgId }))
        expect(yield* resolve(`anyone@${domain}`)).toEqual(Option.some({ via: "route", endpoint: catchAll, orgId }))
        yield* call("DELETE", `/v1/routes/${catchAllRoute}`, { token })
        expect(yield* resolve(`anyone@${domain}`)).toEqual(Option.some({ via: "domain_default", endpoint: domainDefault, orgId }))
        // A disabled route target is passed over.
        yield* call("PATCH", `/v1/endpoints/${exact}`, { token, body: { enabled: false } })
        expect(yield* resolve(`support@${domain}`)).toEqual(Option.some({ via: "domain_default", endpoint: domainDefault, orgId }))
        yield* call("PATCH", `/v1/endpoints/${domainDefault}`, { token, body: { enabled: false } })
        expect(yield* resolve(`anyone@${domain}`)).toEqual(Option.some({ via: "fallback", endpoint: fallback, orgId }))
        // Managed inbox addresses (and +tag forms) use the organization fallback.
        expect(yield* resolve(inbox)).toEqual(Option.some({ via: "fallback", endpoint: fallback, orgId }))
        expect(yield* resolve(inbox.replace("@", "+x@"))).toEqual(Option.some({ via: "fallback", endpoint: fallback, orgId }))
        yield* call("DELETE", `/v1/endpoints/${fallback}`, { token })
        expect(yield* resolve(`anyone@${domain}`)).toEqual(Option.some({ via: "none", endpoint: null, orgId }))
        expect(yield* resolve("someone@unknown.example")).toEqual(Option.none())
        expect(yield* resolve(`nobody-here@${MANAGED}`)).toEqual(Option.none())
        yield* call("PATCH", `/v1/domains/${domainId}`, { token, body: { is_active: false } })
        expect(yield* resolve(`anyone@${domain}`)).toEqual(Option.none())
        const check = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM routes WHERE org_id = ${orgId}`
        expect(check[0]!.n).toBe(2)
      }))
  })

  describe("tenant isolation and request validation", () => {
    it.effect("another organization's ids are 404 not_found everywhere", () =>
      Effect.gen(function*() {
        const a = yield* newOrg("pro")
        const b = yield* newOrg("pro")
        const { id: domainId, domain } = yield* verifiedDomain(a.token)
        const unverified = yield* call("POST", "/v1/domains", { token: a.token, body: { domain: uniqueDomain("iso") } })
        const endpoint = yield* call("POST", "/v1/endpoints", { token: a.token, body: { url: "https://example.com/a", is_route_target: true } })
        const filter = yield* call("POST", "/v1/filters", { token: a.token, body: { type: "blocklist", pattern: "@iso.example" } })
        const route = yield* call("POST", "/v1/routes", { token: a.token, body: { pattern: `x@${domain}`, endpoint_id: endpoint.body.data.id } })
        const probes: Array<[string, string, unknown]> = [
          ["POST", `/v1/domains/${unverified.body.data.id}/verify`, undefined],
          ["PATCH", `/v1/domains/${domainId}`, { is_active: false }],
          ["DELETE", `/v1/domains/${domainId}`, undefined],
          ["PATCH", `/v1/endpoints/${endpoint.body.data.id}`, { enabled: false }],
          ["DELETE", `/v1/endpoints/${endpoint.body.data.id}`, undefined],
          ["POST", `/v1/endpoints/${endpoint.body.data.id}/test`, undefined],
          ["PATCH", `/v1/filters/${filter.body.data.id}`, { enabled: false }],
          ["DELETE", `/v1/filters/${filter.body.data.id}`, undefined],
          ["PATCH", `/v1/routes/${route.body.data.id}`, { pattern: "y@example.com" }],
          ["DELETE", `/v1/routes/${route.body.data.id}`, undefined],
          ["POST", "/v1/endpoints", { url: "https://example.com/b", domain_id: domainId }],
          ["POST", "/v1/filters", { type: "blocklist", pattern: "@b.example", domain_id: domainId }],
          ["POST", "/v1/routes", { pattern: b.inbox, endpoint_id: endpoint.body.data.id }]
        ]
        for (const [method, path, body] of probes) {
          const r = yield* call(method, path, { token: b.token, body })
          expect([method, path, r.status, r.body.error.code]).toEqual([method, path, 404, "not_found"])
        }
        // B cannot route A's verified domain either.
        const e = yield* call("POST", "/v1/endpoints", { token: b.token, body: { url: "https://example.com/b" } })
        expectError(yield* call("POST", "/v1/routes", { token: b.token, body: { pattern: `z@${domain}`, endpoint_id: e.body.data.id } }), 400, "validation_error")
        // Lists show only one's own.
        for (const path of ["/v1/domains", "/v1/endpoints", "/v1/filters", "/v1/routes"]) {
          const list = yield* call("GET", path, { token: b.token })
          const ids = list.body.data.map((x: { id: string }) => x.id)
          for (const id of [domainId, endpoint.body.data.id, filter.body.data.id, route.body.data.id]) expect(ids).not.toContain(id)
        }
        // And nothing of A's changed.
        expect((yield* call("GET", "/v1/endpoints", { token: a.token })).body.data[0].enabled).toBe(true)
      }))

    it.effect("a non-UUID path id is 400 validation_error naming id", () =>
      Effect.gen(function*() {
        const { token } = yield* newOrg()
        for (const [method, path, body] of [
          ["PATCH", "/v1/endpoints/not-a-uuid", { enabled: false }], ["DELETE", "/v1/filters/123"],
          ["POST", "/v1/domains/xyz/verify"], ["DELETE", "/v1/routes/00000000-0000-0000-0000-00000000000g"]
        ] as Array<[string, string, unknown]>) {
          const r = yield* call(method, path, { token, body })
          expectError(r, 400, "validation_error")
          expect(r.body.error.message).toMatch(/^id: /)
          expect(r.body.error.details.issues[0].field).toBe("id")
        }
        expectError(yield* call("DELETE", `/v1/filters/${crypto.randomUUID()}`, { token }), 404, "not_found")
        expectError(yield* call("GET", "/v1/filters?limit=-3", { token }), 400, "validation_error")
      }))
  })
})
