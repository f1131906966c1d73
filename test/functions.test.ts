/**
 * Hosted functions over real HTTP, real workerd and real SMTP: deploy-time validation in workerd,
 * the API's rules, redeploys, invoke and invocations, and delivery of inbound mail to a function
 * that verifies its signature, writes MEMORY and calls the service back through env.MAILROOM.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import nodemailer, { type SendMailOptions } from "nodemailer"
import { Provisioning } from "../src/identity/Provisioning.js"
import { TestServer, testService } from "./support/harness.js"
import { call } from "./support/http.js"
import { captureLogs, logLines } from "./support/identity.js"

// Everything the service logs, to check that no secret value reaches the log.
captureLogs()

const Env = Provisioning.Default.pipe(
  Layer.provideMerge(testService({
    FUNCTION_TIMEOUT: "3s",
    DELIVERY_RETRY_DELAYS: "300ms,600ms",
    DELIVERY_TIMEOUT: "1s",
    DNS_SERVER: "127.0.0.1:9",
    LOG_LEVEL: "all"
  }))
)

type Plan = "agent" | "developer" | "pro"

const newOrg = (plan: Plan = "developer") =>
  Effect.gen(function*() {
    const p = yield* Provisioning
    const org = yield* p.createOrganization({ name: "Fn", plan })
    const key = yield* p.issueApiKey(org.id)
    return { orgId: org.id, token: key.apiKey, inbox: org.managedInboxAddress }
  })

const send = (message: SendMailOptions) =>
  Effect.flatMap(TestServer, (server) =>
    Effect.promise(async () => {
      const transport = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
      try {
        return await transport.sendMail(message)
      } finally {
        transport.close()
      }
    }))

let seq = 0
const uniqueName = (label: string) => `${label}-${++seq}-${Math.random().toString(36).slice(2, 7)}`

const deploy = (token: string, code: string, secrets?: Record<string, string>, name = uniqueName("fn")) =>
  Effect.gen(function*() {
    const r = yield* call("POST", "/v1/functions", { token, body: { name, code, ...(secrets ? { secrets } : {}) } })
    expect(r.status, r.text).toBe(201)
    return r.body.data as { id: string; name: string; version: number; secret_names: Array<string> }
  })

const OK_CODE = `export default { async fetch(request, env) {
  const body = await request.json();
  console.log("got", body.event, "for", body.email.recipient);
  return new Response(JSON.stringify({ seen: body.event, greeting: env.GREETING ?? null }), { headers: { "content-type": "application/json" } });
} }`

/** Polls until `check` answers a value (or fails the test after `ms`). */
const until = <A, R>(what: string, check: Effect.Effect<A | undefined, never, R>, ms = 20_000) =>
  Effect.gen(function*() {
    const end = Date.now() + ms
    while (Date.now() < end) {
      const v = yield* check
      if (v !== undefined) return v
      yield* Effect.sleep("100 millis")
    }
    return yield* Effect.die(new Error(`timed out waiting for ${what}`))
  })

layer(Env, { timeout: 240_000, excludeTestServices: true })("functions", (it) => {
  describe("deploy and manage", () => {
    it.effect("creates, lists, reads with code, redeploys and deletes", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const name = uniqueName("hello")
        const created = yield* call("POST", "/v1/functions", {
          token: org.token,
          body: { name, code: OK_CODE, secrets: { GREETING: "hi-there-secret", API_TOKEN: "tok-123456" } }
        })
        expect(created.status, created.text).toBe(201)
        const fn = created.body.data
        expect(Object.keys(fn).sort()).toEqual([
          "code_sha256", "code_size_bytes", "created_at", "deployed_at", "endpoint_id", "id", "name", "secret_names", "updated_at", "version"
        ])
        expect(fn).toMatchObject({ name, version: 1, secret_names: ["API_TOKEN", "GREETING"], endpoint_id: null, code_size_bytes: OK_CODE.length })
        expect(created.text).not.toContain("hi-there-secret")

        const got = yield* call("GET", `/v1/functions/${fn.id}`, { token: org.token })
        expect(got.status).toBe(200)
        expect(got.body.data.code).toBe(OK_CODE)
        expect(got.text).not.toContain("hi-there-secret")

        const list = yield* call("GET", "/v1/functions", { token: org.token })
        expect(list.body.data.map((f: { id: string }) => f.id)).toEqual([fn.id])
        expect(list.body.meta).toMatchObject({ total: 1 })

        // A rename is not a redeploy; code or secrets are.
        const renamed = yield* call("PATCH", `/v1/functions/${fn.id}`, { token: org.token, body: { name: `${name}-x` } })
        expect(renamed.body.data).toMatchObject({ name: `${name}-x`, version: 1 })
        const noSecret = yield* call("PATCH", `/v1/functions/${fn.id}`, { token: org.token, body: { secrets: { API_TOKEN: null, NEW_ONE: "v" } } })
        expect(noSecret.body.data).toMatchObject({ version: 2, secret_names: ["GREETING", "NEW_ONE"] })

        const dup = yield* call("POST", "/v1/functions", { token: org.token, body: { name: `${name}-x`, code: OK_CODE } })
        expect(dup.status).toBe(409)
        expect(dup.body.error.code).toBe("conflict")

        const other = yield* newOrg()
        expect((yield* call("GET", `/v1/functions/${fn.id}`, { token: other.token })).status).toBe(404)
        expect((yield* call("DELETE", `/v1/functions/${fn.id}`, { token: other.token })).status).toBe(404)

        // A route aimed at the function (it creates the route-target endpoint) goes with it.
        const route = yield* call("POST", "/v1/routes", {
          token: org.token,
          body: { pattern: org.inbox, function_id: fn.id }
        })
        expect(route.status, route.text).toBe(201)
        const removed = yield* call("DELETE", `/v1/functions/${fn.id}`, { token: org.token })
        expect(removed.status).toBe(200)
        expect((yield* call("GET", `/v1/functions/${fn.id}`, { token: org.token })).status).toBe(404)
        expect((yield* call("GET", "/v1/routes", { token: org.token })).body.data).toEqual([])
        expect((yield* call("GET", "/v1/endpoints", { token: org.token })).body.data).toEqual([])
      }))

    it.effect("rejects modules workerd cannot load, with workerd's message", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const cases: Array<[string, string]> = [
          ["export default { async fetch( {", "SyntaxError"],
          ["export default { hello: 1 }", "no fetch(request, env) method"],
          ["throw new Error('broken at load')", "broken at load"],
          ["import x from 'left-pad'; export default { fetch() {} }", "No such module"]
        ]
        for (const [code, message] of cases) {
          const r = yield* call("POST", "/v1/functions", { token: org.token, body: { name: uniqueName("bad"), code } })
          expect(r.status, code).toBe(400)
          expect(r.body.error.code).toBe("validation_error")
          expect(r.body.error.message).toContain("code:")
          expect(r.body.error.message).toContain(message)
        }
        const fn = yield* deploy(org.token, OK_CODE)
        const badPatch = yield* call("PATCH", `/v1/functions/${fn.id}`, { token: org.token, body: { code: "export default 42" } })
        expect(badPatch.status).toBe(400)
        expect((yield* call("GET", `/v1/functions/${fn.id}`, { token: org.token })).body.data).toMatchObject({ version: 1, code: OK_CODE })
        expect((yield* call("GET", "/v1/functions", { token: org.token })).body.meta.total).toBe(1)
      }))

    it.effect("validates names, secrets, sizes and bodies", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const bodies: Array<[unknown, string]> = [
          [{ name: "Upper", code: OK_CODE }, "name"],
          [{ name: "x".repeat(65), code: OK_CODE }, "name"],
          [{ name: "ok", code: "" }, "code"],
          [{ name: "ok" }, "code"],
          [{ name: "ok", code: OK_CODE, secrets: { lower: "x" } }, "secrets.lower"],
          [{ name: "ok", code: OK_CODE, secrets: { MEMORY: "x" } }, "secrets.MEMORY"],
          [{ name: "ok", code: OK_CODE, secrets: { BIG: "x".repeat(8 * 1024 + 1) } }, "secrets.BIG"],
          [{ name: "ok", code: OK_CODE, secrets: Object.fromEntries(Array.from({ length: 51 }, (_, i) => [`S${i}`, "v"])) }, "secrets"],
          [{ name: "ok", code: `${OK_CODE}\n//${"x".repeat(1024 * 1024)}` }, "code"],
          [{ name: "ok", code: OK_CODE, extra: 1 }, "extra"]
        ]
        for (const [body, field] of bodies) {
          const r = yield* call("POST", "/v1/functions", { token: org.token, body })
          expect(r.status, JSON.stringify(body).slice(0, 80)).toBe(400)
          expect(r.body.error.code).toBe("validation_error")
          expect(r.body.error.message).toContain(field)
        }
        const fn = yield* deploy(org.token, OK_CODE)
        const empty = yield* call("PATCH", `/v1/functions/${fn.id}`, { token: org.token, body: {} })
        expect(empty.status).toBe(400)
        // A function is named by id or name: a reference that is neither is 400, an unknown name 404.
        expect((yield* call("GET", "/v1/functions/Not%20a%20name", { token: org.token })).status).toBe(400)
        expect((yield* call("GET", "/v1/functions/not-a-uuid", { token: org.token })).status).toBe(404)
        expect((yield* call("GET", `/v1/functions/${crypto.randomUUID()}`, { token: org.token })).status).toBe(404)
        const rows = yield* Effect.flatMap(SqlClient.SqlClient, (sql) =>
          sql<{ n: number }>`SELECT count(*)::int AS n FROM functions WHERE org_id = ${org.orgId}`.pipe(Effect.orDie))
        expect(rows[0]!.n).toBe(1)
      }))

    it.effect("needs the functions entitlement", () =>
      Effect.gen(function*() {
        const org = yield* newOrg("agent")
        for (const [method, path, body] of [
          ["POST", "/v1/functions", { name: "nope", code: OK_CODE }],
          ["GET", "/v1/functions", undefined],
          ["GET", `/v1/functions/${crypto.randomUUID()}`, undefined],
          ["POST", `/v1/functions/${crypto.randomUUID()}/invoke`, {}]
        ] as const) {
          const r = yield* call(method, path, { token: org.token, ...(body !== undefined ? { body } : {}) })
          expect(r.status, `${method} ${path}`).toBe(403)
          expect(r.body.error.code).toBe("forbidden")
          expect(r.body.error.details).toMatchObject({ required_plan: "developer", missing_entitlement: "functions" })
          // The way up, with its command.
          expect(r.body.error.details.hint).toContain("mailroom claim --email")
        }
      }))

    it.effect("a function endpoint or a route must name an existing function of the organization", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const missing = yield* call("POST", "/v1/endpoints", { token: org.token, body: { kind: "function", function_id: crypto.randomUUID() } })
        expect(missing.status).toBe(404)
        expect(missing.body.error.code).toBe("not_found")
        const route = yield* call("POST", "/v1/routes", { token: org.token, body: { pattern: org.inbox, function_id: crypto.randomUUID() } })
        expect(route.status).toBe(404)
        const other = yield* newOrg()
        const theirs = yield* deploy(other.token, OK_CODE)
        expect((yield* call("POST", "/v1/endpoints", { token: org.token, body: { kind: "function", function_id: theirs.id } })).status).toBe(404)
        const mine = yield* deploy(org.token, OK_CODE)
        const ep = yield* call("POST", "/v1/endpoints", { token: org.token, body: { kind: "function", function_id: mine.id, is_route_target: true } })
        expect(ep.status).toBe(201)
        expect((yield* call("GET", `/v1/functions/${mine.id}`, { token: org.token })).body.data.endpoint_id).toBe(ep.body.data.id)
        // Deleting the function deactivates its endpoint.
        expect((yield* call("DELETE", `/v1/functions/${mine.id}`, { token: org.token })).status).toBe(200)
        const eps = yield* call("GET", "/v1/endpoints", { token: org.token })
        expect(eps.body.data.map((e: { id: string }) => e.id)).not.toContain(ep.body.data.id)
      }))
  })

  describe("invoke", () => {
    it.effect("runs a synthetic email.received and records the invocation", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const fn = yield* deploy(org.token, OK_CODE, { GREETING: "hello-secret-value" })
        const r = yield* call("POST", `/v1/functions/${fn.id}/invoke`, { token: org.token, body: {} })
        expect(r.status, r.text).toBe(200)
        expect(r.body.data).toMatchObject({ status: "ok", status_code: 200, error: null })
        expect(JSON.parse(r.body.data.response_body)).toEqual({ seen: "email.received", greeting: "[secret GREETING]" })
        expect(r.body.data.logs).toContain(`got email.received for ${org.inbox}`)
        const custom = yield* call("POST", `/v1/functions/${fn.id}/invoke`, {
          token: org.token,
          body: { event: { id: "evt_custom", event: "email.bounced", email: { recipient: "x@y.z" } } }
        })
        expect(JSON.parse(custom.body.data.response_body).seen).toBe("email.bounced")

        const list = yield* call("GET", `/v1/functions/${fn.id}/invocations`, { token: org.token })
        expect(list.status).toBe(200)
        expect(list.body.meta.total).toBe(2)
        const [newest, oldest] = list.body.data
        expect(newest).toMatchObject({ event_id: "evt_custom", event: "email.bounced", status: "ok", delivery_id: null, function_version: 1 })
        expect(oldest.event).toBe("email.received")
        expect(oldest.logs).toContain("got email.received")
        const page = yield* call("GET", `/v1/functions/${fn.id}/invocations?limit=1`, { token: org.token })
        expect(page.body.data).toHaveLength(1)
        const next = yield* call("GET", `/v1/functions/${fn.id}/invocations?limit=1&cursor=${page.body.meta.cursor}`, { token: org.token })
        expect(next.body.data[0].id).toBe(oldest.id)
      }))

    it.effect("reports thrown exceptions as function_error and other statuses as http_<status>", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const thrower = yield* deploy(org.token, `export default { async fetch() { console.log("before"); throw new TypeError("bad input here") } }`)
        const r = yield* call("POST", `/v1/functions/${thrower.id}/invoke`, { token: org.token, body: {} })
        expect(r.body.data).toMatchObject({ status: "function_error", status_code: null })
        expect(r.body.data.error).toContain("TypeError: bad input here")
        expect(r.body.data.logs).toContain("before")
        const teapot = yield* deploy(org.token, `export default { async fetch() { return new Response("short and stout", { status: 418 }) } }`)
        const t = yield* call("POST", `/v1/functions/${teapot.id}/invoke`, { token: org.token, body: {} })
        expect(t.body.data).toMatchObject({ status: "http_418", status_code: 418, response_body: "short and stout" })
        const notResponse = yield* deploy(org.token, `export default { async fetch() { return "text" } }`)
        const n = yield* call("POST", `/v1/functions/${notResponse.id}/invoke`, { token: org.token, body: {} })
        expect(n.body.data.status).toBe("function_error")
        expect(n.body.data.error).toContain("must return a Response")
      }))

    it.effect("a redeploy changes code and secrets for the next invocation; secrets never leave in clear", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const code = (tag: string) => `export default { async fetch(req, env) {
          console.log("secret is", env.TOKEN);
          return new Response(JSON.stringify({ tag: "${tag}", sha: Array.from(new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(env.TOKEN ?? "")))).map((b) => b.toString(16).padStart(2, "0")).join("") }));
        } }`
        const sha = (s: string) => Effect.promise(async () =>
          Buffer.from(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(s))).toString("hex"))
        const fn = yield* deploy(org.token, code("v1"), { TOKEN: "first-secret-value" })
        const a = yield* call("POST", `/v1/functions/${fn.id}/invoke`, { token: org.token, body: {} })
        expect(JSON.parse(a.body.data.response_body)).toEqual({ tag: "v1", sha: yield* sha("first-secret-value") })
        const patched = yield* call("PATCH", `/v1/functions/${fn.id}`, {
          token: org.token,
          body: { code: code("v2"), secrets: { TOKEN: "second-secret-value" } }
        })
        expect(patched.body.data.version).toBe(2)
        const b = yield* call("POST", `/v1/functions/${fn.id}/invoke`, { token: org.token, body: {} })
        expect(JSON.parse(b.body.data.response_body)).toEqual({ tag: "v2", sha: yield* sha("second-secret-value") })
        expect(b.body.data.logs).toContain("secret is [secret TOKEN]")
        const invocations = yield* call("GET", `/v1/functions/${fn.id}/invocations`, { token: org.token })
        expect(invocations.body.data.map((i: { function_version: number }) => i.function_version)).toEqual([2, 1])
        for (const text of [a.text, b.text, patched.text, invocations.text, (yield* call("GET", `/v1/functions/${fn.id}`, { token: org.token })).text]) {
          expect(text).not.toContain("first-secret-value")
          expect(text).not.toContain("second-secret-value")
        }
        const sql = yield* SqlClient.SqlClient
        const dump = yield* sql<{ t: string }>`SELECT (SELECT string_agg(f::text, ' ') FROM functions f WHERE org_id = ${org.orgId}) ||
          ' ' || (SELECT string_agg(i::text, ' ') FROM function_invocations i WHERE org_id = ${org.orgId}) AS t`.pipe(Effect.orDie)
        expect(dump[0]!.t).toContain(fn.id)
        expect(dump[0]!.t).not.toContain("second-secret-value")
        expect(dump[0]!.t).not.toContain(Buffer.from("second-secret-value").toString("hex"))
        // Nor in the service's log, which did record the invocations.
        const logged = logLines.join("\n")
        expect(logged).toContain(`/v1/functions/${fn.id}/invoke 200`)
        expect(logged).not.toContain("first-secret-value")
        expect(logged).not.toContain("second-secret-value")
      }))
  })

  describe("delivery through functions", () => {
    it.effect("mail over SMTP reaches the function, which verifies, remembers and calls the service back", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const code = `
          const hex = (buf) => Array.from(new Uint8Array(buf)).map((b) => b.toString(16).padStart(2, "0")).join("");
          export default {
            async fetch(request, env) {
              const raw = await request.text();
              const header = request.headers.get("mailroom-signature") ?? "";
              const t = /t=(\\d+)/.exec(header)?.[1];
              const v1 = /v1=([0-9a-f]{64})/.exec(header)?.[1];
              const key = await crypto.subtle.importKey("raw", new TextEncoder().encode(env.MAILROOM_WEBHOOK_SECRET), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
              const expected = hex(await crypto.subtle.sign("HMAC", key, new TextEncoder().encode(t + "." + raw)));
              if (expected !== v1) return new Response("bad signature", { status: 401 });
              const event = JSON.parse(raw);
              await env.MEMORY.put("last-subject", JSON.stringify(event.email.subject));
              const account = await env.MAILROOM.fetch("/v1/account");
              const me = await account.json();
              await env.ORG_MEMORY.put("org-id", JSON.stringify(me.data.id), { expirationTtl: 3600 });
              console.log("handled", event.id);
              return new Response("ok", { headers: { "Mailroom-Confirmed": "yes" } });
            }
          };`
        const fn = yield* deploy(org.token, code)
        const route = yield* call("POST", "/v1/routes", { token: org.token, body: { pattern: org.inbox, function_id: fn.id } })
        expect(route.status, route.text).toBe(201)
        yield* send({ from: "Ann <ann@example.com>", to: org.inbox, subject: "Invoice 42", text: "please pay" })

        const delivery = yield* until("a confirmed delivery", Effect.map(
          call("GET", "/v1/webhooks/deliveries", { token: org.token }),
          (r) => r.body.data.find((d: { status: string }) => d.status === "header_confirmed")
        ))
        expect(delivery).toMatchObject({ endpoint_url: `function://${fn.id}`, attempt_count: 1 })
        const invocations = yield* call("GET", `/v1/functions/${fn.id}/invocations`, { token: org.token })
        expect(invocations.body.data).toHaveLength(1)
        expect(invocations.body.data[0]).toMatchObject({ delivery_id: delivery.id, event: "email.received", status: "ok" })
        expect(invocations.body.data[0].logs).toContain("handled evt_")
        const memory = yield* call("GET", `/v1/functions/${fn.id}/memories/last-subject`, { token: org.token })
        expect(memory.body.data).toMatchObject({ key: "last-subject", value: "Invoice 42", scope: "function", function_id: fn.id })
        const orgMemory = yield* call("GET", "/v1/memories/org-id", { token: org.token })
        expect(orgMemory.body.data).toMatchObject({ value: org.orgId, scope: "org", function_id: null })
        expect(orgMemory.body.data.expires_at).not.toBeNull()
        // The invocation's credential is revoked once it ends.
        const sql = yield* SqlClient.SqlClient
        const live = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM function_tokens WHERE org_id = ${org.orgId}
          AND revoked_at IS NULL`.pipe(Effect.orDie)
        expect(live[0]!.n).toBe(0)
      }))

    it.effect("failed invocations are retried on the delivery schedule with function outcomes", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const fn = yield* deploy(org.token, `export default { async fetch() { throw new Error("always fails") } }`)
        const ep = yield* call("POST", "/v1/endpoints", { token: org.token, body: { kind: "function", function_id: fn.id } })
        expect(ep.status).toBe(201)
        yield* send({ from: "bob@example.com", to: org.inbox, subject: "retry me", text: "x" })
        const failed = yield* until("a failed delivery", Effect.map(
          call("GET", "/v1/webhooks/deliveries", { token: org.token }),
          (r) => r.body.data.find((d: { status: string }) => d.status === "failed")
        ), 30_000)
        expect(failed).toMatchObject({ attempt_count: 3, last_error_code: "function_error" })
        expect(failed.last_error).toContain("always fails")
        const invocations = yield* call("GET", `/v1/functions/${fn.id}/invocations`, { token: org.token })
        expect(invocations.body.data.map((i: { status: string }) => i.status)).toEqual(["function_error", "function_error", "function_error"])
        const started = invocations.body.data.map((i: { started_at: string }) => Date.parse(i.started_at)).reverse()
        expect(started[1] - started[0]).toBeGreaterThanOrEqual(250)
        expect(started[2] - started[1]).toBeGreaterThanOrEqual(550)
        // A redeploy applies to the next attempt: the replay runs the fixed code.
        const fixed = yield* call("PATCH", `/v1/functions/${fn.id}`, {
          token: org.token,
          body: { code: `export default { async fetch() { return new Response("fixed", { headers: { "mailroom-confirmed": "1" } }) } }` }
        })
        expect(fixed.body.data.version).toBe(2)
        const replay = yield* call("POST", `/v1/webhooks/deliveries/${failed.id}/replay`, { token: org.token, body: {} })
        expect(replay.status, replay.text).toBeLessThan(300)
        expect(replay.body.data).toMatchObject({ delivered: 1, failed: 0 })
        const after = yield* call("GET", `/v1/functions/${fn.id}/invocations`, { token: org.token })
        expect(after.body.data[0]).toMatchObject({ status: "ok", function_version: 2, event_id: failed.event_id })
      }))
  })
})
