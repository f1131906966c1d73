/**
 * GET /v1/inbox over real HTTP with a test DNS server: verification, MX, destination (route, domain
 * default, fallback, disabled), the last delivery of real SMTP mail to a real receiver, and tenant
 * isolation.
 */
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import nodemailer from "nodemailer"
import { Provisioning } from "../src/identity/Provisioning.js"
import { TestServer } from "./support/harness.js"
import { TestDns, testServiceWithDns } from "./support/dns.js"
import { call } from "./support/http.js"
import { startReceiver } from "./support/receiver.js"

const Env = Provisioning.Default.pipe(Layer.provideMerge(testServiceWithDns({ DELIVERY_RETRY_DELAYS: "20ms,20ms" })))
const MANAGED = "agents.localhost"

const newOrg = (plan: "developer" | "pro" = "developer") =>
  Effect.gen(function*() {
    const p = yield* Provisioning
    const org = yield* p.createOrganization({ name: "Inbox", plan })
    const key = yield* p.issueApiKey(org.id)
    return { orgId: org.id, token: key.apiKey, inbox: org.managedInboxAddress as string }
  })

let seq = 0
const uniqueDomain = (label: string) => `${label}-${++seq}-${Math.random().toString(36).slice(2, 7)}.test`

const claim = (token: string, domain: string) =>
  Effect.gen(function*() {
    const r = yield* call("POST", "/v1/domains", { token, body: { domain } })
    expect(r.status).toBe(201)
    return r.body.data as { id: string; verification_token: string }
  })

const verifiedDomain = (token: string, domain = uniqueDomain("ready")) =>
  Effect.gen(function*() {
    const dns = yield* TestDns
    const d = yield* claim(token, domain)
    dns.zone.set(`_mailroom.${domain}`, { TXT: [`mailroom-verification=${d.verification_token}`] })
    dns.zone.set(domain, { MX: [{ exchange: "backup.other.test", priority: 20 }, { exchange: `mx.${MANAGED}`, priority: 10 }] })
    const v = yield* call("POST", `/v1/domains/${d.id}/verify`, { token })
    expect(v.body.data.verified).toBe(true)
    return { id: d.id, domain }
  })

const inbox = (token: string) =>
  Effect.gen(function*() {
    const r = yield* call("GET", "/v1/inbox", { token })
    expect(r.status).toBe(200)
    expect(r.body.success).toBe(true)
    return r.body.data
  })

const codes = (entry: { issues: Array<{ code: string; severity: string }> }) => entry.issues.map((i) => `${i.severity}:${i.code}`)

const sendMail = (to: string, subject: string) =>
  Effect.flatMap(TestServer, (server) =>
    Effect.promise(async () => {
      const transport = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
      try {
        return await transport.sendMail({ from: "sender@example.com", to, subject, text: "hello" })
      } finally {
        transport.close()
      }
    }))

/** Polls the deliveries list until one has the wanted status. */
const waitForDelivery = (token: string, status: string) =>
  Effect.gen(function*() {
    for (let i = 0; i < 200; i++) {
      const r = yield* call("GET", `/v1/webhooks/deliveries?status=${status}`, { token })
      if (r.body.data.length > 0) return r.body.data[0]
      yield* Effect.sleep("50 millis")
    }
    throw new Error(`no ${status} delivery`)
  })

layer(Env, { timeout: 120_000, excludeTestServices: true })("inbox", (it) => {
  describe("GET /v1/inbox", () => {
    it.effect("needs a credential", () =>
      Effect.gen(function*() {
        const r = yield* call("GET", "/v1/inbox")
        expect(r.status).toBe(401)
        expect(r.body.error.code).toBe("unauthorized")
      }))

    it.effect("a new organization: managed inbox without a destination is not ready (no_destination)", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const data = yield* inbox(org.token)
        expect(data.ready).toBe(false)
        expect(data.domains).toEqual([])
        expect(Number.isNaN(Date.parse(data.checked_at))).toBe(false)
        expect(data.managed_inbox).toEqual({
          kind: "managed_inbox",
          address: org.inbox,
          domain: MANAGED,
          domain_id: null,
          verified: true,
          is_active: true,
          mx: { status: "not_checked", hosts: [], expected: MANAGED },
          destination: null,
          routes: 0,
          last_delivery: null,
          last_received_at: null,
          ready: false,
          issues: [{ code: "no_destination", severity: "error", message: expect.stringContaining(org.inbox) }]
        })
      }))

    it.scoped("unverified domain without MX; verified domain with MX at the managed domain; fallback makes both reachable", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const unverifiedName = uniqueDomain("unverified")
        const unverified = yield* claim(org.token, unverifiedName)
        const verified = yield* verifiedDomain(org.token)

        const before = yield* inbox(org.token)
        expect(before.ready).toBe(false)
        expect(before.domains.map((d: { domain: string }) => d.domain)).toEqual([verified.domain, unverifiedName])
        const [v, u] = before.domains
        expect(v).toMatchObject({
          kind: "domain",
          address: null,
          domain_id: verified.id,
          verified: true,
          is_active: true,
          mx: { status: "ok", hosts: [`mx.${MANAGED}`, "backup.other.test"], expected: MANAGED },
          destination: null,
          ready: false
        })
        expect(codes(v)).toEqual(["error:no_destination"])
        expect(u).toMatchObject({ domain_id: unverified.id, verified: false, mx: { status: "missing", hosts: [] }, ready: false })
        expect(codes(u)).toEqual(["error:domain_unverified", "error:mx_missing", "error:no_destination"])
        expect(u.issues[0].message).toContain(`_mailroom.${unverifiedName}`)

        const receiver = yield* startReceiver
        const ep = yield* call("POST", "/v1/endpoints", { token: org.token, body: { url: receiver.url() } })
        expect(ep.status).toBe(201)
        const after = yield* inbox(org.token)
        const endpoint = { id: ep.body.data.id, kind: "http", url: receiver.url(), function_id: null, enabled: true }
        expect(after.managed_inbox).toMatchObject({ destination: { via: "fallback", route_id: null, endpoint }, ready: true, issues: [] })
        expect(after.domains[0]).toMatchObject({ destination: { via: "fallback", route_id: null, endpoint }, ready: true, issues: [] })
        // The unverified domain still blocks the whole report.
        expect(codes(after.domains[1])).toEqual(["error:domain_unverified", "error:mx_missing"])
        expect(after.ready).toBe(false)
        yield* call("DELETE", `/v1/domains/${unverified.id}`, { token: org.token })
        expect((yield* inbox(org.token)).ready).toBe(true)

        // A disabled fallback explains itself.
        const off = yield* call("PATCH", `/v1/endpoints/${ep.body.data.id}`, { token: org.token, body: { enabled: false } })
        expect(off.status).toBe(200)
        const disabled = yield* inbox(org.token)
        expect(disabled.ready).toBe(false)
        expect(codes(disabled.managed_inbox)).toEqual(["error:endpoint_disabled"])
        expect(codes(disabled.domains[0])).toEqual(["error:endpoint_disabled"])
        expect(disabled.domains[0].issues[0].message).toContain(ep.body.data.id)
      }))

    it.scoped("MX at another provider, an inactive domain, a domain default, and a route on the managed inbox", () =>
      Effect.gen(function*() {
        const dns = yield* TestDns
        const org = yield* newOrg("pro")
        const receiver = yield* startReceiver
        const d = yield* verifiedDomain(org.token)
        const def = yield* call("POST", "/v1/endpoints", { token: org.token, body: { url: receiver.url("/default"), domain_id: d.id } })
        expect(def.status).toBe(201)
        const routed = yield* call("POST", "/v1/endpoints", { token: org.token, body: { url: receiver.url("/routed"), is_route_target: true } })
        expect(routed.status).toBe(201)
        const route = yield* call("POST", "/v1/routes", { token: org.token, body: { pattern: org.inbox, endpoint_id: routed.body.data.id } })
        expect(route.status).toBe(201)

        const ok = yield* inbox(org.token)
        expect(ok.ready).toBe(true)
        expect(ok.managed_inbox).toMatchObject({
          destination: { via: "route", route_id: route.body.data.id, endpoint: { id: routed.body.data.id, url: receiver.url("/routed") } },
          routes: 1,
          ready: true
        })
        expect(ok.domains[0]).toMatchObject({ destination: { via: "domain_default", endpoint: { id: def.body.data.id } }, ready: true })

        dns.zone.set(d.domain, { MX: [{ exchange: "aspmx.l.google.test", priority: 1 }] })
        yield* call("PATCH", `/v1/domains/${d.id}`, { token: org.token, body: { is_active: false } })
        const moved = yield* inbox(org.token)
        expect(moved.domains[0].mx).toEqual({ status: "other_provider", hosts: ["aspmx.l.google.test"], expected: MANAGED })
        expect(codes(moved.domains[0])).toEqual(["error:domain_inactive", "error:mx_other_provider"])
        expect(moved.ready).toBe(false)
        expect(moved.managed_inbox.ready).toBe(true)

        // A failing lookup is reported, not a failed request, and does not decide readiness.
        yield* call("PATCH", `/v1/domains/${d.id}`, { token: org.token, body: { is_active: true } })
        dns.zone.set(d.domain, { SERVFAIL: true })
        const broken = yield* inbox(org.token)
        expect(broken.domains[0].mx).toEqual({ status: "lookup_failed", hosts: [], expected: MANAGED })
        expect(codes(broken.domains[0])).toEqual(["warning:mx_lookup_failed"])
        expect(broken.domains[0].ready).toBe(true)
      }))

    it.scoped("reports the last delivery and the last received mail: failed with http_500, then delivered", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const receiver = yield* startReceiver
        receiver.answer = { status: 500, body: "down" }
        const d = yield* verifiedDomain(org.token)
        const ep = yield* call("POST", "/v1/endpoints", { token: org.token, body: { url: receiver.url() } })
        expect(ep.status).toBe(201)

        yield* sendMail(org.inbox, "will fail")
        const failed = yield* waitForDelivery(org.token, "failed")
        const report = yield* inbox(org.token)
        expect(report.managed_inbox.last_delivery).toEqual({
          id: failed.id,
          endpoint_id: ep.body.data.id,
          status: "failed",
          attempt_count: 3,
          last_error_code: "http_500",
          at: failed.updated_at
        })
        expect(report.managed_inbox.last_received_at).not.toBeNull()
        expect(codes(report.managed_inbox)).toEqual(["warning:last_delivery_failed"])
        expect(report.managed_inbox.issues[0].message).toContain("http_500")
        // A failed delivery is a warning: the setup itself is ready.
        expect(report.managed_inbox.ready).toBe(true)
        expect(report.domains[0]).toMatchObject({ last_delivery: null, last_received_at: null, ready: true, issues: [] })

        receiver.answer = { status: 200, body: "ok" }
        yield* sendMail(`anyone@${d.domain}`, "will arrive")
        const delivered = yield* waitForDelivery(org.token, "delivered")
        const later = yield* inbox(org.token)
        expect(later.domains[0].last_delivery).toMatchObject({ id: delivered.id, status: "delivered", attempt_count: 1, last_error_code: null })
        expect(Date.parse(later.domains[0].last_received_at)).toBeGreaterThanOrEqual(Date.parse(later.managed_inbox.last_received_at))
        expect(later.domains[0].issues).toEqual([])
        expect(later.managed_inbox.last_delivery.id).toBe(failed.id)
      }))

    it.scoped("another organization sees none of it, even for the same domain name", () =>
      Effect.gen(function*() {
        const a = yield* newOrg()
        const b = yield* newOrg()
        const receiver = yield* startReceiver
        // Both claim the name; A verifies it first.
        const name = uniqueDomain("shared")
        const bClaim = yield* claim(b.token, name)
        const d = yield* verifiedDomain(a.token, name)
        yield* call("POST", "/v1/endpoints", { token: a.token, body: { url: receiver.url() } })
        yield* sendMail(a.inbox, "for a")
        yield* waitForDelivery(a.token, "delivered")

        const seen = yield* inbox(b.token)
        expect(seen.managed_inbox).toMatchObject({ address: b.inbox, destination: null, last_delivery: null, last_received_at: null })
        expect(seen.domains).toHaveLength(1)
        expect(seen.domains[0]).toMatchObject({ domain_id: bClaim.id, verified: false, destination: null, last_delivery: null })
        // The MX check is the domain's own DNS, the same for both; nothing else of A's shows.
        expect(seen.domains[0].mx.status).toBe("ok")
        expect(codes(seen.domains[0])).toEqual(["error:domain_unverified", "error:no_destination"])
        const mine = yield* inbox(a.token)
        expect(mine.managed_inbox.last_delivery).not.toBeNull()
        expect(mine.domains.map((x: { domain_id: string }) => x.domain_id)).toEqual([d.id])
      }))
  })
})
