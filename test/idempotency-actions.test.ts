/**
 * Derived idempotency keys are for POSTs that create something (their operation answers 201):
 * every action (a POST answering 200) called twice in a row without a key runs twice, over HTTP and
 * from the CLI. A create still collapses an accidental double submit.
 */
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import nodemailer from "nodemailer"
import { MailroomApi } from "../src/Api.js"
import { Provisioning } from "../src/identity/Provisioning.js"
import { creatingOperations } from "../src/platform/Idempotency.js"
import { runCli } from "./support/cli.js"
import { TestServer } from "./support/harness.js"
import { eventually, startHooks } from "./support/hooks.js"
import { call, type Reply } from "./support/http.js"
import { codeOf } from "./support/smtpSink.js"
import { identityService, mailCount, nextMail, resetLimits, signUp, uniqueEmail } from "./support/identity.js"

const Env = Provisioning.Default.pipe(
  Layer.provideMerge(identityService({ LOG_LEVEL: "warning", DNS_SERVER: "127.0.0.1:9", DELIVERY_RETRY_DELAYS: "300ms" }))
)

/** Neither a replay nor a derived key: the request ran as a request of its own. */
const ranAgain = (r: Reply) => {
  expect(r.headers.get("idempotent-replayed")).toBeNull()
  expect(r.headers.get("idempotency-key")).toBeNull()
}

const newOrg = Effect.gen(function*() {
  const p = yield* Provisioning
  const org = yield* p.createOrganization({ name: "Actions", plan: "developer" })
  const { apiKey } = yield* p.issueApiKey(org.id)
  return { orgId: org.id, apiKey, address: org.managedInboxAddress }
})

const sendMail = (to: string, subject: string) =>
  Effect.flatMap(TestServer, (server) =>
    Effect.promise(async () => {
      const transport = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
      try {
        return await transport.sendMail({ from: "a@example.com", to, subject, text: "x" })
      } finally {
        transport.close()
      }
    }))

layer(Env, { timeout: 300_000, excludeTestServices: true })("idempotency of actions", (it) => {
  describe("which operations get a derived key", () => {
    it("exactly the POSTs declared to answer 201", () => {
      const creates = creatingOperations(MailroomApi)
      for (const path of ["/v1/filters", "/v1/endpoints", "/v1/routes", "/v1/domains", "/v1/listen/sessions", "/v1/cli/login/start"]) {
        expect(creates("POST", path), path).toBe(true)
      }
      for (
        const path of [
          "/v1/webhooks/deliveries/0b7c/replay",
          "/v1/endpoints/0b7c/test",
          "/v1/functions/0b7c/invoke",
          "/v1/domains/0b7c/verify",
          "/v1/account/webhook-secret/rotate",
          "/v1/cli/login/poll",
          "/v1/cli/signup/resend",
          "/v1/cli/signup/verify",
          "/v1/cli/token/refresh",
          "/v1/cli/logout",
          "/v1/agent/accounts",
          "/v1/filters/extra"
        ]
      ) {
        expect(creates("POST", path), path).toBe(false)
      }
      expect(creates("GET", "/v1/filters")).toBe(false)
    })
  })

  describe("actions twice in a row without a key run twice", () => {
    it.scoped("delivery replay: two deliveries, the receiver gets both; the CLI prints Delivered twice and both reach it", () =>
      Effect.gen(function*() {
        const hooks = yield* startHooks
        const org = yield* newOrg
        const endpoint = yield* call("POST", "/v1/endpoints", { token: org.apiKey, body: { url: hooks.url("/r") } })
        expect(endpoint.status).toBe(201)
        yield* sendMail(org.address, "replay twice")
        yield* eventually(() => hooks.on("/r")[0], 20_000, "the first delivery")
        const list = yield* call("GET", "/v1/webhooks/deliveries", { token: org.apiKey })
        const id: string = list.body.data[0].id

        const one = yield* call("POST", `/v1/webhooks/deliveries/${id}/replay`, { token: org.apiKey })
        const two = yield* call("POST", `/v1/webhooks/deliveries/${id}/replay`, { token: org.apiKey })
        expect(one.status).toBe(200)
        expect(two.status).toBe(200)
        ranAgain(one)
        ranAgain(two)
        expect(two.body.data.delivery_id).not.toBe(one.body.data.delivery_id)
        expect(two.body.data.delivered).toBe(1)
        expect(hooks.on("/r").length).toBe(3)

        // The same from the CLI: each run sends, each prints its own delivery.
        const server = yield* TestServer
        const env = {
          baseUrl: server.baseUrl,
          configHome: mkdtempSync(join(tmpdir(), "mailroom-cli-")),
          extra: { MAILROOM_API_KEY: org.apiKey }
        }
        const a = yield* Effect.promise(() => runCli(["deliveries", "replay", id], env))
        const b = yield* Effect.promise(() => runCli(["deliveries", "replay", id], env))
        expect(a.code, a.stderr).toBe(0)
        expect(b.code, b.stderr).toBe(0)
        const idOf = (out: string) => /Delivered: replay recorded as delivery (\S+)/.exec(out)?.[1]
        expect(idOf(a.stdout + a.stderr)).toBeDefined()
        expect(idOf(b.stdout + b.stderr)).toBeDefined()
        expect(idOf(b.stdout + b.stderr)).not.toBe(idOf(a.stdout + a.stderr))
        expect(hooks.on("/r").length).toBe(5)
      }), 480_000)

    it.scoped("endpoint test: two synthetic events reach the receiver", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const hooks = yield* startHooks
        const org = yield* newOrg
        const endpoint = yield* call("POST", "/v1/endpoints", { token: org.apiKey, body: { url: hooks.url("/t") } })
        const one = yield* call("POST", `/v1/endpoints/${endpoint.body.data.id}/test`, { token: org.apiKey })
        const two = yield* call("POST", `/v1/endpoints/${endpoint.body.data.id}/test`, { token: org.apiKey })
        expect(one.status).toBe(200)
        expect(two.status).toBe(200)
        ranAgain(one)
        ranAgain(two)
        expect(hooks.on("/t").length).toBe(2)
      }))

    it.effect("function invoke: the function runs twice (two invocations, two counter increments)", () =>
      Effect.gen(function*() {
        const org = yield* newOrg
        const fn = yield* call("POST", "/v1/functions", {
          token: org.apiKey,
          body: {
            name: "counter",
            code: `export default { async fetch(req, env) {
              const n = Number(await env.MEMORY.get("n") ?? "0") + 1;
              await env.MEMORY.put("n", String(n));
              return new Response(String(n));
            } }`
          }
        })
        expect(fn.status, fn.text).toBe(201)
        const path = `/v1/functions/${fn.body.data.id}/invoke`
        const one = yield* call("POST", path, { token: org.apiKey, body: {} })
        const two = yield* call("POST", path, { token: org.apiKey, body: {} })
        ranAgain(one)
        ranAgain(two)
        expect([one.body.data.response_body, two.body.data.response_body]).toEqual(["1", "2"])
        const invocations = yield* call("GET", `/v1/functions/${fn.body.data.id}/invocations`, { token: org.apiKey })
        expect(invocations.body.meta.total).toBe(2)
      }))

    it.effect("webhook secret rotation: the second is refused by its own limiter, not replayed", () =>
      Effect.gen(function*() {
        const org = yield* newOrg
        const one = yield* call("POST", "/v1/account/webhook-secret/rotate", { token: org.apiKey })
        const two = yield* call("POST", "/v1/account/webhook-secret/rotate", { token: org.apiKey })
        expect(one.status).toBe(200)
        ranAgain(two)
        expect(two.status).toBe(429)
        expect(two.body.error.code).toBe("rate_limit_exceeded")
      }))

    it.effect("domain verification: both run", () =>
      Effect.gen(function*() {
        const org = yield* newOrg
        const domain = yield* call("POST", "/v1/domains", { token: org.apiKey, body: { domain: `twice-${Date.now()}.example.com` } })
        expect(domain.status).toBe(201)
        const one = yield* call("POST", `/v1/domains/${domain.body.data.id}/verify`, { token: org.apiKey })
        const two = yield* call("POST", `/v1/domains/${domain.body.data.id}/verify`, { token: org.apiKey })
        ranAgain(one)
        ranAgain(two)
        expect(two.status).toBe(one.status)
      }))

    it.effect("device login poll: the second poll is slow_down, which only a poll that ran can say", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const start = yield* call("POST", "/v1/cli/login/start")
        expect(start.status).toBe(201)
        const body = { device_code: start.body.data.device_code }
        const one = yield* call("POST", "/v1/cli/login/poll", { body })
        const two = yield* call("POST", "/v1/cli/login/poll", { body })
        ranAgain(one)
        ranAgain(two)
        expect(one.body.error.code).toBe("authorization_pending")
        expect(two.body.error.code).toBe("slow_down")
      }))

    it.effect("sign-up resend: the second is refused by resend_after, not replayed", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const email = uniqueEmail("resend-twice")
        const seen = yield* mailCount(email)
        const start = yield* call("POST", "/v1/cli/signup/start", { body: { email, terms_accepted: true } })
        expect(start.status).toBe(201)
        codeOf(yield* nextMail(email, seen))
        const body = { signup_token: start.body.data.signup_token }
        const one = yield* call("POST", "/v1/cli/signup/resend", { body })
        const two = yield* call("POST", "/v1/cli/signup/resend", { body })
        ranAgain(one)
        ranAgain(two)
        expect(two.status).toBe(429)
      }))

    it.effect("token refresh: the second use of a rotated refresh token is invalid_grant; logout twice: the second is 401", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const set = yield* signUp("cli", uniqueEmail("refresh-twice"))
        const body = { refresh_token: set.refresh_token }
        const one = yield* call("POST", "/v1/cli/token/refresh", { body })
        const two = yield* call("POST", "/v1/cli/token/refresh", { body })
        expect(one.status).toBe(200)
        ranAgain(one)
        ranAgain(two)
        expect(two.status).toBe(400)
        expect(two.body.error.code).toBe("invalid_grant")

        // (Reusing a rotated refresh token revokes its grant: log out with another one.)
        const token: string = (yield* signUp("cli", uniqueEmail("logout-twice"))).access_token
        const out = yield* call("POST", "/v1/cli/logout", { token })
        const again = yield* call("POST", "/v1/cli/logout", { token })
        expect(out.status).toBe(200)
        ranAgain(out)
        ranAgain(again)
        expect(again.status).toBe(401)
        expect(again.body.error.code).toBe("unauthorized")
      }))
  })

  describe("creates still collapse a double submit", () => {
    it.effect("the same filter twice within 60 s: one filter, the second answer replayed", () =>
      Effect.gen(function*() {
        const org = yield* newOrg
        const body = { type: "blocklist", pattern: `twice-${Date.now()}@example.com` }
        const one = yield* call("POST", "/v1/filters", { token: org.apiKey, body })
        const two = yield* call("POST", "/v1/filters", { token: org.apiKey, body })
        expect(one.status).toBe(201)
        expect(two.status).toBe(201)
        expect(two.headers.get("idempotent-replayed")).toBe("true")
        expect(two.body.data.id).toBe(one.body.data.id)
      }))
  })
})
