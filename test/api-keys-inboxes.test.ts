/**
 * API keys limited to inboxes, from outside: `inbox_ids` must name inboxes of the organization
 * (400), and such a key sees only its inboxes' mail (emails, threads, sent mail, search, downloads,
 * inboxes; other mail is 404 on REST and over MCP) and sends only as its inboxes (403), its first
 * inbox being its default sender. Mail arrives over real SMTP and leaves through a real relay.
 */
import { describe, expect, layer } from "@effect/vitest"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { Context, Effect, Layer } from "effect"
import nodemailer from "nodemailer"
import { Provisioning } from "../src/identity/Provisioning.js"
import { TestServer } from "./support/harness.js"
import { testServiceWithDns } from "./support/dns.js"
import { call, expectError } from "./support/http.js"
import { startTestRelay, type TestRelay } from "./support/relay.js"

class Relay extends Context.Tag("test/KeyInboxesRelay")<Relay, TestRelay>() {}

const Env = Provisioning.Default.pipe(
  Layer.provideMerge(Layer.unwrapScoped(Effect.map(startTestRelay, (relay) =>
    testServiceWithDns({ OUTBOUND_SMTP_URL: relay.url, OUTBOUND_TIMEOUT: "2s" }).pipe(Layer.merge(Layer.succeed(Relay, relay))))))
)
const MANAGED = "agents.localhost"

/** Letters only: one search term. */
const word = (prefix: string) => `${prefix}${Math.random().toString(36).slice(2, 10).replace(/[0-9]/g, "q")}`

const newOrg = Effect.gen(function*() {
  const p = yield* Provisioning
  const org = yield* p.createOrganization({ name: "Key inboxes", plan: "developer" })
  const key = yield* p.issueApiKey(org.id)
  return { orgId: org.id, token: key.apiKey, address: org.managedInboxAddress! }
})

type Inbox = { id: string; address: string; username: string }

const newInbox = (token: string, prefix: string) =>
  Effect.map(call("POST", "/v1/inboxes", { token, body: { username: word(prefix) } }), (r) => {
    expect(r.status).toBe(201)
    return r.body.data as Inbox
  })

const mailIn = (to: string, subject: string) =>
  Effect.flatMap(TestServer, (server) =>
    Effect.promise(async () => {
      const t = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
      try {
        await t.sendMail({ from: "writer@example.com", to, subject, text: `about ${subject}` })
      } finally {
        t.close()
      }
    }))

const createKey = (token: string, body: unknown) => call("POST", "/v1/api-keys", { token, body })

/** An organization with inboxes A and B, mail to A, B and the default inbox, and a key limited to A. */
const setup = Effect.gen(function*() {
  const org = yield* newOrg
  const a = yield* newInbox(org.token, "alpha")
  const b = yield* newInbox(org.token, "beta")
  const term = word("zq")
  yield* mailIn(`${a.username}+tag@${MANAGED}`, `${term} for alpha`)
  yield* mailIn(b.address, `${term} for beta`)
  yield* mailIn(org.address, `${term} for default`)
  const all = (yield* call("GET", "/v1/emails", { token: org.token })).body.data as Array<{ id: string; inbox_id: string; subject: string }>
  expect(all).toHaveLength(3)
  const created = yield* createKey(org.token, { name: "alpha agent", scopes: ["emails:read", "emails:send", "search"], inbox_ids: [a.id] })
  expect(created.status).toBe(201)
  expect(created.body.data.inbox_ids).toEqual([a.id])
  return {
    org,
    a,
    b,
    term,
    key: created.body.data.api_key as string,
    mailA: all.find((e) => e.inbox_id === a.id)!,
    mailB: all.find((e) => e.inbox_id === b.id)!,
    mailDefault: all.find((e) => e.inbox_id !== a.id && e.inbox_id !== b.id)!
  }
})

layer(Env, { timeout: 180_000, excludeTestServices: true })("api keys limited to inboxes", (it) => {
  describe("creating", () => {
    it.effect("inbox_ids must be inboxes of the organization; a limited maker cannot widen the limit", () =>
      Effect.gen(function*() {
        const org = yield* newOrg
        const other = yield* newOrg
        const a = yield* newInbox(org.token, "alpha")
        const b = yield* newInbox(org.token, "beta")
        const theirs = yield* newInbox(other.token, "theirs")
        for (const ids of [[crypto.randomUUID()], [theirs.id], [a.id, theirs.id]]) {
          const r = yield* createKey(org.token, { name: "x", scopes: ["emails:read"], inbox_ids: ids })
          expectError(r, 400, "validation_error")
          expect(r.body.error.details.issues[0].field).toBe("inbox_ids")
          expect(r.body.error.message).toContain(ids[ids.length - 1])
        }
        const listed = (yield* call("GET", "/v1/api-keys", { token: org.token })).body.data
        expect(listed).toHaveLength(1)

        const both = yield* createKey(org.token, { name: "both", scopes: ["emails:read"], inbox_ids: [b.id, a.id, b.id] })
        expect(both.status).toBe(201)
        expect(both.body.data.inbox_ids).toEqual([b.id, a.id])

        // An admin key limited to A makes keys limited to A at most.
        const limitedAdmin = (yield* createKey(org.token, { name: "admin of alpha", scopes: ["admin"], inbox_ids: [a.id] })).body.data.api_key
        const wider = yield* createKey(limitedAdmin, { name: "wider", scopes: ["emails:read"], inbox_ids: [b.id] })
        expectError(wider, 403, "forbidden")
        expect(wider.body.error.details.outside).toEqual([b.id])
        const inherited = yield* createKey(limitedAdmin, { name: "inherits", scopes: ["emails:read"] })
        expect(inherited.status).toBe(201)
        expect(inherited.body.data.inbox_ids).toEqual([a.id])
      }))
  })

  describe("reading", () => {
    it.effect("a key limited to A lists and gets only A's mail, threads, search results and inbox", () =>
      Effect.gen(function*() {
        const { a, b, key, mailA, mailB, mailDefault, org, term } = yield* setup

        const emails = yield* call("GET", "/v1/emails", { token: key })
        expect(emails.status).toBe(200)
        expect(emails.body.data.map((e: { id: string }) => e.id)).toEqual([mailA.id])
        expect(emails.body.meta.total).toBe(1)
        expect((yield* call("GET", `/v1/emails?inbox_id=${b.id}`, { token: key })).body.data).toHaveLength(0)
        expect((yield* call("GET", `/v1/emails/${mailA.id}`, { token: key })).status).toBe(200)
        for (const other of [mailB, mailDefault]) {
          expectError(yield* call("GET", `/v1/emails/${other.id}`, { token: key }), 404, "not_found")
          expectError(yield* call("PATCH", `/v1/emails/${other.id}`, { token: key, body: { read: true } }), 404, "not_found")
          expectError(yield* call("GET", `/v1/emails/${other.id}/raw`, { token: key }), 404, "not_found")
        }
        expect((yield* call("GET", `/v1/emails/${mailA.id}/raw`, { token: key })).status).toBe(200)

        const threads = yield* call("GET", "/v1/threads", { token: key })
        expect(threads.status).toBe(200)
        expect(threads.body.data.map((t: { inbox_id: string }) => t.inbox_id)).toEqual([a.id])
        const threadB = (yield* call("GET", `/v1/threads?inbox_id=${b.id}`, { token: org.token })).body.data[0].id
        expectError(yield* call("GET", `/v1/threads/${threadB}`, { token: key }), 404, "not_found")
        expect((yield* call("GET", `/v1/threads/${threads.body.data[0].id}`, { token: key })).status).toBe(200)

        const everything = yield* call("GET", `/v1/search?q=${term}&mode=lexical`, { token: org.token })
        expect(everything.body.data.results).toHaveLength(3)
        const found = yield* call("GET", `/v1/search?q=${term}&mode=lexical`, { token: key })
        expect(found.status).toBe(200)
        expect(found.body.data.results.map((r: { inbox_id: string }) => r.inbox_id)).toEqual([a.id])

        const inboxes = yield* call("GET", "/v1/inboxes", { token: key })
        expect(inboxes.body.data.map((i: { id: string }) => i.id)).toEqual([a.id])
        expect(inboxes.body.meta.total).toBe(1)
        expectError(yield* call("GET", `/v1/inboxes/${b.id}`, { token: key }), 404, "not_found")
        expect((yield* call("GET", "/v1/inboxes", { token: org.token })).body.meta.total).toBe(3)
        // Waiting for mail sees A's only; the whole organization's event stream and listen sessions are refused.
        const since = new Date(Date.now() - 3_600_000).toISOString()
        const waited = yield* call("GET", `/v1/emails/wait?after=${since}&timeout_seconds=0`, { token: key })
        expect(waited.status).toBe(200)
        expect(waited.body.data.id).toBe(mailA.id)
        const notB = yield* call("GET", `/v1/emails/wait?after=${since}&timeout_seconds=0&recipient=${b.address}`, { token: key })
        expect(notB.body.data).toBeNull()
        const stream = yield* call("GET", "/v1/events", { token: key, headers: { accept: "text/event-stream" } })
        expectError(stream, 403, "forbidden")
        expect(stream.body.error.details.inbox_ids).toEqual([a.id])
        expectError(yield* call("POST", "/v1/listen/sessions", { token: key, body: {} }), 403, "forbidden")
        const session = (yield* call("POST", "/v1/listen/sessions", { token: org.token, body: {} })).body.data.id
        expectError(yield* call("GET", `/v1/listen/sessions/${session}/events?wait=0`, { token: key }), 403, "forbidden")

        // The organization's own key is not limited.
        expect((yield* call("GET", `/v1/emails/${mailB.id}`, { token: org.token })).status).toBe(200)
      }))

    it.effect("over MCP the same limit holds: B's mail is not_found, lists show A's", () =>
      Effect.gen(function*() {
        const server = yield* TestServer
        const { a, key, mailA, mailB } = yield* setup
        const client = new Client({ name: "mailroom-test", version: "1.0.0" })
        yield* Effect.promise(() =>
          client.connect(new StreamableHTTPClientTransport(new URL(`${server.baseUrl}/mcp`), { requestInit: { headers: { authorization: `Bearer ${key}` } } }))
        )
        type Result = { isError?: boolean; content: Array<{ text?: string }> }
        const tool = (name: string, args: Record<string, unknown>) =>
          Effect.map(Effect.promise(() => client.callTool({ name, arguments: args })), (r) => {
            const result = r as Result
            return { isError: result.isError === true, body: JSON.parse(result.content[0]!.text!) }
          })
        const got = yield* tool("get_email", { id: mailB.id })
        expect(got.isError).toBe(true)
        expect(got.body.error.code).toBe("not_found")
        const listed = yield* tool("list_emails", {})
        expect(listed.isError).toBe(false)
        expect(listed.body.data.map((e: { id: string }) => e.id)).toEqual([mailA.id])
        const inboxes = yield* tool("list_inboxes", {})
        expect(inboxes.body.data.map((i: { id: string }) => i.id)).toEqual([a.id])
        const sent = yield* tool("reply_to_email", { id: mailB.id, text: "no" })
        expect(sent.isError).toBe(true)
        expect(sent.body.error.code).toBe("not_found")
        yield* Effect.promise(() => client.close())
      }))
  })

  describe("sending", () => {
    it.effect("a key limited to A sends only as A (its default sender), and sees only A's sent mail", () =>
      Effect.gen(function*() {
        const relay = yield* Relay
        const { a, b, key, mailA, mailB, org } = yield* setup
        const to = `${word("rcpt")}@example.com`
        const fromOrg = yield* call("POST", "/v1/send-mail", { token: org.token, body: { from: org.address, to, subject: "org", text: "hi" } })
        expect(fromOrg.status).toBe(201)

        for (const from of [b.address, org.address, `Alpha <${b.username}+x@${MANAGED}>`]) {
          const refused = yield* call("POST", "/v1/send-mail", { token: key, body: { from, to, subject: "no", text: "hi" } })
          expectError(refused, 403, "forbidden")
          expect(refused.body.error.message).toContain("not an inbox this API key may send as")
          expect(refused.body.error.details.valid_senders).toEqual([a.address])
          expect(refused.body.error.details.inbox_ids).toEqual([a.id])
        }
        const defaulted = yield* call("POST", "/v1/send-mail", { token: key, body: { to, subject: "default", text: "hi" } })
        expect(defaulted.status).toBe(201)
        expect(defaulted.body.data.inbox_id).toBe(a.id)
        expect(defaulted.body.data.from).toContain(a.address)
        expect(relay.messages.some((m) => m.to.includes(to) && /^From: .*$/m.exec(m.raw.toString())?.[0].includes(a.address))).toBe(true)
        const tagged = yield* call("POST", "/v1/send-mail", { token: key, body: { from: `${a.username}+news@${MANAGED}`, to, subject: "tag", text: "hi" } })
        expect(tagged.status).toBe(201)
        expect(tagged.body.data.inbox_id).toBe(a.id)

        const batch = yield* call("POST", "/v1/send-mail/batch", {
          token: key,
          body: { messages: [{ to, subject: "b0", text: "hi" }, { from: b.address, to, subject: "b1", text: "hi" }] }
        })
        expect(batch.status).toBe(200)
        expect(batch.body.data.results[0].email.inbox_id).toBe(a.id)
        expect(batch.body.data.results[1].error.code).toBe("forbidden")

        const reply = yield* call("POST", `/v1/emails/${mailA.id}/reply`, { token: key, body: { text: "answer" } })
        expect(reply.status).toBe(201)
        expect(reply.body.data.inbox_id).toBe(a.id)
        expectError(yield* call("POST", `/v1/emails/${mailB.id}/reply`, { token: key, body: { text: "no" } }), 404, "not_found")
        expectError(
          yield* call("POST", `/v1/emails/${mailB.id}/forward`, { token: key, body: { to, from: a.address } }),
          404,
          "not_found"
        )
        const forwardAsB = yield* call("POST", `/v1/emails/${mailA.id}/forward`, { token: key, body: { to, from: b.address } })
        expectError(forwardAsB, 403, "forbidden")

        const sent = yield* call("GET", "/v1/sent-emails", { token: key })
        expect(sent.status).toBe(200)
        expect(sent.body.data.length).toBe(4)
        expect(sent.body.data.every((s: { inbox_id: string }) => s.inbox_id === a.id)).toBe(true)
        expectError(yield* call("GET", `/v1/sent-emails/${fromOrg.body.data.id}`, { token: key }), 404, "not_found")
        expect((yield* call("GET", `/v1/sent-emails/${defaulted.body.data.id}`, { token: key })).status).toBe(200)
        // The organization's own key still sends from B.
        expect((yield* call("POST", "/v1/send-mail", { token: org.token, body: { from: b.address, to, subject: "b", text: "hi" } })).status)
          .toBe(201)
      }))
  })
})
