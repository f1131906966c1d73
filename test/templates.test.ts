/**
 * Templates over real HTTP, SMTP and workerd: the public reads, the install (entitlement, required
 * secrets, one transaction: a refused endpoint leaves no function behind), and templates driven end
 * to end by mail: remember-senders counts senders in its memory, forward-to-webhook re-posts the
 * event with a signature the receiver verifies with the account secret (and a failing target makes
 * the delivery fail and retry), auto-reply answers through the API (the reply reaches the relay,
 * threaded) and daily-digest's wake mails the digest of what came in.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import { simpleParser } from "mailparser"
import nodemailer from "nodemailer"
import { Provisioning } from "../src/identity/Provisioning.js"
import { loadTemplates } from "../src/templates/Catalog.js"
import { TestServer, testService } from "./support/harness.js"
import { eventually, startHooks, verifySignature } from "./support/hooks.js"
import { call } from "./support/http.js"
import { startTestRelay, type TestRelay } from "./support/relay.js"

class Relay extends Context.Tag("test/Relay")<Relay, TestRelay>() {}

const Env = Provisioning.Default.pipe(
  Layer.provideMerge(Layer.unwrapScoped(Effect.map(startTestRelay, (relay) =>
    testService({
      FUNCTION_TIMEOUT: "10s",
      DELIVERY_RETRY_DELAYS: "300ms,600ms",
      DNS_SERVER: "127.0.0.1:9",
      // forward-to-webhook posts to a receiver on loopback.
      FUNCTION_ALLOW_PRIVATE_NETWORK: "true",
      // Mail the templates send (auto-reply, daily-digest) reaches this relay.
      OUTBOUND_SMTP_URL: relay.url
    }).pipe(Layer.merge(Layer.succeed(Relay, relay))))))
)

const newOrg = (plan: "agent" | "developer" = "developer") =>
  Effect.gen(function*() {
    const p = yield* Provisioning
    const org = yield* p.createOrganization({ name: "Tpl", plan })
    const key = yield* p.issueApiKey(org.id)
    return { orgId: org.id, token: key.apiKey, inbox: org.managedInboxAddress! }
  })

/** Runs `probe` every 100 ms until it gives a value (at most 15 s). */
const until = <A, E, R>(what: string, probe: Effect.Effect<A | undefined, E, R>) =>
  Effect.gen(function*() {
    for (let i = 0; i < 150; i++) {
      const value = yield* probe
      if (value !== undefined) return value
      yield* Effect.sleep("100 millis")
    }
    return yield* Effect.dieMessage(`timed out waiting for ${what}`)
  })

const sendMail = (to: string, from: string, subject: string, messageId?: string) =>
  Effect.flatMap(TestServer, (server) =>
    Effect.promise(async () => {
      const transport = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
      try {
        await transport.sendMail({ from, to, subject, text: `body of ${subject}`, ...(messageId !== undefined ? { messageId } : {}) })
      } finally {
        transport.close()
      }
    }))

layer(Env, { timeout: 240_000, excludeTestServices: true })("templates", (it) => {
  describe("public reads", () => {
    it.effect("list and get need no credential; every template in the folder is served with its code and README", () =>
      Effect.gen(function*() {
        const list = yield* call("GET", "/v1/templates")
        expect(list.status).toBe(200)
        const slugs = list.body.data.map((t: { slug: string }) => t.slug)
        expect(slugs).toEqual(["auto-reply", "daily-digest", "forward-to-webhook", "remember-senders"])
        expect(list.body.meta).toMatchObject({ total: 4, cursor: null })
        for (const t of list.body.data) {
          expect(Object.keys(t).sort()).toEqual(
            ["description", "event_types", "name", "optional_secrets", "required_secrets", "slug", "version"]
          )
        }
        const onDisk = loadTemplates()
        const forward = yield* call("GET", "/v1/templates/forward-to-webhook")
        expect(forward.status).toBe(200)
        expect(forward.body.data).toMatchObject({
          slug: "forward-to-webhook",
          required_secrets: ["TARGET_URL"],
          code: onDisk.find((t) => t.slug === "forward-to-webhook")!.code
        })
        expect(forward.body.data.readme).toContain("# forward-to-webhook")
        const digest = yield* call("GET", "/v1/templates/daily-digest")
        expect(digest.body.data.wakes).toEqual([{ command: { type: "digest" }, cron: "0 8 * * *" }])
        const missing = yield* call("GET", "/v1/templates/no-such-template")
        expect(missing.status).toBe(404)
        expect(missing.body.error.code).toBe("not_found")
        const bad = yield* call("GET", "/v1/templates/Bad_Slug")
        expect(bad.status).toBe(400)
        expect(bad.body.error.code).toBe("validation_error")
      }))

    it.effect("every template's module loads in workerd and verifies the signature before acting", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        for (const t of loadTemplates()) {
          expect(t.code, t.slug).toContain("mailroom-signature")
          expect(t.code, t.slug).toContain("MAILROOM_WEBHOOK_SECRET")
          const fn = yield* call("POST", "/v1/functions", { token: org.token, body: { name: `check-${t.slug}`, code: t.code } })
          expect(fn.status, `${t.slug}: ${fn.text}`).toBe(201)
        }
      }))
  })

  describe("install", () => {
    it.effect("needs a credential and the functions entitlement; required secrets are checked, all of them named", () =>
      Effect.gen(function*() {
        const anonymous = yield* call("POST", "/v1/templates/remember-senders/install", { body: {} })
        expect(anonymous.status).toBe(401)
        const agent = yield* newOrg("agent")
        const denied = yield* call("POST", "/v1/templates/remember-senders/install", { token: agent.token, body: {} })
        expect(denied.status).toBe(403)
        expect(denied.body.error.details).toMatchObject({ missing_entitlement: "functions" })
        const dev = yield* newOrg()
        const noSecret = yield* call("POST", "/v1/templates/forward-to-webhook/install", { token: dev.token, body: {} })
        expect(noSecret.status).toBe(400)
        expect(noSecret.body.error).toMatchObject({
          code: "validation_error",
          message: "secrets.TARGET_URL: is required by the forward-to-webhook template"
        })
        const empty = yield* call("POST", "/v1/templates/forward-to-webhook/install", {
          token: dev.token,
          body: { secrets: { TARGET_URL: "" } }
        })
        expect(empty.status).toBe(400)
        const unknown = yield* call("POST", "/v1/templates/nope/install", { token: dev.token, body: {} })
        expect(unknown.status).toBe(404)
        const extra = yield* call("POST", "/v1/templates/remember-senders/install", { token: dev.token, body: { colour: "red" } })
        expect(extra.status).toBe(400)
        const sql = yield* SqlClient.SqlClient
        expect(yield* sql`SELECT 1 FROM functions WHERE org_id = ${dev.orgId}`).toHaveLength(0)
      }))

    it.effect("creates the function, its endpoint (subscribed to the template's events) and a route, in one transaction", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const installed = yield* call("POST", "/v1/templates/remember-senders/install", {
          token: org.token,
          body: { name: "senders", route: { pattern: org.inbox } }
        })
        expect(installed.status, installed.text).toBe(201)
        const { function: fn, endpoint, route } = installed.body.data
        expect(fn).toMatchObject({ name: "senders", version: 1, endpoint_id: endpoint.id })
        expect(endpoint).toMatchObject({
          kind: "function",
          function_id: fn.id,
          is_route_target: true,
          rules: { event_types: ["email.received"] }
        })
        expect(route).toMatchObject({ pattern: org.inbox, endpoint_id: endpoint.id })

        // Without a route the function's endpoint is the organization-wide one; that slot is taken
        // now, so a second install is refused whole: no function, endpoint or route is left.
        const sql = yield* SqlClient.SqlClient
        const first = yield* call("POST", "/v1/templates/remember-senders/install", { token: org.token, body: { name: "everything" } })
        expect(first.status, first.text).toBe(201)
        expect(first.body.data).toMatchObject({ route: null, endpoint: { is_route_target: false, domain_id: null } })
        const second = yield* call("POST", "/v1/templates/remember-senders/install", { token: org.token, body: { name: "again" } })
        expect(second.status).toBe(409)
        expect(yield* sql`SELECT 1 FROM functions WHERE org_id = ${org.orgId} AND name = 'again'`).toHaveLength(0)
        // A name in use is 409 too, with nothing created.
        const taken = yield* call("POST", "/v1/templates/remember-senders/install", {
          token: org.token,
          body: { name: "senders", route: { pattern: `${org.inbox.split("@")[0]}+x@${org.inbox.split("@")[1]}` } }
        })
        expect(taken.status).toBe(409)
        expect((yield* call("GET", "/v1/routes", { token: org.token })).body.data).toHaveLength(1)
        // A route the organization cannot lay is 400, with nothing created.
        const badRoute = yield* call("POST", "/v1/templates/remember-senders/install", {
          token: org.token,
          body: { name: "elsewhere", route: { pattern: "someone@not-ours.example" } }
        })
        expect(badRoute.status).toBe(400)
        expect(yield* sql`SELECT 1 FROM functions WHERE org_id = ${org.orgId} AND name = 'elsewhere'`).toHaveLength(0)
      }))
  })

  describe("wakes", () => {
    it.effect("daily-digest's install schedules its daily 08:00 UTC wake for the function", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const installed = yield* call("POST", "/v1/templates/daily-digest/install", {
          token: org.token,
          body: { secrets: { DIGEST_TO: "me@example.com" }, route: { pattern: org.inbox } }
        })
        expect(installed.status, installed.text).toBe(201)
        const { function: fn, wakes } = installed.body.data
        expect(wakes).toEqual([expect.objectContaining({
          function_id: fn.id,
          command: { type: "digest", payload: null },
          schedule: { cron: "0 8 * * *" },
          status: "scheduled"
        })])
        expect(wakes[0].next_run_at).toMatch(/T08:00:00\.000Z$/)
        const listed = yield* call("GET", `/v1/wakes?function_id=${fn.id}`, { token: org.token })
        expect(listed.body.data.map((w: { id: string }) => w.id)).toEqual([wakes[0].id])
        const plain = yield* call("POST", "/v1/templates/remember-senders/install", { token: org.token, body: { name: "plain" } })
        expect(plain.body.data.wakes).toEqual([])
      }))
  })

  describe("sending mail", () => {
    it.effect("auto-reply answers through env.MAILROOM: the reply reaches the relay, threaded, once per sender", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const relay = yield* Relay
        const installed = yield* call("POST", "/v1/templates/auto-reply/install", {
          token: org.token,
          body: { route: { pattern: org.inbox }, secrets: { REPLY_TEXT: "Got it, thanks." } }
        })
        expect(installed.status, installed.text).toBe(201)
        const sender = `asker-${Math.random().toString(36).slice(2, 8)}@example.com`
        yield* sendMail(org.inbox, `Asker <${sender}>`, "Opening hours?", "<ask-1@example.com>")
        const m = yield* until("the auto-reply at the relay", Effect.sync(() => relay.messages.find((x) => x.to.includes(sender))))
        // The envelope sender is the message's VERP return path; the From header names the sender.
        expect(m.from).toMatch(/^bounces\+[0-9a-f]{48}@/)
        expect(m.raw.toString("latin1").split("\r\n\r\n")[0]).toMatch(new RegExp(`^From: (.*<)?${org.inbox.replace(/[.+]/g, "\\$&")}>?\r?$`, "mi"))
        const parsed = yield* Effect.promise(() => simpleParser(m.raw))
        expect(parsed.subject).toBe("Re: Opening hours?")
        expect(parsed.inReplyTo).toBe("<ask-1@example.com>")
        expect(parsed.references).toBe("<ask-1@example.com>")
        expect(parsed.text?.trim()).toBe("Got it, thanks.")
        // An automation's reply says so (RFC 3834).
        expect(parsed.headers.get("auto-submitted")).toBe("auto-replied")
        const sent = yield* call("GET", `/v1/sent-emails?to=${encodeURIComponent(sender)}`, { token: org.token })
        expect(sent.body.data).toHaveLength(1)
        expect(sent.body.data[0]).toMatchObject({ status: "sent", in_reply_to: "<ask-1@example.com>" })
        // A second message from the same sender the same day is not answered again.
        yield* sendMail(org.inbox, sender, "And on Sundays?", "<ask-2@example.com>")
        yield* until("the second message's delivery", Effect.map(call("GET", `/v1/webhooks/deliveries?status=delivered`, { token: org.token }), (r) =>
          r.body.data.length >= 2 ? true : undefined))
        expect(relay.messages.filter((x) => x.to.includes(sender))).toHaveLength(1)
      }))

    it.effect("daily-digest: its wake mails the digest of the mail collected since the last one", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const relay = yield* Relay
        const digestTo = `digest-${Math.random().toString(36).slice(2, 8)}@example.com`
        const installed = yield* call("POST", "/v1/templates/daily-digest/install", {
          token: org.token,
          body: { secrets: { DIGEST_TO: digestTo }, route: { pattern: org.inbox } }
        })
        expect(installed.status, installed.text).toBe(201)
        yield* sendMail(org.inbox, "news@example.org", "Release notes")
        yield* sendMail(org.inbox, "ops@example.org", "Disk almost full")
        yield* until("both collected", Effect.map(call("GET", `/v1/webhooks/deliveries?status=delivered`, { token: org.token }), (r) =>
          r.body.data.length >= 2 ? true : undefined))
        const run = yield* call("POST", `/v1/wakes/${installed.body.data.wakes[0].id}/run`, { token: org.token })
        expect(run.status, run.text).toBe(200)
        const m = yield* until("the digest at the relay", Effect.sync(() => relay.messages.find((x) => x.to.includes(digestTo))))
        // The envelope sender is the message's VERP return path; the From header names the sender.
        expect(m.from).toMatch(/^bounces\+[0-9a-f]{48}@/)
        expect(m.raw.toString("latin1").split("\r\n\r\n")[0]).toMatch(new RegExp(`^From: (.*<)?${org.inbox.replace(/[.+]/g, "\\$&")}>?\r?$`, "mi"))
        const parsed = yield* Effect.promise(() => simpleParser(m.raw))
        expect(parsed.subject).toBe("Digest: 2 new messages")
        expect(parsed.headers.get("auto-submitted")).toBe("auto-generated")
        expect(parsed.text).toContain("Release notes")
        expect(parsed.text).toContain("Disk almost full")
      }))
  })

  describe("driven by mail", () => {
    it.effect("remember-senders counts each sender's mail in its memory", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const installed = yield* call("POST", "/v1/templates/remember-senders/install", { token: org.token, body: {} })
        expect(installed.status, installed.text).toBe(201)
        const fnId = installed.body.data.function.id
        yield* sendMail(org.inbox, "Ann <Ann@Example.com>", "first")
        yield* sendMail(org.inbox, "bob@example.org", "hello")
        yield* sendMail(org.inbox, "ann@example.com", "second")
        const key = (address: string) => `/v1/functions/${fnId}/memories/${encodeURIComponent(`sender:${address}`)}`
        const ann = yield* until("ann's second message", Effect.map(call("GET", key("ann@example.com"), { token: org.token }), (r) =>
          r.status === 200 && r.body.data.value.count === 2 ? r.body.data.value : undefined))
        expect(ann).toMatchObject({ count: 2, last_subject: "second" })
        const bob = yield* call("GET", key("bob@example.org"), { token: org.token })
        expect(bob.body.data.value).toMatchObject({ count: 1, last_subject: "hello" })
        // The function writes its memory before it returns, so its delivery is marked a moment later.
        const statuses = yield* until("the three deliveries to settle", Effect.map(call("GET", "/v1/webhooks/deliveries", { token: org.token }), (r) => {
          const all = (r.body.data as Array<{ status: string }>).map((d) => d.status)
          return all.length === 3 && all.every((s) => s !== "pending") ? all : undefined
        }))
        expect(statuses.every((s) => s === "delivered")).toBe(true)
      }))

    it.scoped("forward-to-webhook re-posts the event with a signature the receiver verifies; a failing target is retried", () =>
      Effect.gen(function*() {
        const hooks = yield* startHooks
        const org = yield* newOrg()
        const secret = (yield* call("GET", "/v1/account/webhook-secret", { token: org.token })).body.data.secret as string
        const installed = yield* call("POST", "/v1/templates/forward-to-webhook/install", {
          token: org.token,
          body: { secrets: { TARGET_URL: hooks.url("/forwarded"), TARGET_AUTHORIZATION: "Bearer target-token" } }
        })
        expect(installed.status, installed.text).toBe(201)
        yield* sendMail(org.inbox, "carol@example.com", "please forward")
        const [hit] = yield* eventually(() => (hooks.on("/forwarded").length > 0 ? hooks.on("/forwarded") : undefined))
        expect(verifySignature(hit!.headers["mailroom-signature"] as string, hit!.body, secret)).toBe(true)
        expect(hit!.headers["authorization"]).toBe("Bearer target-token")
        expect(hit!.headers["mailroom-event-type"]).toBe("email.received")
        expect(JSON.parse(hit!.body)).toMatchObject({ event: "email.received", email: { subject: "please forward" } })

        // The target fails: the function answers 502, and the delivery is retried on the schedule.
        const patched = yield* call("PATCH", `/v1/functions/${installed.body.data.function.id}`, {
          token: org.token,
          body: { secrets: { TARGET_URL: hooks.url("/fail") } }
        })
        expect(patched.status).toBe(200)
        yield* sendMail(org.inbox, "carol@example.com", "target down")
        const failed = yield* until("the failed delivery", Effect.map(
          call("GET", "/v1/webhooks/deliveries?status=failed", { token: org.token }),
          (list) => list.body.data[0]
        ))
        expect(failed).toMatchObject({ attempt_count: 3, last_error_code: "http_502" })
        expect(hooks.on("/fail")).toHaveLength(3)
      }))
  })
})
