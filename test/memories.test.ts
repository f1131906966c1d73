/**
 * Memories over real HTTP: both scopes, put 201/200, get, list in byte order with prefix and cursor,
 * delete, TTL expiry, key and value limits, the 10,000-key cap, cross-organization invisibility,
 * storage accounting, and the same items seen through a function's KV bindings in workerd.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { Provisioning } from "../src/identity/Provisioning.js"
import { testService } from "./support/harness.js"
import { call } from "./support/http.js"

const Env = Provisioning.Default.pipe(Layer.provideMerge(testService({ FUNCTION_TIMEOUT: "5s" })))

const newOrg = (plan: "agent" | "developer" = "developer") =>
  Effect.gen(function*() {
    const p = yield* Provisioning
    const org = yield* p.createOrganization({ name: "Mem", plan })
    const key = yield* p.issueApiKey(org.id)
    return { orgId: org.id, token: key.apiKey }
  })

const path = (key: string) => `/v1/memories/${encodeURIComponent(key)}`

let seq = 0
const deploy = (token: string, code: string) =>
  Effect.gen(function*() {
    const r = yield* call("POST", "/v1/functions", { token, body: { name: `mem-${++seq}-${Math.random().toString(36).slice(2, 7)}`, code } })
    expect(r.status, r.text).toBe(201)
    return r.body.data as { id: string }
  })

layer(Env, { timeout: 120_000, excludeTestServices: true })("memories", (it) => {
  describe("organization scope", () => {
    it.effect("put creates (201) then replaces (200); get, delete and 404 afterwards", () =>
      Effect.gen(function*() {
        const { token } = yield* newOrg()
        const value = { b: 1, a: [1, "two", null, { deep: true }], "ü": "ünïcode" }
        const created = yield* call("PUT", path("profile"), { token, body: { value } })
        expect(created.status, created.text).toBe(201)
        expect(Object.keys(created.body.data).sort()).toEqual(
          ["created_at", "expires_at", "function_id", "key", "scope", "size_bytes", "updated_at", "value"]
        )
        expect(created.body.data).toMatchObject({ key: "profile", value, scope: "org", function_id: null, expires_at: null })
        expect(created.body.data.size_bytes).toBe(Buffer.byteLength(JSON.stringify(value)))
        const replaced = yield* call("PUT", path("profile"), { token, body: { value: "second" } })
        expect(replaced.status).toBe(200)
        expect(replaced.body.data).toMatchObject({ value: "second", created_at: created.body.data.created_at })
        for (const v of [null, 0, false, "", [], {}]) {
          expect((yield* call("PUT", path("falsy"), { token, body: { value: v } })).body.data.value).toEqual(v)
        }
        const got = yield* call("GET", path("profile"), { token })
        expect(got.body.data.value).toBe("second")
        const removed = yield* call("DELETE", path("profile"), { token })
        expect(removed.status).toBe(200)
        expect(removed.body.data).toMatchObject({ key: "profile", value: "second" })
        expect((yield* call("GET", path("profile"), { token })).body.error.code).toBe("not_found")
        expect((yield* call("DELETE", path("profile"), { token })).status).toBe(404)
      }))

    it.effect("keys are any UTF-8 without control characters, percent-encoded in the path", () =>
      Effect.gen(function*() {
        const { token } = yield* newOrg()
        for (const key of ["a/b/c", "../x", "with space", "ключ", "emoji 📬", "q?x=1&y#z", "%41", "k".repeat(512)]) {
          const r = yield* call("PUT", path(key), { token, body: { value: key } })
          expect(r.status, key).toBe(201)
          expect(r.body.data.key).toBe(key)
          expect((yield* call("GET", path(key), { token })).body.data.value).toBe(key)
        }
        for (const key of ["k".repeat(513), "é".repeat(257), "tab\there", "nul\u0000", "del\u007f"]) {
          const r = yield* call("PUT", path(key), { token, body: { value: 1 } })
          expect(r.status, JSON.stringify(key)).toBe(400)
          expect(r.body.error.code).toBe("validation_error")
          expect(r.body.error.message).toMatch(/^key: /)
        }
      }))

    it.effect("rejects bad bodies and values over 64 KiB, storing nothing", () =>
      Effect.gen(function*() {
        const { token } = yield* newOrg()
        const bodies: Array<[unknown, string]> = [
          [{}, "value"],
          [{ value: 1, ttl_seconds: 0 }, "ttl_seconds"],
          [{ value: 1, ttl_seconds: 1.5 }, "ttl_seconds"],
          [{ value: 1, extra: true }, "extra"],
          [{ value: "x".repeat(64 * 1024) }, "value"]
        ]
        for (const [body, field] of bodies) {
          const r = yield* call("PUT", path("k"), { token, body })
          expect(r.status, JSON.stringify(body).slice(0, 60)).toBe(400)
          expect(r.body.error.message).toContain(field)
        }
        expect((yield* call("PUT", path("k"), { token, raw: "{not json" })).status).toBe(400)
        expect((yield* call("GET", "/v1/memories", { token })).body.meta.total).toBe(0)
        // Exactly 64 KiB serialized is allowed.
        const fits = "x".repeat(64 * 1024 - 2)
        expect((yield* call("PUT", path("k"), { token, body: { value: fits } })).status).toBe(201)
      }))

    it.effect("lists keys in byte order with prefix, limit and cursor", () =>
      Effect.gen(function*() {
        const { token } = yield* newOrg()
        const keys = ["b", "a/2", "a/10", "a/1", "B", "é", "z", "a"]
        for (const k of keys) yield* call("PUT", path(k), { token, body: { value: k } })
        const all = yield* call("GET", "/v1/memories", { token })
        expect(all.body.data.map((i: { key: string }) => i.key)).toEqual([...keys].sort((x, y) => Buffer.compare(Buffer.from(x), Buffer.from(y))))
        expect(Object.keys(all.body.data[0]).sort()).toEqual(["expires_at", "key", "size_bytes", "updated_at"])
        expect(all.body.meta).toMatchObject({ total: 8, cursor: null })
        const seen: Array<string> = []
        let cursor: string | null = null
        do {
          const page: { body: { data: Array<{ key: string }>; meta: { cursor: string | null; total: number } } } = yield* call(
            "GET",
            `/v1/memories?prefix=a&limit=2${cursor ? `&cursor=${cursor}` : ""}`,
            { token }
          )
          expect(page.body.meta.total).toBe(4)
          seen.push(...page.body.data.map((i) => i.key))
          cursor = page.body.meta.cursor
        } while (cursor !== null)
        expect(seen).toEqual(["a", "a/1", "a/10", "a/2"])
        expect((yield* call("GET", "/v1/memories?prefix=a%2F1", { token })).body.data.map((i: { key: string }) => i.key)).toEqual(["a/1", "a/10"])
        expect((yield* call("GET", "/v1/memories?prefix=%25", { token })).body.data).toEqual([])
        expect((yield* call("GET", "/v1/memories?cursor=garbage", { token })).status).toBe(400)
        expect((yield* call("GET", "/v1/memories?limit=0", { token })).status).toBe(400)
      }))

    it.effect("an expired item is gone for every read and a new put creates it again", () =>
      Effect.gen(function*() {
        const { token } = yield* newOrg()
        const r = yield* call("PUT", path("short"), { token, body: { value: "soon gone", ttl_seconds: 1 } })
        expect(r.status).toBe(201)
        expect(Date.parse(r.body.data.expires_at) - Date.parse(r.body.data.updated_at)).toBe(1000)
        yield* call("PUT", path("long"), { token, body: { value: "stays", ttl_seconds: 3600 } })
        expect((yield* call("GET", path("short"), { token })).status).toBe(200)
        yield* Effect.sleep("1200 millis")
        expect((yield* call("GET", path("short"), { token })).status).toBe(404)
        expect((yield* call("GET", "/v1/memories", { token })).body.data.map((i: { key: string }) => i.key)).toEqual(["long"])
        expect((yield* call("DELETE", path("short"), { token })).status).toBe(404)
        expect((yield* call("PUT", path("short"), { token, body: { value: "again" } })).status).toBe(201)
      }))

    it.effect("another organization sees none of it; memories count toward storage", () =>
      Effect.gen(function*() {
        const a = yield* newOrg()
        const b = yield* newOrg()
        const before = (yield* call("GET", "/v1/account/storage", { token: a.token })).body.data.used_bytes as number
        yield* call("PUT", path("private"), { token: a.token, body: { value: "x".repeat(10_000) } })
        expect((yield* call("GET", path("private"), { token: b.token })).status).toBe(404)
        expect((yield* call("DELETE", path("private"), { token: b.token })).status).toBe(404)
        expect((yield* call("GET", "/v1/memories", { token: b.token })).body.data).toEqual([])
        expect((yield* call("PUT", path("private"), { token: b.token, body: { value: "mine" } })).status).toBe(201)
        expect((yield* call("GET", path("private"), { token: a.token })).body.data.value).toBe("x".repeat(10_000))
        const after = (yield* call("GET", "/v1/account/storage", { token: a.token })).body.data.used_bytes as number
        expect(after - before).toBe(10_002 + "private".length)
      }))

    it.effect("a scope holds at most 10,000 keys (409); replacing an existing key still works", () =>
      Effect.gen(function*() {
        const { orgId, token } = yield* newOrg()
        const sql = yield* SqlClient.SqlClient
        yield* sql`INSERT INTO memories (org_id, key, value, size_bytes)
          SELECT ${orgId}, 'k' || g, '1', 1 FROM generate_series(1, 10000) g`.pipe(Effect.orDie)
        const over = yield* call("PUT", path("one-more"), { token, body: { value: 1 } })
        expect(over.status).toBe(409)
        expect(over.body.error.code).toBe("conflict")
        expect((yield* call("PUT", path("k1"), { token, body: { value: 2 } })).status).toBe(200)
        expect((yield* call("DELETE", path("k2"), { token })).status).toBe(200)
        expect((yield* call("PUT", path("one-more"), { token, body: { value: 1 } })).status).toBe(201)
      }))
  })

  describe("storage quota", () => {
    it.effect("a full organization's put is 409 with reason storage_quota_exceeded through the API and the KV binding; nothing stored", () =>
      Effect.gen(function*() {
        const { orgId, token } = yield* newOrg()
        const sql = yield* SqlClient.SqlClient
        const fn = yield* deploy(token, `export default { async fetch(req, env) {
          try { await env.ORG_MEMORY.put("from-fn", JSON.stringify("x".repeat(2000))); return new Response("stored"); }
          catch (e) { return new Response("rejected: " + e.message); }
        } }`)
        // Stored mail (as earlier deliveries would have left it) up to 1 KB short of the quota.
        const quota = Number((yield* sql<{ q: string }>`SELECT storage_quota_bytes('developer')::bigint AS q`)[0]!.q)
        const used = (yield* call("GET", "/v1/account/storage", { token })).body.data.used_bytes as number
        yield* sql`INSERT INTO emails (org_id, recipient, size_bytes, event_type, status)
          VALUES (${orgId}, 'filler@agents.localhost', ${quota - used - 1000}, 'email.received', 'accepted')`
        const full = yield* call("PUT", path("too-big"), { token, body: { value: "x".repeat(2000) } })
        expect(full.status).toBe(409)
        expect(full.body.error).toMatchObject({ code: "conflict", details: { reason: "storage_quota_exceeded" } })
        expect((yield* call("GET", path("too-big"), { token })).status).toBe(404)
        const viaKv = yield* call("POST", `/v1/functions/${fn.id}/invoke`, { token, body: {} })
        expect(viaKv.body.data.response_body).toMatch(/^rejected/)
        expect((yield* call("GET", path("from-fn"), { token })).status).toBe(404)
        // What still fits is stored; the storage report stays at or under 100%.
        expect((yield* call("PUT", path("small"), { token, body: { value: 1 } })).status).toBe(201)
        expect((yield* call("GET", "/v1/account/storage", { token })).body.data.percentage).toBeLessThanOrEqual(100)
      }))
  })

  describe("function scope", () => {
    it.effect("a function's scope holds at most 10,000 keys of its own (409); the organization scope is separate", () =>
      Effect.gen(function*() {
        const { orgId, token } = yield* newOrg()
        const sql = yield* SqlClient.SqlClient
        const fn = yield* deploy(token, `export default { async fetch() { return new Response("") } }`)
        yield* sql`INSERT INTO memories (org_id, function_id, key, value, size_bytes)
          SELECT ${orgId}, ${fn.id}, 'k' || g, '1', 1 FROM generate_series(1, 10000) g`.pipe(Effect.orDie)
        const fnPath = (k: string) => `/v1/functions/${fn.id}/memories/${encodeURIComponent(k)}`
        const over = yield* call("PUT", fnPath("one-more"), { token, body: { value: 1 } })
        expect(over.status).toBe(409)
        expect(over.body.error.code).toBe("conflict")
        expect((yield* call("PUT", path("one-more"), { token, body: { value: 1 } })).status).toBe(201)
      }))

    it.effect("needs the entitlement and an existing function of the organization", () =>
      Effect.gen(function*() {
        const agent = yield* newOrg("agent")
        const denied = yield* call("GET", `/v1/functions/${crypto.randomUUID()}/memories`, { token: agent.token })
        expect(denied.status).toBe(403)
        expect(denied.body.error.details).toMatchObject({ missing_entitlement: "functions", required_plan: "developer" })
        // Organization memories need no entitlement.
        expect((yield* call("PUT", path("ok"), { token: agent.token, body: { value: 1 } })).status).toBe(201)
        const dev = yield* newOrg()
        expect((yield* call("PUT", `/v1/functions/${crypto.randomUUID()}/memories/k`, { token: dev.token, body: { value: 1 } })).status).toBe(404)
        const other = yield* newOrg()
        const theirs = yield* deploy(other.token, `export default { async fetch() { return new Response("") } }`)
        expect((yield* call("GET", `/v1/functions/${theirs.id}/memories`, { token: dev.token })).status).toBe(404)
      }))

    it.effect("the KV bindings and the API see the same items, per scope", () =>
      Effect.gen(function*() {
        const { token } = yield* newOrg()
        const code = `export default { async fetch(req, env) {
          const out = {};
          out.fromApi = await env.MEMORY.get("from-api", "json");
          out.fromApiText = await env.MEMORY.get("from-api");
          out.orgFromApi = await env.ORG_MEMORY.get("org-from-api", "json");
          await env.MEMORY.put("from-fn", JSON.stringify({ n: 42 }));
          await env.MEMORY.put("ttl", JSON.stringify("t"), { expirationTtl: 120 });
          await env.MEMORY.delete("to-delete");
          out.deleted = await env.MEMORY.get("to-delete");
          out.missing = await env.MEMORY.get("never-set");
          const page = await env.MEMORY.list({ prefix: "p/", limit: 2 });
          out.page = page.keys.map((k) => k.name);
          out.complete = page.list_complete;
          const rest = await env.MEMORY.list({ prefix: "p/", limit: 2, cursor: page.cursor });
          out.rest = rest.keys.map((k) => k.name);
          try { await env.MEMORY.put("big", JSON.stringify("x".repeat(70000))); out.big = "stored"; } catch (e) { out.big = "rejected"; }
          try { await env.MEMORY.put("bad\\u0001key", "1"); out.badKey = "stored"; } catch (e) { out.badKey = "rejected"; }
          return new Response(JSON.stringify(out));
        } }`
        const fn = yield* deploy(token, code)
        const fnPath = (k: string) => `/v1/functions/${fn.id}/memories/${encodeURIComponent(k)}`
        expect((yield* call("PUT", fnPath("from-api"), { token, body: { value: { list: [1, 2] } } })).status).toBe(201)
        expect((yield* call("PUT", fnPath("to-delete"), { token, body: { value: 1 } })).status).toBe(201)
        for (const k of ["p/1", "p/2", "p/3"]) yield* call("PUT", fnPath(k), { token, body: { value: k } })
        yield* call("PUT", path("org-from-api"), { token, body: { value: "org value" } })
        // The organization scope and the function scope are separate.
        yield* call("PUT", path("from-fn"), { token, body: { value: "org item of the same name" } })

        const r = yield* call("POST", `/v1/functions/${fn.id}/invoke`, { token, body: {} })
        expect(r.body.data.status, r.body.data.error ?? r.body.data.logs).toBe("ok")
        const out = JSON.parse(r.body.data.response_body)
        expect(out).toEqual({
          fromApi: { list: [1, 2] },
          fromApiText: JSON.stringify({ list: [1, 2] }),
          orgFromApi: "org value",
          deleted: null,
          missing: null,
          page: ["p/1", "p/2"],
          complete: false,
          rest: ["p/3"],
          big: "rejected",
          badKey: "rejected"
        })
        const fromFn = yield* call("GET", fnPath("from-fn"), { token })
        expect(fromFn.body.data).toMatchObject({ value: { n: 42 }, scope: "function", function_id: fn.id })
        expect((yield* call("GET", fnPath("ttl"), { token })).body.data.expires_at).not.toBeNull()
        expect((yield* call("GET", fnPath("to-delete"), { token })).status).toBe(404)
        expect((yield* call("GET", path("from-fn"), { token })).body.data.value).toBe("org item of the same name")
        // Deleting the function deletes its memories.
        yield* call("DELETE", `/v1/functions/${fn.id}`, { token })
        const sql = yield* SqlClient.SqlClient
        const left = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM memories WHERE function_id = ${fn.id}`.pipe(Effect.orDie)
        expect(left[0]!.n).toBe(0)
      }))
  })
})
