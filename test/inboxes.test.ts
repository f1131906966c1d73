/**
 * Inboxes from outside: CRUD over real HTTP, the plan's `inboxes_max` (403), taken addresses and
 * inboxes in use (409), mail over real SMTP to a created inbox stored with its `inbox_id`, the
 * `inbox_id` filters of emails, threads, sent mail and search, sending from a created inbox through
 * a real relay, and another organization's inboxes (404).
 */
import { describe, expect, layer } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import nodemailer from "nodemailer"
import { Provisioning } from "../src/identity/Provisioning.js"
import { TestServer } from "./support/harness.js"
import { testServiceWithDns } from "./support/dns.js"
import { call, expectError } from "./support/http.js"
import { startTestRelay, type TestRelay } from "./support/relay.js"

class Relay extends Context.Tag("test/InboxesRelay")<Relay, TestRelay>() {}

const Env = Provisioning.Default.pipe(
  Layer.provideMerge(Layer.unwrapScoped(Effect.map(startTestRelay, (relay) =>
    testServiceWithDns({ OUTBOUND_SMTP_URL: relay.url, OUTBOUND_TIMEOUT: "2s" }).pipe(Layer.merge(Layer.succeed(Relay, relay))))))
)
const MANAGED = "agents.localhost"

let seq = 0
const unique = (label: string) => `${label}-${++seq}-${Math.random().toString(36).slice(2, 7)}`

const newOrg = (plan: "agent" | "developer" | "pro" = "developer") =>
  Effect.gen(function*() {
    const p = yield* Provisioning
    const org = yield* p.createOrganization({ name: "Inboxes", plan })
    const key = yield* p.issueApiKey(org.id)
    return { orgId: org.id, token: key.apiKey, address: org.managedInboxAddress! }
  })

const create = (token: string, body: Record<string, unknown>) => call("POST", "/v1/inboxes", { token, body })

const created = (token: string, body: Record<string, unknown> = {}) =>
  Effect.map(create(token, body), (r) => {
    expect(r.status).toBe(201)
    return r.body.data as { id: string; address: string; username: string; display_name: string | null; is_default: boolean }
  })

const mailIn = (to: string, subject: string, extra: Record<string, unknown> = {}) =>
  Effect.flatMap(TestServer, (server) =>
    Effect.promise(async () => {
      const t = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
      try {
        const info = await t.sendMail({ from: "writer@example.com", to, subject, text: `about ${subject}`, ...extra })
        return info
      } finally {
        t.close()
      }
    }))

layer(Env, { timeout: 180_000, excludeTestServices: true })("inboxes", (it) => {
  describe("CRUD", () => {
    it.effect("the default inbox is listed; created ones get their own address, random when no username", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const first = yield* call("GET", "/v1/inboxes", { token: org.token })
        expect(first.status).toBe(200)
        expect(first.body.data).toHaveLength(1)
        expect(first.body.data[0]).toMatchObject({ address: org.address, is_default: true, display_name: null })
        expect(first.body.meta).toMatchObject({ total: 1, cursor: null })

        const name = unique("support")
        const a = yield* created(org.token, { username: name.toUpperCase(), display_name: "Support" })
        expect(a).toMatchObject({ address: `${name}@${MANAGED}`, username: name, display_name: "Support", is_default: false })
        const b = yield* created(org.token)
        expect(b.address).toMatch(new RegExp(`^inbox-[a-z0-9]{10}@${MANAGED.replace(".", "\\.")}$`))
        expect(b.display_name).toBeNull()

        const got = yield* call("GET", `/v1/inboxes/${a.id}`, { token: org.token })
        expect(got.status).toBe(200)
        expect(got.body.data).toMatchObject({ id: a.id, address: a.address })

        const paged = yield* call("GET", "/v1/inboxes?limit=2", { token: org.token })
        expect(paged.body.data.map((i: { id: string }) => i.id)).toEqual([b.id, a.id])
        expect(paged.body.meta.total).toBe(3)
        const rest = yield* call("GET", `/v1/inboxes?limit=2&cursor=${paged.body.meta.cursor}`, { token: org.token })
        expect(rest.body.data.map((i: { address: string }) => i.address)).toEqual([org.address])

        const renamed = yield* call("PATCH", `/v1/inboxes/${a.id}`, {
          token: org.token,
          body: { username: `${name}-desk`, display_name: "Help desk" }
        })
        expect(renamed.status).toBe(200)
        expect(renamed.body.data).toMatchObject({ id: a.id, address: `${name}-desk@${MANAGED}`, display_name: "Help desk" })
        const cleared = yield* call("PATCH", `/v1/inboxes/${a.id}`, { token: org.token, body: { display_name: null } })
        expect(cleared.body.data).toMatchObject({ display_name: null, address: `${name}-desk@${MANAGED}` })

        const removed = yield* call("DELETE", `/v1/inboxes/${b.id}`, { token: org.token })
        expect(removed.status).toBe(200)
        expect(removed.body.data.id).toBe(b.id)
        expectError(yield* call("GET", `/v1/inboxes/${b.id}`, { token: org.token }), 404, "not_found")
        expectError(yield* call("DELETE", `/v1/inboxes/${b.id}`, { token: org.token }), 404, "not_found")
        expectError(yield* call("PATCH", `/v1/inboxes/${b.id}`, { token: org.token, body: { display_name: "x" } }), 404, "not_found")
      }))

    it.effect("invalid usernames and bodies are 400 validation_error", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        for (const username of ["", "a+b", "-lead", "trail.", "dots..here", "fn-wake", "bounces", "Bounces", "x".repeat(65), "sp ace", "ü"]) {
          expectError(yield* create(org.token, { username }), 400, "validation_error")
        }
        expectError(yield* create(org.token, { display_name: "" }), 400, "validation_error")
        expectError(yield* create(org.token, { unknown: 1 }), 400, "validation_error")
        const inbox = yield* created(org.token)
        expectError(yield* call("PATCH", `/v1/inboxes/${inbox.id}`, { token: org.token, body: {} }), 400, "validation_error")
        expectError(yield* call("PATCH", `/v1/inboxes/${inbox.id}`, { token: org.token, body: { username: "a@b" } }), 400, "validation_error")
        expectError(yield* call("GET", "/v1/inboxes/not-a-uuid", { token: org.token }), 400, "validation_error")
        expectError(yield* call("GET", "/v1/inboxes", {}), 401, "unauthorized")
      }))

    it.effect("GET /v1/inbox (readiness) is unchanged beside the inboxes", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        yield* created(org.token)
        const r = yield* call("GET", "/v1/inbox", { token: org.token })
        expect(r.status).toBe(200)
        expect(r.body.data.managed_inbox.address).toBe(org.address)
      }))
  })

  describe("limits per plan", () => {
    it.effect("GET /v1/account shows limits.inboxes_max: agent 1, developer 10, pro 100", () =>
      Effect.gen(function*() {
        for (const [plan, max] of [["agent", 1], ["developer", 10], ["pro", 100]] as const) {
          const org = yield* newOrg(plan)
          const r = yield* call("GET", "/v1/account", { token: org.token })
          expect(r.body.data.limits.inboxes_max).toBe(max)
        }
      }))

    it.effect("past the limit (the default inbox counted) is 403 forbidden; deleting one frees a slot", () =>
      Effect.gen(function*() {
        const agent = yield* newOrg("agent")
        const refused = yield* create(agent.token, { username: unique("agentbox") })
        expectError(refused, 403, "forbidden")
        expect(refused.body.error.details).toMatchObject({ feature: "inboxes_max", limit: 1, current_plan: "agent", required_plan: "developer" })

        const dev = yield* newOrg("developer")
        // Distinct bodies: identical POSTs without a key within 60 s are one request (idempotency).
        const nine = yield* Effect.forEach(Array.from({ length: 9 }), () => created(dev.token, { display_name: unique("dev") }), {
          concurrency: 3
        })
        const over = yield* create(dev.token, { display_name: unique("over") })
        expectError(over, 403, "forbidden")
        expect(over.body.error.details).toMatchObject({ limit: 10, current_plan: "developer", required_plan: "pro" })
        expect((yield* call("GET", "/v1/inboxes", { token: dev.token })).body.meta.total).toBe(10)
        expect((yield* call("DELETE", `/v1/inboxes/${nine[0]!.id}`, { token: dev.token })).status).toBe(200)
        yield* created(dev.token, { display_name: unique("again") })

        const pro = yield* newOrg("pro")
        yield* Effect.forEach(Array.from({ length: 10 }), () => created(pro.token, { display_name: unique("pro") }), { concurrency: 3 })
        expect((yield* call("GET", "/v1/inboxes", { token: pro.token })).body.meta.total).toBe(11)
      }))

    it.effect("concurrent creates never pass the limit", () =>
      Effect.gen(function*() {
        const dev = yield* newOrg("developer")
        const results = yield* Effect.forEach(Array.from({ length: 14 }), () => create(dev.token, { username: unique("race") }), {
          concurrency: "unbounded"
        })
        expect(results.filter((r) => r.status === 201)).toHaveLength(9)
        for (const r of results.filter((r) => r.status !== 201)) expectError(r, 403, "forbidden")
      }))
  })

  describe("conflicts", () => {
    it.effect("an address taken by any organization (a created one or another's default) is 409 conflict", () =>
      Effect.gen(function*() {
        const a = yield* newOrg()
        const b = yield* newOrg()
        const name = unique("shared")
        yield* created(a.token, { username: name })
        // Another body than the first: the same body again within 60 s would replay the first 201 (idempotency).
        expectError(yield* create(a.token, { username: name, display_name: "again" }), 409, "conflict")
        expectError(yield* create(b.token, { username: name }), 409, "conflict")
        const otherDefault = b.address.split("@")[0]
        expectError(yield* create(a.token, { username: otherDefault }), 409, "conflict")
        const mine = yield* created(a.token)
        expectError(yield* call("PATCH", `/v1/inboxes/${mine.id}`, { token: a.token, body: { username: otherDefault } }), 409, "conflict")
        expectError(yield* call("PATCH", `/v1/inboxes/${mine.id}`, { token: a.token, body: { username: name } }), 409, "conflict")
      }))

    it.effect("the default inbox cannot be deleted or get another username (409); its display name can change", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const list = yield* call("GET", "/v1/inboxes", { token: org.token })
        const def = list.body.data[0]
        expectError(yield* call("DELETE", `/v1/inboxes/${def.id}`, { token: org.token }), 409, "conflict")
        expectError(yield* call("PATCH", `/v1/inboxes/${def.id}`, { token: org.token, body: { username: unique("renamed") } }), 409, "conflict")
        const named = yield* call("PATCH", `/v1/inboxes/${def.id}`, { token: org.token, body: { display_name: "Main" } })
        expect(named.status).toBe(200)
        expect(named.body.data).toMatchObject({ address: org.address, display_name: "Main", is_default: true })
      }))

    it.effect("an inbox that routes use cannot be deleted or renamed (409 with details); without them it can", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const inbox = yield* created(org.token, { username: unique("routed") })
        const endpoint = yield* call("POST", "/v1/endpoints", {
          token: org.token,
          body: { url: "http://127.0.0.1:9/in", is_route_target: true }
        })
        expect(endpoint.status).toBe(201)
        const route = yield* call("POST", "/v1/routes", {
          token: org.token,
          body: { pattern: `${inbox.username}+orders@${MANAGED}`, endpoint_id: endpoint.body.data.id }
        })
        expect(route.status).toBe(201)
        expect(route.body.data.inbox_id).toBe(inbox.id)
        const del = yield* call("DELETE", `/v1/inboxes/${inbox.id}`, { token: org.token })
        expectError(del, 409, "conflict")
        expect(del.body.error.details).toEqual({ routes: [route.body.data.id], functions: [] })
        expectError(yield* call("PATCH", `/v1/inboxes/${inbox.id}`, { token: org.token, body: { username: unique("moved") } }), 409, "conflict")
        // A display name is no address: it changes with routes in place.
        expect((yield* call("PATCH", `/v1/inboxes/${inbox.id}`, { token: org.token, body: { display_name: "Orders" } })).status).toBe(200)
        // Routes on another organization's inbox are refused like any foreign address.
        const other = yield* newOrg()
        expectError(yield* call("POST", "/v1/routes", {
          token: other.token,
          body: { pattern: inbox.address, endpoint_id: endpoint.body.data.id }
        }), 400, "validation_error")
        expect((yield* call("DELETE", `/v1/routes/${route.body.data.id}`, { token: org.token })).status).toBe(200)

        // A function reached through a route on the inbox is named too.
        const fn = yield* call("POST", "/v1/functions", {
          token: org.token,
          body: { name: unique("inbox-fn"), code: `export default { async fetch() { return new Response("ok") } }` }
        })
        expect(fn.status).toBe(201)
        const fnRoute = yield* call("POST", "/v1/routes", {
          token: org.token,
          body: { pattern: inbox.address, function_id: fn.body.data.id }
        })
        expect(fnRoute.status).toBe(201)
        const held = yield* call("DELETE", `/v1/inboxes/${inbox.id}`, { token: org.token })
        expectError(held, 409, "conflict")
        expect(held.body.error.details).toEqual({ routes: [fnRoute.body.data.id], functions: [fn.body.data.id] })
        expect((yield* call("DELETE", `/v1/routes/${fnRoute.body.data.id}`, { token: org.token })).status).toBe(200)
        expect((yield* call("DELETE", `/v1/inboxes/${inbox.id}`, { token: org.token })).status).toBe(200)
      }))
  })

  describe("mail", () => {
    it.effect("mail over SMTP to a created inbox (and its +tag form) is stored with its inbox_id; lists filter by it", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const inbox = yield* created(org.token, { username: unique("sales") })
        const subject = unique("quote")
        yield* mailIn(`${inbox.username}+leads@${MANAGED}`, subject)
        yield* mailIn(org.address, unique("other"))
        const emails = yield* call("GET", `/v1/emails?inbox_id=${inbox.id}`, { token: org.token })
        expect(emails.status).toBe(200)
        expect(emails.body.data).toHaveLength(1)
        expect(emails.body.data[0]).toMatchObject({ subject, inbox_id: inbox.id, recipient: `${inbox.username}+leads@${MANAGED}` })
        const all = yield* call("GET", "/v1/emails", { token: org.token })
        expect(all.body.data).toHaveLength(2)
        const defaultId = (yield* call("GET", "/v1/inboxes", { token: org.token })).body.data
          .find((i: { is_default: boolean }) => i.is_default).id
        expect(all.body.data.map((e: { inbox_id: string }) => e.inbox_id).sort()).toEqual([inbox.id, defaultId].sort())
        const one = yield* call("GET", `/v1/emails/${emails.body.data[0].id}`, { token: org.token })
        expect(one.body.data.inbox_id).toBe(inbox.id)

        const threads = yield* call("GET", `/v1/threads?inbox_id=${inbox.id}`, { token: org.token })
        expect(threads.status).toBe(200)
        expect(threads.body.data).toHaveLength(1)
        expect(threads.body.data[0]).toMatchObject({ subject, inbox_id: inbox.id })
        const thread = yield* call("GET", `/v1/threads/${threads.body.data[0].id}`, { token: org.token })
        expect(thread.body.data.messages[0].inbox_id).toBe(inbox.id)

        const found = yield* call("GET", `/v1/search?q=${subject}&mode=lexical&inbox_id=${inbox.id}`, { token: org.token })
        expect(found.status).toBe(200)
        expect(found.body.data.results).toHaveLength(1)
        expect(found.body.data.results[0]).toMatchObject({ inbox_id: inbox.id, subject })
        const elsewhere = yield* call("GET", `/v1/search?q=${subject}&mode=lexical&inbox_id=${defaultId}`, { token: org.token })
        expect(elsewhere.body.data.results).toHaveLength(0)

        // A deleted inbox's address takes no more mail; what it received stays, with inbox_id null.
        expect((yield* call("DELETE", `/v1/inboxes/${inbox.id}`, { token: org.token })).status).toBe(200)
        const kept = yield* call("GET", `/v1/emails/${emails.body.data[0].id}`, { token: org.token })
        expect(kept.body.data.inbox_id).toBeNull()
        const refused = yield* Effect.exit(mailIn(inbox.address, unique("late")))
        expect(String(refused)).toContain("no such mailbox")
      }))

    it.effect("a renamed inbox takes mail at its new address under the same id", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const inbox = yield* created(org.token)
        const name = unique("renamed")
        yield* call("PATCH", `/v1/inboxes/${inbox.id}`, { token: org.token, body: { username: name } })
        yield* mailIn(`${name}@${MANAGED}`, "after the rename")
        const emails = yield* call("GET", `/v1/emails?inbox_id=${inbox.id}`, { token: org.token })
        expect(emails.body.data.map((e: { subject: string }) => e.subject)).toEqual(["after the rename"])
      }))

    it.effect("send-mail from a created inbox is relayed and listed with its inbox_id; another org's inbox is refused", () =>
      Effect.gen(function*() {
        const relay = yield* Relay
        const org = yield* newOrg()
        const inbox = yield* created(org.token, { username: unique("outbound"), display_name: "Outbound" })
        const to = `${unique("rcpt")}@example.com`
        const sent = yield* call("POST", "/v1/send-mail", {
          token: org.token,
          body: { from: `Outbound <${inbox.username}+news@${MANAGED}>`, to, subject: "from a created inbox", text: "hi" }
        })
        expect(sent.status).toBe(201)
        expect(sent.body.data).toMatchObject({ status: "sent", inbox_id: inbox.id })
        // The envelope sender is the send's VERP return path; the From header names the inbox.
        expect(relay.messages.some((m) =>
          m.to.includes(to) && /^bounces\+[0-9a-f]{48}@/.test(m.from) &&
          m.raw.toString("utf8").includes(`From: Outbound <${inbox.username}+news@${MANAGED}>`)
        )).toBe(true)
        const listed = yield* call("GET", `/v1/sent-emails?inbox_id=${inbox.id}`, { token: org.token })
        expect(listed.body.data.map((s: { id: string }) => s.id)).toEqual([sent.body.data.id])
        const fromDefault = yield* call("POST", "/v1/send-mail", {
          token: org.token,
          body: { to, subject: "from the default inbox", text: "hi" }
        })
        expect(fromDefault.status).toBe(201)
        expect(fromDefault.body.data.inbox_id).not.toBe(inbox.id)
        expect((yield* call("GET", `/v1/sent-emails?inbox_id=${inbox.id}`, { token: org.token })).body.data).toHaveLength(1)
        const threads = yield* call("GET", `/v1/threads?inbox_id=${inbox.id}`, { token: org.token })
        expect(threads.body.data.map((t: { inbox_id: string }) => t.inbox_id)).toEqual([inbox.id])

        // A reply goes from the inbox the original reached; a forward and a scheduled send may name it.
        yield* mailIn(inbox.address, "question for outbound", { from: to })
        const original = (yield* call("GET", `/v1/emails?inbox_id=${inbox.id}`, { token: org.token })).body.data[0]
        const reply = yield* call("POST", `/v1/emails/${original.id}/reply`, { token: org.token, body: { text: "answer" } })
        expect(reply.status).toBe(201)
        expect(reply.body.data).toMatchObject({ inbox_id: inbox.id, status: "sent" })
        expect(reply.body.data.from).toContain(inbox.address)
        const forward = yield* call("POST", `/v1/emails/${original.id}/forward`, {
          token: org.token,
          body: { to: `${unique("fwd")}@example.com`, from: inbox.address }
        })
        expect(forward.status).toBe(201)
        expect(forward.body.data.inbox_id).toBe(inbox.id)
        const later = yield* call("POST", "/v1/send-mail", {
          token: org.token,
          body: { from: inbox.address, to, subject: "later", text: "hi", send_at: new Date(Date.now() + 3_600_000).toISOString() }
        })
        expect(later.status).toBe(201)
        expect(later.body.data).toMatchObject({ status: "scheduled", inbox_id: inbox.id })
        expect((yield* call("GET", `/v1/sent-emails?inbox_id=${inbox.id}`, { token: org.token })).body.data).toHaveLength(4)

        const other = yield* newOrg()
        const refused = yield* call("POST", "/v1/send-mail", {
          token: other.token,
          body: { from: inbox.address, to, subject: "not mine", text: "hi" }
        })
        expectError(refused, 403, "cannot_send_from_domain")
      }))
  })

  describe("isolation", () => {
    it.effect("another organization's inbox ids are 404, and filter nothing of its mail", () =>
      Effect.gen(function*() {
        const a = yield* newOrg()
        const b = yield* newOrg()
        const inbox = yield* created(a.token)
        yield* mailIn(inbox.address, unique("private"))
        expectError(yield* call("GET", `/v1/inboxes/${inbox.id}`, { token: b.token }), 404, "not_found")
        expectError(yield* call("PATCH", `/v1/inboxes/${inbox.id}`, { token: b.token, body: { display_name: "mine" } }), 404, "not_found")
        expectError(yield* call("DELETE", `/v1/inboxes/${inbox.id}`, { token: b.token }), 404, "not_found")
        expect((yield* call("GET", "/v1/inboxes", { token: b.token })).body.meta.total).toBe(1)
        expect((yield* call("GET", `/v1/emails?inbox_id=${inbox.id}`, { token: b.token })).body.data).toHaveLength(0)
        expect((yield* call("GET", `/v1/threads?inbox_id=${inbox.id}`, { token: b.token })).body.data).toHaveLength(0)
        expect((yield* call("GET", `/v1/sent-emails?inbox_id=${inbox.id}`, { token: b.token })).body.data).toHaveLength(0)
        expect((yield* call("GET", `/v1/inboxes/${inbox.id}`, { token: a.token })).status).toBe(200)
      }))
  })
})
