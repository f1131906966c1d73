/**
 * The loop guard over real SMTP, HTTP and workerd: a function that answers every mail of its own
 * inbox, its replies delivered straight back to it (local delivery: a mail loop), stops at
 * 5 automated replies in a row (429 `loop_detected`, a `send.loop_detected` event) instead of running
 * until the hourly send quota; what automations send carries `Auto-Submitted`, received automatic
 * mail is marked `auto_submitted`; at most 10 automated sends per thread and hour; a person's
 * credential is never limited by the rule.
 */
import { describe, expect, layer } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import { simpleParser } from "mailparser"
import nodemailer, { type SendMailOptions } from "nodemailer"
import { Provisioning } from "../src/identity/Provisioning.js"
import { TestServer, testService } from "./support/harness.js"
import { type Hooks, startHooks } from "./support/hooks.js"
import { call } from "./support/http.js"
import { startTestRelay, type TestRelay } from "./support/relay.js"

class Relay extends Context.Tag("test/Relay")<Relay, TestRelay>() {}
class Receiver extends Context.Tag("test/Receiver")<Receiver, Hooks>() {}

const Env = Provisioning.Default.pipe(
  Layer.provideMerge(Layer.unwrapScoped(Effect.gen(function*() {
    const relay = yield* startTestRelay
    const hooks = yield* startHooks
    return testService({
      FUNCTION_TIMEOUT: "10s",
      DELIVERY_RETRY_DELAYS: "300ms,600ms",
      DNS_SERVER: "127.0.0.1:9",
      OUTBOUND_SMTP_URL: relay.url
    }).pipe(Layer.merge(Layer.succeed(Relay, relay)), Layer.merge(Layer.succeed(Receiver, hooks)))
  })))
)

const newOrg = () =>
  Effect.gen(function*() {
    const p = yield* Provisioning
    const org = yield* p.createOrganization({ name: "Loop", plan: "developer" })
    const key = yield* p.issueApiKey(org.id)
    return { orgId: org.id, token: key.apiKey, inbox: org.managedInboxAddress! }
  })

const smtp = (message: SendMailOptions) =>
  Effect.flatMap(TestServer, (server) =>
    Effect.promise(async () => {
      const transport = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
      try {
        return await transport.sendMail(message)
      } finally {
        transport.close()
      }
    }))

/** Polls until `probe` gives a value (at most 30 s). */
const until = <A, E, R>(what: string, probe: Effect.Effect<A | undefined, E, R>) =>
  Effect.gen(function*() {
    for (let i = 0; i < 300; i++) {
      const value = yield* probe
      if (value !== undefined) return value
      yield* Effect.sleep("100 millis")
    }
    return yield* Effect.dieMessage(`timed out waiting for ${what}`)
  })

const deploy = (token: string, code: string) =>
  Effect.gen(function*() {
    const r = yield* call("POST", "/v1/functions", { token, body: { name: `loop-${Math.random().toString(36).slice(2, 8)}`, code } })
    expect(r.status, r.text).toBe(201)
    return r.body.data.id as string
  })

/** A careless automaton: answers every mail it gets, its own replies included. */
const REPLIER = `export default { async fetch(request, env) {
  const event = await request.json();
  const r = await env.MAILROOM.fetch("/v1/emails/" + event.email.id + "/reply", {
    method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ text: "got it" })
  });
  console.log("reply", r.status, await r.text());
  return new Response("done");
} }`

layer(Env, { timeout: 120_000, excludeTestServices: true })("loop guard", (it) => {
  describe("a function answering its own mail", () => {
    it.effect("stops after 5 automatic replies in a row: 429 loop_detected, send.loop_detected, Auto-Submitted both ways", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const relay = yield* Relay
        const hooks = yield* Receiver
        // The organization-wide endpoint receives the organization's other events.
        const endpoint = yield* call("POST", "/v1/endpoints", { token: org.token, body: { url: hooks.url(`/ok/${org.orgId}`) } })
        expect(endpoint.status, endpoint.text).toBe(201)
        const fn = yield* deploy(org.token, REPLIER)
        const route = yield* call("POST", "/v1/routes", { token: org.token, body: { pattern: org.inbox, function_id: fn } })
        expect(route.status, route.text).toBe(201)
        // Mail to the organization's own inbox is delivered locally: the loop needs no relay.
        const before = relay.messages.length
        yield* smtp({ from: org.inbox, to: org.inbox, subject: "ping", text: "start", messageId: `<loop-${org.orgId}@example.com>` })

        const hit = yield* until("send.loop_detected", Effect.sync(() =>
          hooks.on(`/ok/${org.orgId}`).map((h) => JSON.parse(h.body)).find((b) => b.event === "send.loop_detected")))
        expect(relay.messages.length).toBe(before)
        const received = yield* until("the 5 replies stored", Effect.map(call("GET", "/v1/emails?limit=100", { token: org.token }), (r) =>
          r.body.data.length >= 6 ? r.body.data as Array<{ id: string; auto_submitted: boolean }> : undefined))
        const mine = received.filter((e) => e.auto_submitted)
        expect(mine).toHaveLength(5)
        for (const m of mine) {
          const raw = yield* call("GET", `/v1/emails/${m.id}/raw`, { token: org.token })
          const parsed = yield* Effect.promise(() => simpleParser(Buffer.from(raw.text)))
          expect(parsed.headers.get("auto-submitted")).toBe("auto-replied")
        }
        expect(hit.loop).toMatchObject({
          rule: "counterpart_in_a_row",
          function_id: fn,
          limit: 5,
          window_seconds: null,
          retry_after: null,
          counterpart: org.inbox,
          to: [org.inbox]
        })

        // The refused reply was answered 429 loop_detected inside the function.
        const invocations = yield* call("GET", `/v1/functions/${fn}/invocations?limit=100`, { token: org.token })
        const refused = invocations.body.data.filter((i: { logs: string }) => i.logs.includes("reply 429"))
        expect(refused).toHaveLength(1)
        const answer = JSON.parse(/reply 429 (.*)/.exec(refused[0].logs)![1]!)
        expect(answer.error).toMatchObject({
          code: "loop_detected",
          details: { thread_id: hit.loop.thread_id, limit: 5, window_seconds: null, retry_after: null, counterpart: org.inbox }
        })

        // The person's first message is not automatic; every reply that came back is.
        const emails = yield* call("GET", "/v1/emails?limit=100", { token: org.token })
        const flags = emails.body.data.map((e: { auto_submitted: boolean }) => e.auto_submitted).reverse()
        expect(flags).toEqual([false, true, true, true, true, true])
        expect(new Set(emails.body.data.map((e: { thread_id: string }) => e.thread_id))).toEqual(new Set([hit.loop.thread_id]))
        const sent = yield* call("GET", "/v1/sent-emails?limit=100", { token: org.token })
        expect(sent.body.data).toHaveLength(5)

        // A person (an API key) still answers in the thread.
        const latest = emails.body.data[0].id
        const byPerson = yield* call("POST", `/v1/emails/${latest}/reply`, { token: org.token, body: { text: "I am a person" } })
        expect(byPerson.status, byPerson.text).toBe(201)
        const personMail = yield* until("the person's reply stored", Effect.map(call("GET", "/v1/emails?limit=100", { token: org.token }), (r) =>
          r.body.data.find((e: { message_id: string | null }) => e.message_id === byPerson.body.data.message_id) as { id: string } | undefined))
        const raw = yield* call("GET", `/v1/emails/${personMail.id}/raw`, { token: org.token })
        const parsed = yield* Effect.promise(() => simpleParser(Buffer.from(raw.text)))
        expect(parsed.headers.get("auto-submitted")).toBeUndefined()
      }))
  })

  describe("budgets", () => {
    it.effect("at most 10 automated sends per thread and hour (429 with retry_after); a person's credential is not limited", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const relay = yield* Relay
        yield* smtp({ from: "Asker <asker@example.com>", to: org.inbox, subject: "question", text: "q", messageId: `<q-${org.orgId}@example.com>` })
        const email = yield* until("the stored email", Effect.map(call("GET", "/v1/emails", { token: org.token }), (r) => r.body.data[0]))
        expect(email.auto_submitted).toBe(false)
        const fn = yield* deploy(org.token, `export default { async fetch(request, env) {
          const { email_id, targets } = await request.json();
          const out = [];
          for (const to of targets) {
            const r = await env.MAILROOM.fetch("/v1/emails/" + email_id + "/forward", {
              method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ to })
            });
            const body = await r.json();
            out.push({ status: r.status, retry_after: r.headers.get("retry-after"), body: r.ok ? null : body });
          }
          return Response.json(out);
        } }`)
        const targets = Array.from({ length: 11 }, (_, i) => `reader-${i}@example.net`)
        const before = relay.messages.length
        const run = yield* call("POST", `/v1/functions/${fn}/invoke`, { token: org.token, body: { event: { email_id: email.id, targets } } })
        expect(run.status, run.text).toBe(200)
        type Refusal = { error: { code: string; details: { thread_id: string; rule: string; limit: number; window_seconds: number; retry_after: number } } }
        const out = JSON.parse(run.body.data.response_body) as Array<{ status: number; retry_after: string | null; body: Refusal | null }>
        expect(out.map((o) => o.status)).toEqual([...Array(10).fill(201), 429])
        const last = out[10]!
        expect(last.body?.error.code).toBe("loop_detected")
        expect(last.body?.error.details).toMatchObject({ thread_id: email.thread_id, rule: "thread_hourly", limit: 10, window_seconds: 3600 })
        expect(last.body?.error.details.retry_after).toBeGreaterThan(3000)
        expect(Number(last.retry_after)).toBe(last.body?.error.details.retry_after)
        const forwarded = relay.messages.slice(before)
        expect(forwarded).toHaveLength(10)
        const parsed = yield* Effect.promise(() => simpleParser(forwarded[0]!.raw))
        expect(parsed.headers.get("auto-submitted")).toBe("auto-generated")
        // The same forward with the organization's API key: a person's send, never limited by the rule.
        const byPerson = yield* call("POST", `/v1/emails/${email.id}/forward`, { token: org.token, body: { to: "reader-11@example.net" } })
        expect(byPerson.status, byPerson.text).toBe(201)
        expect(byPerson.body.data.thread_id).toBe(email.thread_id)
      }))
  })

  describe("received automatic mail", () => {
    it.effect("Auto-Submitted other than no, or Precedence bulk/junk/list, is auto_submitted in the API and the payload", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const hooks = yield* Receiver
        const endpoint = yield* call("POST", "/v1/endpoints", { token: org.token, body: { url: hooks.url(`/ok/${org.orgId}`) } })
        expect(endpoint.status, endpoint.text).toBe(201)
        const cases: Array<[string, Record<string, string>, boolean]> = [
          ["plain", {}, false],
          ["said no", { "Auto-Submitted": "no" }, false],
          ["auto-replied", { "Auto-Submitted": "auto-replied; owner-email=x@example.com" }, true],
          ["auto-generated", { "Auto-Submitted": "Auto-Generated" }, true],
          ["bulk", { Precedence: "bulk" }, true],
          ["list", { Precedence: "list" }, true],
          ["first-class", { Precedence: "first-class" }, false]
        ]
        for (const [subject, headers] of cases) {
          yield* smtp({ from: "sender@example.com", to: org.inbox, subject, text: "x", headers })
        }
        const payloads = yield* until("every payload", Effect.sync(() => {
          const got = hooks.on(`/ok/${org.orgId}`).map((h) => JSON.parse(h.body)).filter((b) => b.event === "email.received")
          return got.length >= cases.length ? got : undefined
        }))
        const emails = yield* call("GET", "/v1/emails?limit=100", { token: org.token })
        for (const [subject, , expected] of cases) {
          expect(payloads.find((p) => p.email.subject === subject)?.email.auto_submitted, subject).toBe(expected)
          const listed = emails.body.data.find((e: { subject: string }) => e.subject === subject)
          expect(listed.auto_submitted, subject).toBe(expected)
          const one = yield* call("GET", `/v1/emails/${listed.id}`, { token: org.token })
          expect(one.body.data.auto_submitted, subject).toBe(expected)
        }
      }))
  })
})
