/**
 * Scoped API keys from outside: created with scopes (the secret shown once), listed without it,
 * revoked (401 from then on); a key's scopes hold on REST and over MCP (403 `forbidden` with
 * `details.missing_scope`), a key never widens its maker's scopes, and `last_used_at` records use.
 */
import { describe, expect, layer } from "@effect/vitest"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { Effect, Layer } from "effect"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Provisioning } from "../src/identity/Provisioning.js"
import { TestServer, testService } from "./support/harness.js"
import { type CliEnv, runCli } from "./support/cli.js"
import { call } from "./support/http.js"

const Env = Provisioning.Default.pipe(Layer.provideMerge(testService({ DNS_SERVER: "127.0.0.1:9" })))

const newOrg = (name: string) =>
  Effect.gen(function*() {
    const p = yield* Provisioning
    const org = yield* p.createOrganization({ name, plan: "developer" })
    const key = yield* p.issueApiKey(org.id)
    return { orgId: org.id, key: key.apiKey, address: org.managedInboxAddress! }
  })

const createKey = (token: string, body: unknown) => call("POST", "/v1/api-keys", { token, body })

layer(Env, { timeout: 120_000, excludeTestServices: true })("api keys", (it) => {
  describe("POST, GET and DELETE /api-keys", () => {
    it.effect("creates a scoped key shown once, lists it without the secret, revokes it", () =>
      Effect.gen(function*() {
        const org = yield* newOrg("keys")
        const created = yield* createKey(org.key, { name: "reader", scopes: ["emails:read", "emails:read"] })
        expect(created.status).toBe(201)
        const key = created.body.data
        expect(key).toMatchObject({ name: "reader", scopes: ["emails:read"], inbox_ids: null, last_used_at: null })
        expect(key.api_key).toMatch(/^mr_live_/)
        expect(created.headers.get("cache-control")).toBe("no-store")
        // The same body again is a second key, not a replay of the first one's secret.
        const twin = yield* createKey(org.key, { name: "reader", scopes: ["emails:read", "emails:read"] })
        expect(twin.status).toBe(201)
        expect(twin.body.data.api_key).not.toBe(key.api_key)

        // The new key works for what it may do, and its use is recorded.
        expect((yield* call("GET", "/v1/emails", { token: key.api_key })).status).toBe(200)
        const listed = yield* call("GET", "/v1/api-keys", { token: org.key })
        expect(listed.status).toBe(200)
        const mine = listed.body.data.find((k: { id: string }) => k.id === key.id)
        expect(mine.scopes).toEqual(["emails:read"])
        expect(mine.last_used_at).not.toBeNull()
        expect(listed.text).not.toContain(key.api_key)
        // The organization's own key: every scope.
        expect(listed.body.data.some((k: { scopes: Array<string> }) => k.scopes.includes("admin"))).toBe(true)

        const revoked = yield* call("DELETE", `/v1/api-keys/${key.id}`, { token: org.key })
        expect(revoked.status).toBe(200)
        expect(revoked.body.data.id).toBe(key.id)
        const after = yield* call("GET", "/v1/emails", { token: key.api_key })
        expect(after.status).toBe(401)
        expect(after.body.error.code).toBe("unauthorized")
        expect((yield* call("DELETE", `/v1/api-keys/${key.id}`, { token: org.key })).status).toBe(404)
        expect((yield* call("GET", "/v1/api-keys", { token: org.key })).body.data.map((k: { id: string }) => k.id)).not.toContain(key.id)
      }))

    it.effect("refuses bad bodies, unknown scopes, inbox ids no inbox has, and other organizations' keys", () =>
      Effect.gen(function*() {
        const org = yield* newOrg("keys-bad")
        const other = yield* newOrg("keys-other")
        for (const body of [{ name: "x", scopes: [] }, { name: "x", scopes: ["root"] }, { scopes: ["search"] }, { name: "x", scopes: ["search"], extra: 1 }]) {
          const r = yield* createKey(org.key, body)
          expect(r.status).toBe(400)
          expect(r.body.error.code).toBe("validation_error")
        }
        const inbox = yield* createKey(org.key, { name: "x", scopes: ["emails:read"], inbox_ids: [crypto.randomUUID()] })
        expect(inbox.status).toBe(400)
        expect(inbox.body.error.message).toContain("inbox_ids")
        const theirs = (yield* createKey(other.key, { name: "theirs", scopes: ["search"] })).body.data
        const r = yield* call("DELETE", `/v1/api-keys/${theirs.id}`, { token: org.key })
        expect(r.status).toBe(404)
        expect(r.body.error.code).toBe("not_found")
        expect((yield* call("GET", "/v1/api-keys", { token: "mr_live_nonsense-key-value" })).status).toBe(401)
      }))
  })

  describe("scopes", () => {
    it.effect("a read-only key gets 403 forbidden with missing_scope on send-mail, and cannot make a wider key", () =>
      Effect.gen(function*() {
        const org = yield* newOrg("scoped")
        const reader = (yield* createKey(org.key, { name: "reader", scopes: ["emails:read"] })).body.data.api_key
        const send = yield* call("POST", "/v1/send-mail", { token: reader, body: { to: "ann@example.com", subject: "hi", text: "hi" } })
        expect(send.status).toBe(403)
        expect(send.body.error.code).toBe("forbidden")
        expect(send.body.error.details.missing_scope).toBe("emails:send")

        // No widening: a key without admin manages no keys, so it cannot mint a wider one.
        const wider = yield* createKey(reader, { name: "wider", scopes: ["emails:send"] })
        expect(wider.status).toBe(403)
        expect(wider.body.error.code).toBe("forbidden")
        expect(wider.body.error.details.missing_scope).toBe("admin")
        const listing = yield* call("GET", "/v1/api-keys", { token: reader })
        expect(listing.status).toBe(403)

        // Other areas hold too; what needs no scope still answers.
        for (const [path, scope] of [["/v1/functions", "functions"], ["/v1/memories", "memories"], ["/v1/registries", "registries"], ["/v1/payments", "payments"], ["/v1/endpoints", "admin"]] as const) {
          const r = yield* call("GET", path, { token: reader })
          expect(r.status).toBe(403)
          expect(r.body.error.details.missing_scope).toBe(scope)
        }
        expect((yield* call("GET", "/v1/account", { token: reader })).status).toBe(200)
        expect((yield* call("GET", "/v1/threads", { token: reader })).status).toBe(200)
        expect((yield* call("GET", "/v1/sent-emails", { token: reader })).status).toBe(200)

        // A sender key sends.
        const sender = (yield* createKey(org.key, { name: "sender", scopes: ["emails:send"] })).body.data.api_key
        const sent = yield* call("POST", "/v1/send-mail", { token: sender, body: { to: "ann@example.com", subject: "hi", text: "hi" } })
        expect(sent.status).toBe(201)
      }))

    it.effect("over MCP a tool needing a missing scope is an error result with code forbidden", () =>
      Effect.gen(function*() {
        const server = yield* TestServer
        const org = yield* newOrg("scoped-mcp")
        const reader = (yield* createKey(org.key, { name: "reader", scopes: ["emails:read"] })).body.data.api_key
        const client = new Client({ name: "mailroom-test", version: "1.0.0" })
        yield* Effect.promise(() =>
          client.connect(new StreamableHTTPClientTransport(new URL(`${server.baseUrl}/mcp`), { requestInit: { headers: { authorization: `Bearer ${reader}` } } }))
        )
        const result = (yield* Effect.promise(() =>
          client.callTool({ name: "send_email", arguments: { to: "ann@example.com", subject: "hi", text: "hi" } })
        )) as { isError?: boolean; content: Array<{ text?: string }> }
        expect(result.isError).toBe(true)
        const error = JSON.parse(result.content[0]!.text!).error
        expect(error.code).toBe("forbidden")
        expect(error.details.missing_scope).toBe("emails:send")
        const listed = (yield* Effect.promise(() => client.callTool({ name: "list_emails", arguments: {} }))) as { isError?: boolean }
        expect(listed.isError).toBeFalsy()
        yield* Effect.promise(() => client.close())
      }))
  })

  describe("CLI", () => {
    it.effect("mailroom api-keys create, list and revoke", () =>
      Effect.gen(function*() {
        const server = yield* TestServer
        const org = yield* newOrg("keys-cli")
        const env: CliEnv = { baseUrl: server.baseUrl, configHome: mkdtempSync(join(tmpdir(), "mailroom-cli-")), extra: { MAILROOM_API_KEY: org.key } }
        const cli = (...args: Array<string>) => Effect.promise(() => runCli(args, env))
        const created = yield* cli("api-keys", "create", "--name", "bot", "--scope", "emails:read", "--scope", "search", "--json")
        expect(created.code).toBe(0)
        const key = JSON.parse(created.stdout)
        expect(key.scopes).toEqual(["emails:read", "search"])
        const listed = yield* cli("api-keys", "list")
        expect(listed.stdout).toContain(key.id)
        expect(listed.stdout).toContain("emails:read search")
        expect(listed.stdout).not.toContain(key.api_key)
        const revoked = yield* cli("api-keys", "revoke", key.id)
        expect(revoked.code).toBe(0)
        expect(revoked.stdout).toContain("Revoked")
        expect((yield* call("GET", "/v1/emails", { token: key.api_key })).status).toBe(401)
        const none = yield* cli("api-keys", "create", "--name", "x")
        expect(none.code).toBe(2)
      }), 300_000)
  })
})
