/**
 * Send approval from outside: with `send_approval: new_recipients` a send to an address the
 * organization never wrote to nor heard from answers 202 with a draft, emits `draft.created` and
 * mails the owner a link; approved twice at once it is relayed exactly once (the second answer 409);
 * rejected and expired drafts are never sent; the link's page in Chromium has real Approve and
 * Reject buttons and works once; reading drafts needs emails:read, deciding them an admin credential.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { Context, Effect, Layer } from "effect"
import { simpleParser } from "mailparser"
import type { Page } from "playwright-core"
import { Provisioning } from "../src/identity/Provisioning.js"
import { TestBrowser, TestBrowserLive } from "./support/browser.js"
import { TestServer, testService } from "./support/harness.js"
import { call } from "./support/http.js"
import { startTestRelay, type TestRelay } from "./support/relay.js"
import { type CliEnv, runCli } from "./support/cli.js"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"

class Relay extends Context.Tag("test/Relay")<Relay, TestRelay>() {}

const Env = Layer.mergeAll(
  Provisioning.Default.pipe(
    Layer.provideMerge(Layer.unwrapScoped(Effect.map(startTestRelay, (relay) =>
      testService({ OUTBOUND_SMTP_URL: relay.url, DNS_SERVER: "127.0.0.1:9" }).pipe(Layer.merge(Layer.succeed(Relay, relay))))))
  ),
  TestBrowserLive
)

let seq = 0
const unique = (label: string) => `${label}-${++seq}-${Math.random().toString(36).slice(2, 7)}@example.com`

/** An organization with an owner (who gets the approval mail) and its admin key. */
const newOrg = Effect.gen(function*() {
  const p = yield* Provisioning
  const sql = yield* SqlClient.SqlClient
  const org = yield* p.createOrganization({ name: "approvals", plan: "developer" })
  const key = yield* p.issueApiKey(org.id)
  const owner = unique("owner")
  const users = yield* sql<{ id: string }>`INSERT INTO users (email) VALUES (${owner}) RETURNING id`
  yield* sql`INSERT INTO memberships (org_id, user_id, role) VALUES (${org.id}, ${users[0]!.id}, 'owner')`
  return { orgId: org.id, key: key.apiKey, owner }
}).pipe(Effect.orDie)

const relayedTo = (to: string) => Effect.map(Relay, (r) => r.messages.filter((m) => m.to.includes(to)))

/** The approval link in the last mail to `owner` (waits for it). */
const approvalLink = (owner: string) =>
  Effect.gen(function*() {
    for (let i = 0; i < 100; i++) {
      const mails = yield* relayedTo(owner)
      const last = mails.at(-1)
      if (last !== undefined) {
        const parsed = yield* Effect.promise(() => simpleParser(last.raw))
        const m = /(http:\/\/\S+\/drafts\/review\?token=[A-Za-z0-9]+)/.exec(parsed.text ?? "")
        if (m !== null) return m[1]!
      }
      yield* Effect.sleep("50 millis")
    }
    throw new Error(`no approval mail to ${owner}`)
  })

const send = (token: string, to: string, subject = "hello") =>
  call("POST", "/v1/send-mail", { token, body: { to, subject, text: "Hi there" } })

const withPage = <A>(f: (page: Page) => Promise<A>) =>
  Effect.flatMap(TestBrowser, (browser) =>
    Effect.acquireUseRelease(
      Effect.promise(() => browser.newContext()),
      (context) => Effect.promise(async () => f(await context.newPage())),
      (context) => Effect.promise(() => context.close())
    ))

layer(Env, { timeout: 180_000, excludeTestServices: true })("send approval", (it) => {
  describe("new_recipients", () => {
    it.effect("a send to a new address waits as a draft; approved twice at once it is delivered exactly once", () =>
      Effect.gen(function*() {
        const org = yield* newOrg
        const sql = yield* SqlClient.SqlClient
        const known = unique("known")
        expect((yield* send(org.key, known)).status).toBe(201)

        const patched = yield* call("PATCH", "/v1/account", { token: org.key, body: { send_approval: "new_recipients" } })
        expect(patched.status).toBe(200)
        expect(patched.body.data.send_approval).toBe("new_recipients")
        expect((yield* call("GET", "/v1/account", { token: org.key })).body.data.send_approval).toBe("new_recipients")
        const bad = yield* call("PATCH", "/v1/account", { token: org.key, body: { send_approval: "sometimes" } })
        expect(bad.status).toBe(400)
        expect(bad.body.error.code).toBe("validation_error")

        // Written to before: no approval needed.
        expect((yield* send(org.key, known)).status).toBe(201)

        const fresh = unique("fresh")
        const held = yield* send(org.key, fresh, "needs a yes")
        expect(held.status).toBe(202)
        const draft = held.body.data
        expect(draft).toMatchObject({ status: "pending_approval", reason: "new_recipients", new_recipients: [fresh], to: [fresh], subject: "needs a yes" })
        expect((yield* relayedTo(fresh)).length).toBe(0)
        yield* approvalLink(org.owner)
        const events = yield* sql<{ payload: string | null }>`
          SELECT payload FROM org_events WHERE org_id = ${org.orgId} AND event_type = 'draft.created'`
        expect(events.length).toBe(1)
        expect(JSON.parse(events[0]!.payload!).draft.id).toBe(draft.id)

        const listed = yield* call("GET", "/v1/drafts?status=pending_approval", { token: org.key })
        expect(listed.body.data.map((d: { id: string }) => d.id)).toEqual([draft.id])

        const [a, b] = yield* Effect.all([
          call("POST", `/v1/drafts/${draft.id}/approve`, { token: org.key }),
          call("POST", `/v1/drafts/${draft.id}/approve`, { token: org.key })
        ], { concurrency: 2 })
        const statuses = [a.status, b.status].sort()
        expect(statuses).toEqual([200, 409])
        const won = a.status === 200 ? a : b
        const lost = a.status === 200 ? b : a
        expect(won.body.data.status).toBe("sent")
        expect(lost.body.error.code).toBe("conflict")
        expect((yield* relayedTo(fresh)).length).toBe(1)
        const got = yield* call("GET", `/v1/drafts/${draft.id}`, { token: org.key })
        expect(got.body.data.sent_email_id).toBe(won.body.data.sent_email_id)
        expect((yield* call("GET", `/v1/sent-emails/${won.body.data.sent_email_id}`, { token: org.key })).body.data.to).toEqual([fresh])
        // Now written to: a second send goes at once.
        expect((yield* send(org.key, fresh)).status).toBe(201)
      }))

    it.effect("rejected and expired drafts are never sent; scopes; unknown drafts 404; all holds every send", () =>
      Effect.gen(function*() {
        const org = yield* newOrg
        const sql = yield* SqlClient.SqlClient
        yield* call("PATCH", "/v1/account", { token: org.key, body: { send_approval: "all" } })
        const to = unique("any")
        const first = (yield* send(org.key, to)).body.data
        expect(first.reason).toBe("all")
        const reader = (yield* call("POST", "/v1/api-keys", { token: org.key, body: { name: "r", scopes: ["emails:read"] } })).body.data.api_key
        const sender = (yield* call("POST", "/v1/api-keys", { token: org.key, body: { name: "s", scopes: ["emails:send"] } })).body.data.api_key
        expect((yield* call("GET", `/v1/drafts/${first.id}`, { token: reader })).status).toBe(200)
        const denied = yield* call("POST", `/v1/drafts/${first.id}/approve`, { token: reader })
        expect(denied.status).toBe(403)
        expect(denied.body.error.details.missing_scope).toBe("admin")
        // A sending key's send waits too, and that key cannot approve it.
        const second = yield* send(sender, to)
        expect(second.status).toBe(202)
        expect((yield* call("POST", `/v1/drafts/${second.body.data.id}/approve`, { token: sender })).status).toBe(403)

        const rejected = yield* call("POST", `/v1/drafts/${first.id}/reject`, { token: org.key })
        expect(rejected.status).toBe(200)
        expect(rejected.body.data.status).toBe("rejected")
        const late = yield* call("POST", `/v1/drafts/${first.id}/approve`, { token: org.key })
        expect(late.status).toBe(409)
        expect(late.body.error.details.status).toBe("rejected")

        yield* sql`UPDATE drafts SET expires_at = now() - interval '1 second' WHERE id = ${second.body.data.id}`.pipe(Effect.orDie)
        expect((yield* call("GET", `/v1/drafts/${second.body.data.id}`, { token: org.key })).body.data.status).toBe("expired")
        const expired = yield* call("POST", `/v1/drafts/${second.body.data.id}/approve`, { token: org.key })
        expect(expired.status).toBe(409)
        expect(expired.body.error.details.status).toBe("expired")
        expect((yield* relayedTo(to)).length).toBe(0)

        const missing = yield* call("POST", `/v1/drafts/${crypto.randomUUID()}/reject`, { token: org.key })
        expect(missing.status).toBe(404)
        expect(missing.body.error.code).toBe("not_found")
        expect((yield* call("GET", `/v1/drafts/${crypto.randomUUID()}`, { token: org.key })).status).toBe(404)
        const other = yield* newOrg
        expect((yield* call("GET", `/v1/drafts/${first.id}`, { token: other.key })).status).toBe(404)

        // MCP: list_drafts.
        const server = yield* TestServer
        const client = new Client({ name: "mailroom-test", version: "1.0.0" })
        yield* Effect.promise(() =>
          client.connect(new StreamableHTTPClientTransport(new URL(`${server.baseUrl}/mcp`), { requestInit: { headers: { authorization: `Bearer ${reader}` } } })))
        const result = (yield* Effect.promise(() => client.callTool({ name: "list_drafts", arguments: {} }))) as { structuredContent?: { data: Array<{ id: string }> } }
        expect(result.structuredContent!.data.map((d) => d.id).sort()).toEqual([first.id, second.body.data.id].sort())
        yield* Effect.promise(() => client.close())
      }))
  })

  describe("the approval page", () => {
    it.effect("the owner opens the mailed link, clicks Approve: sent once; the link does not work again", () =>
      Effect.gen(function*() {
        const org = yield* newOrg
        yield* call("PATCH", "/v1/account", { token: org.key, body: { send_approval: "new_recipients" } })
        const to = unique("page")
        const draft = (yield* send(org.key, to, "via the page")).body.data
        const link = yield* approvalLink(org.owner)
        const body = yield* withPage(async (page) => {
          await page.goto(link)
          expect(await page.locator("#draft-subject").textContent()).toBe("via the page")
          expect(await page.getByRole("button", { name: "Reject" }).count()).toBe(1)
          await page.getByRole("button", { name: "Approve" }).click()
          await page.waitForURL(/done=/)
          return (await page.locator("body").textContent()) ?? ""
        })
        expect(body).toContain("Approved")
        expect((yield* relayedTo(to)).length).toBe(1)
        expect((yield* call("GET", `/v1/drafts/${draft.id}`, { token: org.key })).body.data.status).toBe("sent")
        const again = yield* withPage(async (page) => {
          const res = await page.goto(link)
          return { status: res?.status(), text: (await page.locator("body").textContent()) ?? "" }
        })
        expect(again.status).toBe(404)
        expect(again.text).toContain("already used")

        // Rejected through the page: never sent.
        const to2 = unique("page-reject")
        const draft2 = (yield* send(org.key, to2, "say no")).body.data
        const link2 = yield* approvalLink(org.owner)
        const text2 = yield* withPage(async (page) => {
          await page.goto(link2)
          await page.getByRole("button", { name: "Reject" }).click()
          await page.waitForURL(/done=/)
          return (await page.locator("body").textContent()) ?? ""
        })
        expect(text2).toContain("Rejected")
        expect((yield* call("GET", `/v1/drafts/${draft2.id}`, { token: org.key })).body.data.status).toBe("rejected")
        expect((yield* relayedTo(to2)).length).toBe(0)
        // A cross-site post is refused.
        const forged = yield* Effect.flatMap(TestServer, (s) => Effect.promise(() =>
          fetch(`${s.baseUrl}/drafts/review`, {
            method: "POST",
            headers: { "content-type": "application/x-www-form-urlencoded", origin: "https://evil.example" },
            body: "token=x&decision=approve"
          })))
        expect(forged.status).toBe(403)
      }))
  })

  describe("CLI", () => {
    it.effect("mailroom send is held; mailroom drafts list, get, approve and reject", () =>
      Effect.gen(function*() {
        const server = yield* TestServer
        const org = yield* newOrg
        const env: CliEnv = { baseUrl: server.baseUrl, configHome: mkdtempSync(join(tmpdir(), "mailroom-cli-")), extra: { MAILROOM_API_KEY: org.key } }
        const cli = (...args: Array<string>) => Effect.promise(() => runCli(args, env))
        const set = yield* cli("account", "update", "--send-approval", "all", "--json")
        expect(set.code).toBe(0)
        expect(JSON.parse(set.stdout).send_approval).toBe("all")
        const to = unique("cli")
        const sent = yield* cli("send", "--to", to, "--subject", "from the cli", "--text", "hi")
        expect(sent.code).toBe(0)
        expect(sent.stdout).toContain("Held for approval")
        const listed = yield* cli("drafts", "list", "--json")
        const drafts = JSON.parse(listed.stdout) as Array<{ id: string; subject: string }>
        expect(drafts.map((d) => d.subject)).toEqual(["from the cli"])
        const id = drafts[0]!.id
        expect((yield* cli("drafts", "get", id)).stdout).toContain("from the cli")
        const approved = yield* cli("drafts", "approve", id)
        expect(approved.code).toBe(0)
        expect(approved.stdout).toContain("sent as")
        expect((yield* relayedTo(to)).length).toBe(1)
        const again = yield* cli("drafts", "reject", id)
        expect(again.code).toBe(3)
        expect(again.stderr).toContain("conflict")
      }), 300_000)
  })
})
