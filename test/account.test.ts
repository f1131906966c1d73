/** Account settings, storage statistics and the webhook secret over real HTTP. */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer, Option, Redacted } from "effect"
import { readFileSync } from "node:fs"
import { join } from "node:path"
import pkg from "../package.json" with { type: "json" }
import { entitlementsOf, LIMITS } from "../src/contract/Plans.js"
import { Provisioning } from "../src/identity/Provisioning.js"
import { AppConfig } from "../src/platform/Config.js"
import { deriveKey, ServiceKey } from "../src/platform/ServiceKey.js"
import { call } from "./support/http.js"
import { testService } from "./support/harness.js"

const Env = Provisioning.Default.pipe(Layer.provideMerge(testService()))

const newOrg = (plan: "agent" | "developer" | "pro" = "developer") =>
  Effect.gen(function*() {
    const p = yield* Provisioning
    const org = yield* p.createOrganization({ name: "Acct", plan })
    const key = yield* p.issueApiKey(org.id)
    return { orgId: org.id, token: key.apiKey, inbox: org.managedInboxAddress }
  })

layer(Env, { timeout: 120_000, excludeTestServices: true })("account", (it) => {
  describe("GET and PATCH /account", () => {
    it.effect("returns every Account field with sorted entitlements", () =>
      Effect.gen(function*() {
        const { orgId, token, inbox } = yield* newOrg("pro")
        const r = yield* call("GET", "/v1/account", { token })
        expect(r.status).toBe(200)
        const a = r.body.data
        expect(Object.keys(a).sort()).toEqual([
          "attachment_policy", "billing_subscription_status", "created_at", "discard_content_on_webhook_confirmed", "email", "entitlements", "id",
          "limits", "managed_inbox_address", "onboarding_completed", "onboarding_step", "plan", "send_approval", "spam_threshold",
          "subscription_cancel_at_period_end", "subscription_current_period_end", "webhook_secret_rotated_at"
        ])
        expect(a.id).toBe(orgId)
        expect(a.send_approval).toBe("none")
        expect(a.email).toBe(inbox) // emailless: its managed inbox address
        expect(a.limits).toEqual(LIMITS.pro)
        expect(a.entitlements).toEqual([...a.entitlements].sort())
        expect(a.spam_threshold).toBeNull()
        expect(a.webhook_secret_rotated_at).toBeNull()
      }))

    it.effect("PATCH is strict, needs a property, bounds spam_threshold to 0-15 and answers the reduced representation", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const { orgId, token } = yield* newOrg()
        const ok = yield* call("PATCH", "/v1/account", { token, body: { spam_threshold: 7.5 } })
        expect(ok.status).toBe(200)
        expect(Object.keys(ok.body.data).sort()).toEqual(["discard_content_on_webhook_confirmed", "email", "id", "plan", "spam_threshold"])
        expect(ok.body.data).toMatchObject({ id: orgId, plan: "developer", spam_threshold: 7.5, discard_content_on_webhook_confirmed: false })
        const discard = yield* call("PATCH", "/v1/account", { token, body: { discard_content_on_webhook_confirmed: true } })
        expect(discard.body.data).toMatchObject({ spam_threshold: 7.5, discard_content_on_webhook_confirmed: true })
        for (const v of [0, 15]) {
          const r = yield* call("PATCH", "/v1/account", { token, body: { spam_threshold: v } })
          expect(r.body.data.spam_threshold).toBe(v)
        }
        const cleared = yield* call("PATCH", "/v1/account", { token, body: { spam_threshold: null } })
        expect(cleared.body.data.spam_threshold).toBeNull()
        const rows = yield* sql<{ s: string | null; d: boolean }>`SELECT spam_threshold AS s, discard_content_on_webhook_confirmed AS d
          FROM organizations WHERE id = ${orgId}`
        expect(rows[0]).toEqual({ s: null, d: true })
        const bad: Array<[unknown, string]> = [
          [{ spam_threshold: 15.01 }, "spam_threshold"], [{ spam_threshold: -1 }, "spam_threshold"],
          [{ spam_threshold: "5" }, "spam_threshold"], [{ discard_content_on_webhook_confirmed: "yes" }, "discard_content_on_webhook_confirmed"],
          [{ plan: "pro" }, "plan"], [{}, "body"]
        ]
        for (const [body, field] of bad) {
          const r = yield* call("PATCH", "/v1/account", { token, body })
          expect([JSON.stringify(body), r.status, r.body.error.code]).toEqual([JSON.stringify(body), 400, "validation_error"])
          expect(r.body.error.message.startsWith(`${field}: `)).toBe(true)
        }
        const after = yield* call("GET", "/v1/account", { token })
        expect(after.body.data.plan).toBe("developer")
      }))
  })

  describe("plans", () => {
    it.effect("entitlements and limits agree: an agent lists no webhook entitlement yet may create its one webhook", () =>
      Effect.gen(function*() {
        for (const plan of ["agent", "developer", "pro"] as const) {
          const { token } = yield* newOrg(plan)
          const a = (yield* call("GET", "/v1/account", { token })).body.data
          expect([plan, a.entitlements, a.limits]).toEqual([plan, entitlementsOf(plan), LIMITS[plan]])
        }
        const agent = yield* newOrg("agent")
        const account = (yield* call("GET", "/v1/account", { token: agent.token })).body.data
        expect(account.entitlements).toEqual(["send_mail", "send_to_known_addresses"])
        expect(account.limits.webhooks_max_global).toBe(1)
        const first = yield* call("POST", "/v1/endpoints", { token: agent.token, body: { url: "http://127.0.0.1:9/a" } })
        expect(first.status).toBe(201)
        const second = yield* call("POST", "/v1/endpoints", { token: agent.token, body: { url: "http://127.0.0.1:9/b" } })
        // The one organization-wide slot is taken: a second is refused, as on developer.
        expect(second.status).toBe(409)
      }))

    it.effect("the health probe and the OpenAPI document report package.json's version", () =>
      Effect.gen(function*() {
        const health = yield* call("GET", "/v1/health")
        const spec = yield* call("GET", "/v1/openapi.json")
        expect([health.body.data.version, spec.body.info.version]).toEqual([pkg.version, pkg.version])
      }))
  })

  describe("service key", () => {
    it.effect("is made once in DATA_DIR and shared; the database holds only its check value; a bad MAILROOM_SECRET_KEY stops the start", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const config = yield* AppConfig
        const derive = Effect.flatMap(ServiceKey, (k) => k.derive("test/purpose")).pipe(Effect.provide(ServiceKey.Default))
        const a = yield* derive
        const b = yield* derive
        expect(a.equals(b)).toBe(true)
        const master = Buffer.from(readFileSync(join(config.dataDir, "secret.key"), "utf8").trim(), "hex")
        expect(a.equals(deriveKey(master, "test/purpose"))).toBe(true)
        const rows = yield* sql<{ name: string }>`SELECT name FROM service_keys`
        expect(rows.map((r) => r.name)).toEqual(["master-check"])
        const short = yield* Effect.exit(Effect.flatMap(ServiceKey, (k) => k.derive("x")).pipe(
          Effect.provide(ServiceKey.Default.pipe(Layer.provide(Layer.succeed(AppConfig, { ...config, masterKey: Option.some(Redacted.make("abcd")) }))))
        ))
        expect(short._tag).toBe("Failure")
        expect(JSON.stringify(short)).toContain("at least 32 bytes")
      }))
  })

  describe("GET /account/storage", () => {
    it.effect("computes usage from stored emails with the documented roundings", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const { orgId, token } = yield* newOrg()
        const other = yield* newOrg()
        const empty = yield* call("GET", "/v1/account/storage", { token })
        expect(empty.status).toBe(200)
        expect(empty.body.data).toEqual({ used_bytes: 0, used_kb: 0, used_mb: 0, quota_mb: 1024, percentage: 0, emails_count: 0 })
        // The inbound pipeline's table; created here when this branch runs without it.
        const sizes = [1000, 250_000, 3_000_000, 7_000_000]
        const insert = (org: string, size: number) =>
          sql`INSERT INTO emails (org_id, recipient, size_bytes, event_type, status)
              VALUES (${org}, 'a@agents.localhost', ${size}, 'email.received', 'accepted')`
        for (const s of sizes) yield* insert(orgId, s)
        yield* insert(other.orgId, 999_999_999)
        const r = yield* call("GET", "/v1/account/storage", { token })
        const used = sizes.reduce((a, b) => a + b, 0)
        expect(r.body.data).toEqual({
          used_bytes: used,
          used_kb: Number((used / 1024).toFixed(1)),
          used_mb: Number((used / 1048576).toFixed(2)),
          quota_mb: 1024,
          percentage: Number(((used / 1048576 / 1024) * 100).toFixed(1)),
          emails_count: 4
        })
        expect(r.body.data.used_kb).toBe(10010.7)
        expect(r.body.data.used_mb).toBe(9.78)
        expect(r.body.data.percentage).toBe(1)
      }))
  })

  describe("webhook secret", () => {
    it.effect("is created on first read, stable, never cached, and rotation replaces it once per 60 minutes", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const { orgId, token } = yield* newOrg()
        const before = yield* sql<{ s: string | null }>`SELECT webhook_secret AS s FROM organizations WHERE id = ${orgId}`
        expect(before[0]!.s).toBeNull()
        const first = yield* call("GET", "/v1/account/webhook-secret", { token })
        expect(first.status).toBe(200)
        expect(first.headers.get("cache-control")).toBe("no-store")
        const secret: string = first.body.data.secret
        expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/)
        expect((yield* call("GET", "/v1/account/webhook-secret", { token })).body.data.secret).toBe(secret)
        const others = yield* Effect.forEach([1, 2, 3], () => Effect.flatMap(newOrg(), (o) =>
          call("GET", "/v1/account/webhook-secret", { token: o.token })))
        expect(new Set([secret, ...others.map((o) => o.body.data.secret)]).size).toBe(4)

        const rotated = yield* call("POST", "/v1/account/webhook-secret/rotate", { token })
        expect(rotated.status).toBe(200)
        expect(rotated.headers.get("cache-control")).toBe("no-store")
        const next: string = rotated.body.data.secret
        expect(next).not.toBe(secret)
        expect((yield* call("GET", "/v1/account/webhook-secret", { token })).body.data.secret).toBe(next)
        const account = yield* call("GET", "/v1/account", { token })
        const rotatedAt = Date.parse(account.body.data.webhook_secret_rotated_at)
        expect(Math.abs(rotatedAt - Date.now())).toBeLessThan(60_000)

        const again = yield* call("POST", "/v1/account/webhook-secret/rotate", { token })
        expect(again.status).toBe(429)
        expect(again.body.error.code).toBe("rate_limit_exceeded")
        expect(again.headers.get("idempotent-replayed")).toBeNull()
        const retryAfter = Number(again.headers.get("retry-after"))
        expect(retryAfter).toBeGreaterThan(3500)
        expect(retryAfter).toBeLessThanOrEqual(3600)
        expect(again.headers.get("ratelimit-limit")).toBe("1")
        expect(again.headers.get("ratelimit-remaining")).toBe("0")
        expect((yield* call("GET", "/v1/account/webhook-secret", { token })).body.data.secret).toBe(next)

        // An hour later it can rotate again.
        yield* sql`UPDATE organizations SET webhook_secret_rotated_at = now() - interval '61 minutes' WHERE id = ${orgId}`
        const later = yield* call("POST", "/v1/account/webhook-secret/rotate", { token })
        expect(later.status).toBe(200)
        expect(later.body.data.secret).not.toBe(next)
      }))

    it.effect("requires a credential", () =>
      Effect.gen(function*() {
        for (const [m, p] of [["GET", "/v1/account/webhook-secret"], ["POST", "/v1/account/webhook-secret/rotate"],
          ["GET", "/v1/account/storage"], ["PATCH", "/v1/account"]] as const) {
          const r = yield* call(m, p, { body: m === "PATCH" ? { spam_threshold: 1 } : undefined })
          expect([p, r.status]).toEqual([p, 401])
        }
      }))
  })
})
