/**
 * The MCP server, driven by the official npm `@modelcontextprotocol/sdk` client over Streamable HTTP
 * (`/mcp`) and over stdio (`mailroom mcp` from the built CLI): the tool list with schemas derived from
 * the API, every tool called against the live service, `wait_for_email` answered by mail sent over
 * SMTP after the call began, errors as `isError` results carrying the envelope's code, other
 * organizations' ids not found, the 401 challenge, and idempotency as on `/v1`.
 */
import { describe, expect, layer } from "@effect/vitest"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { Effect, Layer } from "effect"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import nodemailer from "nodemailer"
import { inject } from "vitest"
import { Provisioning } from "../src/identity/Provisioning.js"
import { TOOLS } from "../src/mcp/Tools.js"
import { TestServer, testService } from "./support/harness.js"
import { call, type JsonBody } from "./support/http.js"

const Env = Provisioning.Default.pipe(Layer.provideMerge(testService({ DNS_SERVER: "127.0.0.1:9" })))
const ROOT = fileURLToPath(new URL("..", import.meta.url))

/** The tools of the contract whose operations exist in this service. */
const EXPECTED = [
  "get_account", "list_emails", "get_email", "label_email", "search_emails", "wait_for_email", "send_email", "reply_to_email",
  "forward_email", "list_threads", "get_thread", "list_functions", "deploy_function", "invoke_function",
  "get_memory", "put_memory", "schedule_wake", "resolve_registry_entry", "pay_challenge", "list_inboxes", "create_inbox", "list_drafts"
]

const FUNCTION_CODE = `export default { async fetch(request, env) { return new Response("ok from mcp") } }`

interface Org {
  readonly orgId: string
  readonly key: string
  readonly address: string
}

const newOrg = (name: string) =>
  Effect.gen(function*() {
    const p = yield* Provisioning
    const org = yield* p.createOrganization({ name, plan: "developer" })
    const key = yield* p.issueApiKey(org.id)
    return { orgId: org.id, key: key.apiKey, address: org.managedInboxAddress! } satisfies Org
  })

/** A tool result; its structured content is the API's envelope, untyped like every test reply (support/http.ts). */
type Result = { isError?: boolean; structuredContent?: JsonBody; content: Array<{ type: string; text?: string }> }

const errorOf = (r: Result) => {
  expect(r.isError).toBe(true)
  return JSON.parse(r.content[0]!.text!).error as { code: string; message: string }
}
const dataOf = (r: Result) => {
  if (r.isError) throw new Error(`tool failed: ${r.content[0]?.text}`)
  expect(r.structuredContent.success).toBe(true)
  return r.structuredContent.data
}

const httpClient = async (baseUrl: string, key: string) => {
  const client = new Client({ name: "mailroom-test", version: "1.0.0" })
  await client.connect(new StreamableHTTPClientTransport(new URL(`${baseUrl}/mcp`), { requestInit: { headers: { authorization: `Bearer ${key}` } } }))
  return client
}

const stdioClient = async (baseUrl: string, key: string) => {
  const bundle = inject("cliBundle")
  const entry = typeof bundle === "string" && bundle !== "" ? [bundle] : ["--import", "tsx", "src/cli/main.ts"]
  const client = new Client({ name: "mailroom-test", version: "1.0.0" })
  await client.connect(new StdioClientTransport({
    command: process.execPath,
    args: [...entry, "mcp"],
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? "", XDG_CONFIG_HOME: mkdtempSync(join(tmpdir(), "mailroom-mcp-")), MAILROOM_BASE_URL: `${baseUrl}/v1`, MAILROOM_API_KEY: key },
    stderr: "pipe"
  }))
  return client
}

/** Every tool once, through `client`, against the live service; `tag` keeps the two runs' names apart. */
const exercise = (client: Client, org: Org, other: Org, tag: string) =>
  Effect.gen(function*() {
    const server = yield* TestServer
    const tool = (name: string, args: Record<string, unknown> = {}, timeout?: number) =>
      Effect.promise(() => client.callTool({ name, arguments: args }, undefined, timeout !== undefined ? { timeout } : undefined) as Promise<Result>)

    const { tools } = yield* Effect.promise(() => client.listTools())
    expect(tools.map((t) => t.name).sort()).toEqual([...EXPECTED].sort())
    for (const t of tools) {
      expect(t.inputSchema.type).toBe("object")
      expect(t.outputSchema?.type).toBe("object")
    }
    expect(Object.keys(tools.find((t) => t.name === "send_email")!.inputSchema.properties ?? {})).toEqual(
      expect.arrayContaining(["from", "to", "subject", "text", "idempotency_key"])
    )

    expect(dataOf(yield* tool("get_account")).id).toBe(org.orgId)

    // Inboxes: one created through MCP is listed beside the default and takes mail like it.
    const username = `mcp-${tag}-${Math.random().toString(36).slice(2, 7)}`
    const inbox = dataOf(yield* tool("create_inbox", { username, display_name: `MCP ${tag}` }))
    expect(inbox).toMatchObject({ username, display_name: `MCP ${tag}`, is_default: false })
    const inboxes = dataOf(yield* tool("list_inboxes"))
    expect(inboxes.map((i: { address: string }) => i.address).sort()).toEqual([org.address, inbox.address].sort())
    expect(errorOf(yield* tool("create_inbox", { username: "not+valid" })).code).toBe("validation_error")
    expect(errorOf(yield* tool("create_inbox", { username, display_name: "again" })).code).toBe("conflict")

    // wait_for_email: the call begins, then the mail is sent over SMTP.
    const subject = `hello mcp ${tag}`
    const began = Date.now()
    const waiting = yield* Effect.fork(tool("wait_for_email", { subject_contains: subject, timeout_seconds: 90 }, 100_000))
    yield* Effect.sleep("1 second")
    yield* Effect.promise(() =>
      nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
        .sendMail({ from: "ann@example.com", to: org.address, subject, text: "agreement paperwork for the agent" }))
    const email = dataOf(yield* waiting)
    expect(email.subject).toBe(subject)
    expect(new Date(email.received_at).getTime()).toBeGreaterThanOrEqual(began - 1000)
    // Nothing newer than that one: a zero timeout answers null at once.
    expect(dataOf(yield* tool("wait_for_email", { subject_contains: subject, timeout_seconds: 0 }))).toBeNull()

    const listed = yield* tool("list_emails", { limit: 5 })
    expect(dataOf(listed).map((e: { id: string }) => e.id)).toContain(email.id)
    expect(listed.structuredContent.meta.limit).toBe(5)
    expect(dataOf(yield* tool("get_email", { id: email.id })).text).toContain("agreement paperwork")
    // label_email: the same operation as PATCH /v1/emails/{id}.
    const labelled = dataOf(yield* tool("label_email", { id: email.id, labels: ["legal", "agent:todo", "legal"], read: true }))
    expect([labelled.labels, labelled.read]).toEqual([["agent:todo", "legal"], true])
    expect(dataOf(yield* tool("list_emails", { label: "legal", unread: false })).map((e: { id: string }) => e.id)).toEqual([email.id])
    expect(errorOf(yield* tool("label_email", { id: email.id, labels: ["Not Valid"] })).code).toBe("validation_error")
    expect(errorOf(yield* tool("label_email", { id: email.id })).code).toBe("validation_error")
    const found = dataOf(yield* tool("search_emails", { q: "paperwork", mode: "lexical" }))
    expect(found.results.map((r: { id: string }) => r.id)).toContain(email.id)
    expect(dataOf(yield* tool("list_threads", { limit: 10 })).map((t: { id: string }) => t.id)).toContain(email.thread_id)
    expect(dataOf(yield* tool("get_thread", { id: email.thread_id })).messages[0].id).toBe(email.id)

    const sent = dataOf(yield* tool("send_email", { from: org.address, to: "ann@example.com", subject: `out ${tag}`, text: "hi" }))
    expect(sent.status).toBe("sent")
    expect(dataOf(yield* tool("reply_to_email", { id: email.id, text: "thanks" })).to).toEqual(["ann@example.com"])
    expect(dataOf(yield* tool("forward_email", { id: email.id, to: "bob@example.com" })).to).toEqual(["bob@example.com"])

    const fn = dataOf(yield* tool("deploy_function", { name: `mcp-${tag}`, code: FUNCTION_CODE }))
    expect(dataOf(yield* tool("list_functions")).map((f: { id: string }) => f.id)).toContain(fn.id)
    expect(dataOf(yield* tool("invoke_function", { id: fn.id })).response_body).toBe("ok from mcp")

    expect(dataOf(yield* tool("put_memory", { key: `k/${tag}`, value: { n: 1 } })).value).toEqual({ n: 1 })
    expect(dataOf(yield* tool("get_memory", { key: `k/${tag}` })).value).toEqual({ n: 1 })

    const wake = dataOf(yield* tool("schedule_wake", { function_id: fn.id, command: { type: "ping" }, in: "1h" }))
    expect(wake.status).toBe("scheduled")

    const registry = `mcp-reg-${tag}`
    expect((yield* call("POST", "/v1/registries", { token: org.key, body: { name: registry } })).status).toBe(201)
    expect((yield* call("POST", `/v1/registries/${registry}/entries`, { token: org.key, body: { handle: "helper", address: org.address } })).status).toBe(201)
    expect(dataOf(yield* tool("resolve_registry_entry", { name: registry, handle: "helper" })).address).toBe(org.address)

    // Payments are not granted to this organization: the refusal is a result carrying its code.
    const refused = errorOf(yield* tool("pay_challenge", { id: "00000000-0000-4000-8000-000000000001", payment_payload: {} }))
    expect(refused.code).toBe("feature_disabled")

    // Errors: unknown id, malformed id, an argument the operation does not have.
    expect(errorOf(yield* tool("get_email", { id: "00000000-0000-4000-8000-000000000000" }))).toMatchObject({ code: "not_found", message: "email not found" })
    expect(errorOf(yield* tool("get_email", { id: "not-a-uuid" })).code).toBe("validation_error")
    expect(errorOf(yield* tool("list_emails", { colour: "blue" })).code).toBe("validation_error")

    // Another organization's ids are not found through MCP either.
    const theirs = yield* Effect.promise(() => httpClient(server.baseUrl, other.key))
    const foreign = (name: string, args: Record<string, unknown>) =>
      Effect.promise(() => theirs.callTool({ name, arguments: args }) as Promise<Result>)
    expect(errorOf(yield* foreign("get_email", { id: email.id })).code).toBe("not_found")
    expect(errorOf(yield* foreign("label_email", { id: email.id, read: false })).code).toBe("not_found")
    expect(errorOf(yield* foreign("get_thread", { id: email.thread_id })).code).toBe("not_found")
    expect(errorOf(yield* foreign("invoke_function", { id: fn.id })).code).toBe("not_found")
    expect(dataOf(yield* foreign("list_inboxes", {})).map((i: { id: string }) => i.id)).not.toContain(inbox.id)
    yield* Effect.promise(() => theirs.close())
  })

layer(Env, { timeout: 300_000, excludeTestServices: true })("mcp", (it) => {
  describe("Streamable HTTP (/mcp)", () => {
    it.effect("the SDK client connects, lists the tools and calls each one", () =>
      Effect.gen(function*() {
        const server = yield* TestServer
        const org = yield* newOrg("MCP HTTP")
        const other = yield* newOrg("Other")
        const client = yield* Effect.promise(() => httpClient(server.baseUrl, org.key))
        expect(client.getServerVersion()?.name).toBe("mailroom")
        yield* exercise(client, org, other, "http")
        yield* Effect.promise(() => client.close())
      }), { timeout: 240_000 })

    it.effect("a missing or bad credential is 401 with the resource-metadata challenge, as on /v1", () =>
      Effect.gen(function*() {
        const init = { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "t", version: "1" } } }
        const missing = yield* call("POST", "/mcp", { body: init, headers: { accept: "application/json, text/event-stream" } })
        expect(missing.status).toBe(401)
        expect(missing.body.error.code).toBe("unauthorized")
        const v1 = yield* call("GET", "/v1/account")
        expect(missing.headers.get("www-authenticate")).toBe(v1.headers.get("www-authenticate"))
        expect(missing.headers.get("www-authenticate")).toContain("resource_metadata=")
        const bad = yield* call("POST", "/mcp", { body: init, token: "mr_live_nope" })
        expect([bad.status, bad.body.error.code]).toEqual([401, "unauthorized"])
        expect((yield* call("GET", "/mcp")).status).toBe(405)
      }))

    it.effect("send_email with an idempotency_key sends once, like the same key on /v1", () =>
      Effect.gen(function*() {
        const server = yield* TestServer
        const org = yield* newOrg("MCP idem")
        const client = yield* Effect.promise(() => httpClient(server.baseUrl, org.key))
        const args = { from: org.address, to: "ann@example.com", subject: "once", text: "only once", idempotency_key: "mcp-once-1" }
        const first = dataOf(yield* Effect.promise(() => client.callTool({ name: "send_email", arguments: args }) as Promise<Result>))
        const again = dataOf(yield* Effect.promise(() => client.callTool({ name: "send_email", arguments: args }) as Promise<Result>))
        expect(again.id).toBe(first.id)
        const { idempotency_key: _k, ...body } = args
        const rest = yield* call("POST", "/v1/send-mail", { token: org.key, body, headers: { "idempotency-key": "mcp-once-1" } })
        expect(rest.headers.get("idempotent-replayed")).toBe("true")
        expect(rest.body.data.id).toBe(first.id)
        const sent = yield* call("GET", "/v1/sent-emails", { token: org.key })
        expect(sent.body.data.filter((e: { subject: string }) => e.subject === "once")).toHaveLength(1)
        yield* Effect.promise(() => client.close())
      }))

    it.effect("each tools/call counts once on the organization's window", () =>
      Effect.gen(function*() {
        const org = yield* newOrg("MCP window")
        // Posted directly: an SDK client also opens its event stream (a GET /mcp, counted too) at a
        // moment of its own choosing, which would make the count race.
        const toolCall = (id: number) =>
          call("POST", "/mcp", {
            token: org.key,
            headers: { accept: "application/json, text/event-stream" },
            body: { jsonrpc: "2.0", id, method: "tools/call", params: { name: "get_account", arguments: {} } }
          })
        const before = Number((yield* call("GET", "/v1/account", { token: org.key })).headers.get("ratelimit-remaining"))
        for (let i = 0; i < 3; i++) {
          const answer = yield* toolCall(i + 1)
          expect([answer.status, answer.body.result.isError]).toEqual([200, false])
        }
        const after = Number((yield* call("GET", "/v1/account", { token: org.key })).headers.get("ratelimit-remaining"))
        expect(before - after).toBe(4)
      }))
    it.effect("a tools/call posted alone answers byte for byte what the McpServer answers for it in a batch", () =>
      Effect.gen(function*() {
        const org = yield* newOrg("MCP direct")
        const headers = { accept: "application/json, text/event-stream" }
        const request = (id: number, name: string, args?: Record<string, unknown>, meta?: unknown) => ({
          jsonrpc: "2.0", id, method: "tools/call",
          params: { name, ...(args !== undefined ? { arguments: args } : {}), ...(meta !== undefined ? { _meta: meta } : {}) }
        })
        const both = (message: ReturnType<typeof request>) =>
          Effect.gen(function*() {
            const alone = yield* call("POST", "/mcp", { token: org.key, body: message, headers })
            const batched = yield* call("POST", "/mcp", { token: org.key, body: [message], headers })
            expect([alone.status, batched.status]).toEqual([200, 200])
            expect(alone.headers.get("content-type")).toBe(batched.headers.get("content-type"))
            expect(`[${alone.text}]`).toBe(batched.text)
            return alone.body
          })
        const account = yield* both(request(7, "get_account", {}))
        expect([account.id, account.result.isError, account.result.structuredContent.data.id]).toEqual([7, false, org.orgId])
        expect(account.result.content[0].text).toBe(JSON.stringify(account.result.structuredContent))
        expect((yield* both(request(2 ** 40, "list_emails", { limit: 5 }, { progressToken: "p" }))).result.structuredContent.meta.limit).toBe(5)
        // An error result carries its envelope's code as the text of its content.
        const missing = yield* both(request(8, "get_email", { id: "00000000-0000-4000-8000-000000000000" }))
        expect(missing.result.isError).toBe(true)
        expect(JSON.parse(missing.result.content[0].text).error).toMatchObject({ code: "not_found", message: "email not found" })
        const invalid = yield* both(request(9, "list_emails", { colour: "blue" }))
        expect(JSON.parse(invalid.result.content[0].text).error.code).toBe("validation_error")
        // What only the McpServer answers (unknown tool, no arguments, malformed _meta) is the same alone or batched.
        expect((yield* both(request(10, "no_such_tool", {}))).error).toBeDefined()
        yield* both(request(11, "get_account"))
        expect((yield* both(request(12, "get_account", {}, { progressToken: true }))).error).toBeDefined()
      }))
  })

  describe("stdio (mailroom mcp)", () => {
    it.effect("the SDK client starts the built CLI, lists the tools and calls each one", () =>
      Effect.gen(function*() {
        const server = yield* TestServer
        const org = yield* newOrg("MCP stdio")
        const other = yield* newOrg("Other stdio")
        const client = yield* Effect.promise(() => stdioClient(server.baseUrl, org.key))
        yield* exercise(client, org, other, "stdio")
        yield* Effect.promise(() => client.close())
      }), { timeout: 240_000 })
  })

  it("every tool names an operation of the API and derives its schemas from it", () => {
    expect(TOOLS.map((t) => t.name).sort()).toEqual([...EXPECTED].sort())
    const wait = TOOLS.find((t) => t.name === "wait_for_email")!
    expect(wait.inputSchema.properties).toMatchObject({ timeout_seconds: { type: "integer", maximum: 120 } })
  })
})
