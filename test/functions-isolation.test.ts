/**
 * What a function cannot do, in real workerd processes: reach loopback, private or metadata
 * addresses or the host's sockets under any spelling (a loopback canary counts connections), act
 * as another organization through MAILROOM or its memory bindings, outlive its wall clock (timers,
 * CPU loops, `waitUntil` work). Memory bombs are in functions-memory.test.ts, under a wall clock long
 * enough that a loaded machine still reaches the memory limit first.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { createServer } from "node:net"
import nodemailer from "nodemailer"
import { Provisioning } from "../src/identity/Provisioning.js"
import { TestServer, testService } from "./support/harness.js"
import { call } from "./support/http.js"
import { deploy, functionsOrg, invoke, marker, workerdWithSecret } from "./support/functions.js"

const TIMEOUT_MS = 3000

const Env = Provisioning.Default.pipe(
  Layer.provideMerge(testService({
    FUNCTION_TIMEOUT: `${TIMEOUT_MS}ms`,
    DELIVERY_RETRY_DELAYS: "300ms,600ms",
    DELIVERY_TIMEOUT: "1s",
    DNS_SERVER: "127.0.0.1:9"
  }))
)

/** A TCP listener on loopback that counts every connection made to it. */
const canary = Effect.acquireRelease(
  Effect.async<{ port: number; count: () => number; close: () => void }>((resume) => {
    let n = 0
    const server = createServer((socket) => {
      n++
      socket.destroy()
    })
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      resume(Effect.succeed({ port, count: () => n, close: () => server.close() }))
    })
  }),
  (c) => Effect.sync(() => c.close())
)

layer(Env, { timeout: 240_000, excludeTestServices: true })("functions isolation", (it) => {
  describe("network", () => {
    it.scoped("every loopback, private and metadata spelling is refused; a loopback canary sees no connection", () =>
      Effect.gen(function*() {
        const org = yield* functionsOrg()
        const server = yield* TestServer
        const c = yield* canary
        const p = c.port
        const targets = [
          `http://127.0.0.1:${p}/`, `http://localhost:${p}/`, `http://[::1]:${p}/`, `http://127.1:${p}/`,
          `http://0.0.0.0:${p}/`, `http://[::ffff:127.0.0.1]:${p}/`, `http://[::ffff:7f00:1]:${p}/`, `http://2130706433:${p}/`,
          `http://0x7f000001:${p}/`, `http://0177.0.0.1:${p}/`, `http://127.0.0.1.nip.io:${p}/`, `http://10.0.0.1:${p}/`,
          `http://192.168.0.1:${p}/`, `http://172.16.0.1:${p}/`, `http://169.254.169.254/latest/meta-data/`,
          `http://[fe80::1]:${p}/`, `http://[fd00::1]:${p}/`, `http://127.0.0.1:${server.port}/v1/account`,
          `http://localhost:${server.port}/v1/health`
        ]
        const code = `import { connect } from "cloudflare:sockets";
          export default { async fetch() {
            const results = {};
            for (const t of ${JSON.stringify(targets)}) {
              try {
                const r = await fetch(t, { signal: AbortSignal.timeout(400) });
                results[t] = "reached " + r.status;
              } catch (e) { results[t] = "refused"; }
            }
            for (const [host, port] of [["127.0.0.1", ${p}], ["localhost", ${p}], ["::1", ${p}], ["127.0.0.1", ${server.port}]]) {
              try {
                const s = connect({ hostname: host, port });
                await Promise.race([s.opened, new Promise((_, no) => setTimeout(() => no(new Error("slow")), 400))]);
                results["socket " + host + ":" + port] = "reached";
              } catch (e) { results["socket " + host + ":" + port] = "refused"; }
            }
            results.process = typeof process;
            return new Response(JSON.stringify(results));
          } }`
        const fn = yield* deploy(org.token, code)
        const r = yield* invoke(org.token, fn.id)
        expect(r.status, r.error ?? "").toBe("ok")
        const results = JSON.parse(r.response_body) as Record<string, string>
        for (const [target, outcome] of Object.entries(results)) {
          if (target === "process") expect(outcome).toBe("undefined")
          else expect(outcome, target).toBe("refused")
        }
        expect(Object.keys(results)).toHaveLength(targets.length + 5)
        expect(c.count()).toBe(0)
      }))
  })

  describe("identity", () => {
    it.effect("MAILROOM acts as the function's organization only, whatever the tenant sends", () =>
      Effect.gen(function*() {
        const org = yield* functionsOrg()
        const other = yield* functionsOrg()
        const code = `export default { async fetch(req, env) {
          const out = {};
          const plain = await env.MAILROOM.fetch("/v1/account");
          out.plain = (await plain.json()).data.id;
          const forged = await env.MAILROOM.fetch("https://evil.example/v1/account", { headers: { authorization: "Bearer " + env.OTHER_KEY } });
          out.forged = (await forged.json()).data.id;
          const viaRequest = await env.MAILROOM.fetch(new Request("http://x/v1/account", { headers: { Authorization: "Bearer " + env.OTHER_KEY } }));
          out.viaRequest = (await viaRequest.json()).data.id;
          try { await env.MAILROOM.fetch("/device"); out.outside = "reached"; } catch (e) { out.outside = "refused"; }
          out.envKeys = Object.keys(env).sort();
          return new Response(JSON.stringify(out));
        } }`
        const fn = yield* deploy(org.token, code, { OTHER_KEY: other.token })
        const r = yield* invoke(org.token, fn.id)
        expect(r.status, r.error ?? r.logs).toBe("ok")
        const out = JSON.parse(r.response_body)
        expect(out).toMatchObject({ plain: org.orgId, forged: org.orgId, viaRequest: org.orgId, outside: "refused" })
        expect(out.envKeys).toEqual(["MAILROOM", "MAILROOM_WEBHOOK_SECRET", "MEMORY", "ORG_MEMORY", "OTHER_KEY", "SERVICE_WEBHOOK_SECRET"])
        // After the invocation its credential opens nothing.
        const sql = yield* SqlClient.SqlClient
        const tokens = yield* sql<{ revoked: boolean }>`SELECT revoked_at IS NOT NULL AS revoked FROM function_tokens
          WHERE org_id = ${org.orgId}`.pipe(Effect.orDie)
        expect(tokens.length).toBeGreaterThan(0)
        expect(tokens.every((t) => t.revoked)).toBe(true)
      }))

    it.effect("memory bindings see only their own scope, whatever the key", () =>
      Effect.gen(function*() {
        const org = yield* functionsOrg()
        const other = yield* functionsOrg()
        expect((yield* call("PUT", "/v1/memories/shared-name", { token: other.token, body: { value: "theirs" } })).status).toBe(201)
        expect((yield* call("PUT", "/v1/memories/x", { token: other.token, body: { value: "their x" } })).status).toBe(201)
        const theirFn = yield* deploy(other.token, `export default { async fetch() { return new Response("") } }`)
        expect((yield* call("PUT", `/v1/functions/${theirFn.id}/memories/x`, { token: other.token, body: { value: "their fn x" } })).status).toBe(201)
        const code = `export default { async fetch(req, env) {
          const out = {};
          out.shared = await env.ORG_MEMORY.get("shared-name");
          for (const k of ["../x", "../../x", "%2e%2e/x", "/x", "x/../../${other.orgId}/x", "..%2F${theirFn.id}%2Fx"]) {
            out["get " + k] = await env.MEMORY.get(k);
            await env.MEMORY.put(k, JSON.stringify("mine " + k));
          }
          out.orgList = (await env.ORG_MEMORY.list()).keys.map((k) => k.name);
          out.fnList = (await env.MEMORY.list()).keys.map((k) => k.name);
          try { await env.MEMORY.put("not-json", "plain text"); out.notJson = "stored"; } catch (e) { out.notJson = "rejected"; }
          return new Response(JSON.stringify(out));
        } }`
        const fn = yield* deploy(org.token, code)
        const r = yield* invoke(org.token, fn.id)
        expect(r.status, r.error ?? r.logs).toBe("ok")
        const out = JSON.parse(r.response_body)
        expect(out.shared).toBeNull()
        for (const [k, v] of Object.entries(out)) if (k.startsWith("get ")) expect(v, k).toBeNull()
        expect(out.orgList).toEqual([])
        expect(out.fnList).toHaveLength(6)
        expect(out.notJson).toBe("rejected")
        // Their items are untouched, and the crafted keys are ordinary keys of this function.
        expect((yield* call("GET", "/v1/memories/x", { token: other.token })).body.data.value).toBe("their x")
        expect((yield* call("GET", `/v1/functions/${theirFn.id}/memories/x`, { token: other.token })).body.data.value).toBe("their fn x")
        const mine = yield* call("GET", `/v1/functions/${fn.id}/memories/${encodeURIComponent("../x")}`, { token: org.token })
        expect(mine.body.data).toMatchObject({ key: "../x", value: "mine ../x", function_id: fn.id })
        expect((yield* call("GET", `/v1/functions/${fn.id}/memories/not-json`, { token: org.token })).status).toBe(404)
        expect((yield* call("GET", `/v1/functions/${fn.id}/memories`, { token: other.token })).status).toBe(404)
      }))
  })

  describe("concurrency", () => {
    it.effect("at most 4 invocations of one organization run at once; the rest wait their turn", () =>
      Effect.gen(function*() {
        const org = yield* functionsOrg()
        const fn = yield* deploy(org.token, `export default { async fetch() {
          const start = Date.now();
          await new Promise((r) => setTimeout(r, 700));
          return new Response(JSON.stringify([start, Date.now()]));
        } }`)
        const results = yield* Effect.all(Array.from({ length: 6 }, () => invoke(org.token, fn.id)), { concurrency: "unbounded" })
        const spans = results.map((r) => {
          expect(r.status).toBe("ok")
          return JSON.parse(r.response_body) as [number, number]
        })
        const overlapAt = (t: number) => spans.filter(([a, b]) => a <= t && t < b).length
        const most = Math.max(...spans.map(([a]) => overlapAt(a)))
        expect(most).toBeLessThanOrEqual(4)
        // Two had to wait for a slot: they started after another had finished.
        const ends = spans.map(([, b]) => b).sort((x, y) => x - y)
        expect(spans.filter(([a]) => a >= ends[0]!).length).toBeGreaterThanOrEqual(2)
      }))
  })

  describe("concurrency across organizations", () => {
    it.effect("at most FUNCTION_CONCURRENCY (8) invocations run at once in the process, whatever the organizations", () =>
      Effect.gen(function*() {
        const code = `export default { async fetch() {
          const start = Date.now();
          await new Promise((r) => setTimeout(r, 900));
          return new Response(JSON.stringify([start, Date.now()]));
        } }`
        const orgs = yield* Effect.all([functionsOrg(), functionsOrg(), functionsOrg()])
        const fns = yield* Effect.forEach(orgs, (o) => deploy(o.token, code))
        // 3 organizations × 4 (each at its own cap) = 12 wanted at once; only 8 may run.
        const calls = orgs.flatMap((o, i) => Array.from({ length: 4 }, () => invoke(o.token, fns[i]!.id)))
        const results = yield* Effect.all(calls, { concurrency: "unbounded" })
        const spans = results.map((r) => {
          expect(r.status).toBe("ok")
          return JSON.parse(r.response_body) as [number, number]
        })
        const overlapAt = (t: number) => spans.filter(([a, b]) => a <= t && t < b).length
        expect(Math.max(...spans.map(([a]) => overlapAt(a)))).toBeLessThanOrEqual(8)
        const ends = spans.map(([, b]) => b).sort((x, y) => x - y)
        expect(spans.filter(([a]) => a >= ends[0]!).length).toBeGreaterThanOrEqual(4)
      }))
  })

  describe("wall clock and crashes", () => {
    it.effect("a long timer, a CPU loop and endless waitUntil work are stopped at the deadline and their processes are gone", () =>
      Effect.gen(function*() {
        const org = yield* functionsOrg()
        const mark = marker()
        const timer = yield* deploy(org.token, `export default { async fetch() { await new Promise((r) => setTimeout(r, 600000)); return new Response("late") } }`, { MARK: mark })
        const spin = yield* deploy(org.token, `export default { async fetch() { for (;;) {} } }`, { MARK: mark })
        const leak = yield* deploy(org.token, `export default { async fetch(req, env, ctx) {
          ctx.waitUntil((async () => { for (;;) await new Promise((r) => setTimeout(r, 5)); })());
          return new Response("answered early");
        } }`, { MARK: mark })
        const results = yield* Effect.all([timer, spin, leak].map((f) => invoke(org.token, f.id)), { concurrency: "unbounded" })
        for (const r of results) {
          expect(r.status).toBe("function_timeout")
          expect(r.duration_ms).toBeGreaterThanOrEqual(TIMEOUT_MS - 50)
          expect(r.duration_ms).toBeLessThan(TIMEOUT_MS + 1000)
          expect(r.elapsed).toBeLessThan(TIMEOUT_MS + 2500)
        }
        expect(workerdWithSecret(mark)).toEqual([])
        const listed = yield* call("GET", `/v1/functions/${spin.id}/invocations`, { token: org.token })
        expect(listed.body.data[0]).toMatchObject({ status: "function_timeout", status_code: null })
      }))

    it.effect("a version's process serves its next invocations, none of an invocation's stray work reaches the next, and a redeploy gets a new process", () =>
      Effect.gen(function*() {
        const org = yield* functionsOrg()
        const mark = marker()
        const code = (label: string) => `let n = 0;
          export default { async fetch(req, env) {
            n++;
            // Neither awaited nor passed to waitUntil: it must not run once the invocation has ended.
            if (n === 1) setTimeout(() => env.MEMORY.put("stray", JSON.stringify(n)), 1000);
            return new Response("${label} " + n);
          } }`
        const fn = yield* deploy(org.token, code("v1"), { MARK: mark })
        const stray = call("GET", `/v1/functions/${fn.id}/memories/stray`, { token: org.token })
        expect((yield* invoke(org.token, fn.id)).response_body).toBe("v1 1")
        yield* Effect.sleep("2500 millis")
        expect((yield* stray).status).toBe(404)
        // The same isolate (its counter went on), and the timer left by the first did not run in it either.
        expect((yield* invoke(org.token, fn.id)).response_body).toBe("v1 2")
        expect((yield* stray).status).toBe(404)
        expect(workerdWithSecret(mark)).toHaveLength(1)
        const patched = yield* call("PATCH", `/v1/functions/${fn.id}`, { token: org.token, body: { code: code("v2") } })
        expect(patched.status, patched.text).toBe(200)
        expect((yield* invoke(org.token, fn.id)).response_body).toBe("v2 1")
      }))

    it.effect("an invocation past its wall clock stops its process: a concurrent invocation of the same version ends with it as function_crashed", () =>
      Effect.gen(function*() {
        const org = yield* functionsOrg()
        const mark = marker()
        const fn = yield* deploy(org.token, `export default { async fetch(req) {
          const { mode } = await req.json();
          if (mode === "spin") for (;;) {}
          await new Promise((r) => setTimeout(r, 60000));
          return new Response("late");
        } }`, { MARK: mark })
        const run = (mode: string) =>
          Effect.map(call("POST", `/v1/functions/${fn.id}/invoke`, {
            token: org.token,
            body: { event: { mode } },
            headers: { "idempotency-key": crypto.randomUUID() }
          }), (r) => r.body.data as { status: string; error: string | null })
        // Whichever reaches its deadline first (the spinning one holds the process's only thread, so
        // the other cannot finish either) stops the process; the other ends with it.
        const both = yield* Effect.all([run("spin"), Effect.zipRight(Effect.sleep("300 millis"), run("wait"))], { concurrency: "unbounded" })
        const timedOut = both.filter((r) => r.status === "function_timeout")
        const crashed = both.filter((r) => r.status === "function_crashed")
        expect(timedOut).toHaveLength(1)
        expect(crashed).toHaveLength(1)
        expect(crashed[0]!.error).toContain("another invocation of this function version passed its")
        expect(workerdWithSecret(mark)).toEqual([])
      }))

    it.effect("a delivery to a function past its wall clock is function_timeout on every attempt of the schedule", () =>
      Effect.gen(function*() {
        const org = yield* functionsOrg()
        const server = yield* TestServer
        const mark = marker()
        const spin = yield* deploy(org.token, `export default { async fetch() { for (;;) {} } }`, { MARK: mark })
        expect((yield* call("POST", "/v1/endpoints", { token: org.token, body: { kind: "function", function_id: spin.id } })).status).toBe(201)
        yield* Effect.promise(async () => {
          const transport = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
          try {
            await transport.sendMail({ from: "x@example.com", to: org.inbox, subject: "spin", text: "spin" })
          } finally {
            transport.close()
          }
        })
        let failed: { attempt_count: number; last_error_code: string; duration_ms: number } | undefined
        for (let i = 0; i < 200 && failed === undefined; i++) {
          const list = yield* call("GET", "/v1/webhooks/deliveries", { token: org.token })
          failed = list.body.data.find((d: { status: string }) => d.status === "failed")
          if (failed === undefined) yield* Effect.sleep("100 millis")
        }
        expect(failed).toMatchObject({ attempt_count: 3, last_error_code: "function_timeout" })
        const invocations = yield* call("GET", `/v1/functions/${spin.id}/invocations`, { token: org.token })
        expect(invocations.body.data.map((i: { status: string }) => i.status)).toEqual(["function_timeout", "function_timeout", "function_timeout"])
        expect(workerdWithSecret(mark)).toEqual([])
      }))
  })
})
