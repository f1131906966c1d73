/**
 * Registries over real HTTP with two and three organizations: every publish policy and permission
 * rule, handle uniqueness under a race, sendable addresses, pending entries, deletion, and handle
 * resolution (the API and the service the send path calls).
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer, Option } from "effect"
import { Provisioning } from "../src/identity/Provisioning.js"
import { parseRegistryRecipient, RegistryDirectory } from "../src/registries/Directory.js"
import { TestDns, testServiceWithDns } from "./support/dns.js"
import { call, type JsonBody } from "./support/http.js"

const Env = Layer.mergeAll(Provisioning.Default, RegistryDirectory.Default).pipe(Layer.provideMerge(testServiceWithDns()))
const MANAGED = "agents.localhost"

type Plan = "agent" | "developer" | "pro"

const newOrg = (plan: Plan = "developer") =>
  Effect.gen(function*() {
    const p = yield* Provisioning
    const org = yield* p.createOrganization({ name: "Reg", plan })
    const key = yield* p.issueApiKey(org.id)
    return { orgId: org.id, token: key.apiKey, inbox: org.managedInboxAddress }
  })

let seq = 0
const unique = (label: string) => `${label}-${++seq}-${Math.random().toString(36).slice(2, 7)}`

const verifiedDomain = (token: string, domain = `${unique("acme")}.test`) =>
  Effect.gen(function*() {
    const dns = yield* TestDns
    const claim = yield* call("POST", "/v1/domains", { token, body: { domain } })
    expect(claim.status, claim.text).toBe(201)
    dns.zone.set(`_mailroom.${domain}`, { TXT: [`mailroom-verification=${claim.body.data.verification_token}`] })
    dns.zone.set(domain, { MX: [{ exchange: `mx.${MANAGED}`, priority: 10 }], A: ["127.0.0.1"] })
    const v = yield* call("POST", `/v1/domains/${claim.body.data.id}/verify`, { token })
    expect(v.body.data.verified).toBe(true)
    return { id: claim.body.data.id as string, domain }
  })

const expectError = (r: { status: number; body: JsonBody; text: string }, status: number, code: string) => {
  expect([r.status, r.body?.error?.code], r.text).toEqual([status, code])
}

const createRegistry = (token: string, body: Record<string, unknown> = {}) =>
  Effect.gen(function*() {
    const name = unique("reg")
    const r = yield* call("POST", "/v1/registries", { token, body: { name, ...body } })
    expect(r.status, r.text).toBe(201)
    return r.body.data as { name: string; id: string }
  })

const publish = (token: string, registry: string, body: Record<string, unknown>) =>
  call("POST", `/v1/registries/${registry}/entries`, { token, body })

const REGISTRY_KEYS = ["created_at", "description", "entry_count", "id", "is_owner", "name", "publish_policy", "updated_at"]
const ENTRY_KEYS = ["address", "capabilities", "created_at", "description", "handle", "metadata", "publisher_is_you", "status", "updated_at"]

layer(Env, { timeout: 120_000, excludeTestServices: true })("registries", (it) => {
  describe("registries", () => {
    it.effect("create: the shape, defaults, a name unique across the service, validation and the entitlement", () =>
      Effect.gen(function*() {
        const a = yield* newOrg()
        const b = yield* newOrg("pro")
        const name = unique("acme-agents")
        const created = yield* call("POST", "/v1/registries", { token: a.token, body: { name } })
        expect(created.status).toBe(201)
        expect(Object.keys(created.body.data).sort()).toEqual(REGISTRY_KEYS)
        expect(created.body.data).toMatchObject({
          name,
          description: null,
          publish_policy: "owner_only",
          is_owner: true,
          entry_count: 0
        })
        expect(created.body.data.id).toMatch(/^[0-9a-f-]{36}$/)

        // Unique across organizations, not per organization.
        expectError(yield* call("POST", "/v1/registries", { token: b.token, body: { name } }), 409, "conflict")
        expectError(yield* call("POST", "/v1/registries", { token: a.token, body: { name, description: "again" } }), 409, "conflict")

        const full = yield* call("POST", "/v1/registries", {
          token: b.token,
          body: { name: unique("b-dir"), description: "B's agents", publish_policy: "request" }
        })
        expect(full.body.data).toMatchObject({ description: "B's agents", publish_policy: "request", is_owner: true })

        for (
          const bad of [
            { name: "ab" },
            { name: "Acme" },
            { name: "a_b_c" },
            { name: "x".repeat(65) },
            { name: "good-name", publish_policy: "anyone" },
            { name: "good-name", description: "d".repeat(501) },
            { name: "good-name", owner: "me" },
            {}
          ]
        ) {
          expectError(yield* call("POST", "/v1/registries", { token: a.token, body: bad }), 400, "validation_error")
        }

        // The agent plan reads registries but does not create them.
        const agent = yield* newOrg("agent")
        const refused = yield* call("POST", "/v1/registries", { token: agent.token, body: { name: unique("agent-reg") } })
        expectError(refused, 403, "forbidden")
        expect(refused.body.error.details).toMatchObject({ missing_entitlement: "registries", required_plan: "developer" })
        const read = yield* call("GET", `/v1/registries/${name}`, { token: agent.token })
        expect(read.status).toBe(200)
        expect(read.body.data).toMatchObject({ name, is_owner: false })
        expectError(yield* call("GET", `/v1/registries/${name}`), 401, "unauthorized")
      }))

    it.effect("list: every registry newest first, owned=true|false, paging, is_owner and entry_count", () =>
      Effect.gen(function*() {
        const a = yield* newOrg()
        const b = yield* newOrg()
        const c = yield* newOrg("agent")
        const a1 = yield* createRegistry(a.token, { publish_policy: "open" })
        const a2 = yield* createRegistry(a.token)
        const b1 = yield* createRegistry(b.token)
        yield* publish(a.token, a1.name, { handle: "one", address: a.inbox })
        yield* publish(b.token, a1.name, { handle: "two", address: b.inbox })

        const all = yield* call("GET", "/v1/registries?limit=100", { token: c.token })
        expect(all.status).toBe(200)
        const names = all.body.data.map((r: { name: string }) => r.name)
        expect(names.indexOf(b1.name)).toBeLessThan(names.indexOf(a2.name))
        expect(names.indexOf(a2.name)).toBeLessThan(names.indexOf(a1.name))
        expect(all.body.data.every((r: { is_owner: boolean }) => !r.is_owner)).toBe(true)
        expect(all.body.data.find((r: { name: string }) => r.name === a1.name).entry_count).toBe(2)

        const mine = yield* call("GET", "/v1/registries?owned=true", { token: a.token })
        expect(mine.body.data.map((r: { name: string }) => r.name)).toEqual([a2.name, a1.name])
        expect(mine.body.meta).toEqual({ total: 2, limit: 50, cursor: null })
        expect(mine.body.data.every((r: { is_owner: boolean }) => r.is_owner)).toBe(true)
        const others = yield* call("GET", "/v1/registries?owned=false&limit=100", { token: a.token })
        const otherNames = others.body.data.map((r: { name: string }) => r.name)
        expect(otherNames).toContain(b1.name)
        expect(otherNames).not.toContain(a1.name)

        const page = yield* call("GET", "/v1/registries?owned=true&limit=1", { token: a.token })
        expect(page.body.data.map((r: { name: string }) => r.name)).toEqual([a2.name])
        expect(page.body.meta.total).toBe(2)
        const next = yield* call("GET", `/v1/registries?owned=true&limit=1&cursor=${page.body.meta.cursor}`, { token: a.token })
        expect(next.body.data.map((r: { name: string }) => r.name)).toEqual([a1.name])
        expect(next.body.meta.cursor).toBeNull()

        expectError(yield* call("GET", "/v1/registries?owned=yes", { token: a.token }), 400, "validation_error")
        expectError(yield* call("GET", "/v1/registries?limit=0", { token: a.token }), 400, "validation_error")
      }))

    it.effect("patch and delete: only the owner (403 for a second and a third organization); unknown is 404", () =>
      Effect.gen(function*() {
        const a = yield* newOrg()
        const b = yield* newOrg()
        const c = yield* newOrg("pro")
        const reg = yield* createRegistry(a.token)
        for (const other of [b, c]) {
          const patch = yield* call("PATCH", `/v1/registries/${reg.name}`, { token: other.token, body: { publish_policy: "open" } })
          expectError(patch, 403, "forbidden")
          expect(patch.body.error.details).toMatchObject({ registry: reg.name, reason: "not_owner" })
          expectError(yield* call("DELETE", `/v1/registries/${reg.name}`, { token: other.token }), 403, "forbidden")
        }
        const unchanged = yield* call("GET", `/v1/registries/${reg.name}`, { token: a.token })
        expect(unchanged.body.data.publish_policy).toBe("owner_only")

        const patched = yield* call("PATCH", `/v1/registries/${reg.name}`, {
          token: a.token,
          body: { publish_policy: "request", description: "Our agents" }
        })
        expect(patched.status).toBe(200)
        expect(patched.body.data).toMatchObject({ publish_policy: "request", description: "Our agents", is_owner: true })
        expect(new Date(patched.body.data.updated_at).getTime()).toBeGreaterThanOrEqual(new Date(unchanged.body.data.updated_at).getTime())
        const cleared = yield* call("PATCH", `/v1/registries/${reg.name}`, { token: a.token, body: { description: null } })
        expect(cleared.body.data).toMatchObject({ publish_policy: "request", description: null })
        // The name is how handles are addressed: it cannot change.
        expectError(yield* call("PATCH", `/v1/registries/${reg.name}`, { token: a.token, body: { name: "other-name" } }), 400, "validation_error")
        expectError(yield* call("PATCH", `/v1/registries/${reg.name}`, { token: a.token, body: {} }), 400, "validation_error")
        expectError(yield* call("PATCH", `/v1/registries/${reg.name}`, { token: a.token, body: { publish_policy: "x" } }), 400, "validation_error")

        expectError(yield* call("GET", "/v1/registries/no-such-registry", { token: a.token }), 404, "not_found")
        expectError(yield* call("PATCH", "/v1/registries/no-such-registry", { token: a.token, body: { description: "x" } }), 404, "not_found")
        expectError(yield* call("DELETE", "/v1/registries/no-such-registry", { token: a.token }), 404, "not_found")
        expectError(yield* call("GET", "/v1/registries/Bad_Name", { token: a.token }), 400, "validation_error")

        const removed = yield* call("DELETE", `/v1/registries/${reg.name}`, { token: a.token })
        expect(removed.status).toBe(200)
        expect(removed.body.data).toMatchObject({ name: reg.name, is_owner: true })
        expectError(yield* call("GET", `/v1/registries/${reg.name}`, { token: b.token }), 404, "not_found")
      }))

    it.effect("deleting a registry removes its entries (every publisher's); its name stays its owner's", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const a = yield* newOrg()
        const b = yield* newOrg()
        const c = yield* newOrg()
        const reg = yield* createRegistry(a.token, { publish_policy: "request" })
        yield* publish(a.token, reg.name, { handle: "a", address: a.inbox })
        yield* publish(b.token, reg.name, { handle: "b", address: b.inbox })
        yield* publish(c.token, reg.name, { handle: "c", address: c.inbox })
        const before = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM registry_entries WHERE registry_id = ${reg.id}`
        expect(before[0]!.n).toBe(3)
        const removed = yield* call("DELETE", `/v1/registries/${reg.name}`, { token: a.token })
        expect(removed.body.data.entry_count).toBe(1)
        const after = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM registry_entries WHERE registry_id = ${reg.id}`
        expect(after[0]!.n).toBe(0)
        expectError(yield* call("GET", `/v1/registries/${reg.name}/entries/b`, { token: b.token }), 404, "not_found")
        expectError(yield* call("GET", `/v1/registries/${reg.name}/entries`, { token: b.token }), 404, "not_found")

        // The name stays the former owner's: another organization cannot take it (and with it the
        // trust payloads and registry filters put in the name); the owner may create it again, empty.
        for (const other of [b, c]) {
          const hijack = yield* call("POST", "/v1/registries", { token: other.token, body: { name: reg.name, publish_policy: "open" } })
          expectError(hijack, 409, "conflict")
          expect(hijack.body.error.details).toMatchObject({ constraint: "name", reason: "reserved" })
        }
        const again = yield* call("POST", "/v1/registries", { token: a.token, body: { name: reg.name, publish_policy: "open" } })
        expect(again.status).toBe(201)
        expect(again.body.data).toMatchObject({ entry_count: 0, is_owner: true })
        expect(again.body.data.id).not.toBe(reg.id)
        const live = yield* call("POST", "/v1/registries", { token: a.token, body: { name: reg.name, description: "twice" } })
        expectError(live, 409, "conflict")
        expect(live.body.error.details).toMatchObject({ reason: "exists" })
        const list = yield* call("GET", `/v1/registries/${reg.name}/entries`, { token: b.token })
        expect(list.body.data).toEqual([])
        expectError(yield* call("GET", `/v1/registries/${reg.name}/entries/b`, { token: b.token }), 404, "not_found")
      }))
  })

  describe("publish policies", () => {
    it.effect("owner_only: the owner publishes (published at once); a second and a third organization get 403", () =>
      Effect.gen(function*() {
        const a = yield* newOrg()
        const b = yield* newOrg()
        const c = yield* newOrg("pro")
        const reg = yield* createRegistry(a.token)
        const own = yield* publish(a.token, reg.name, {
          handle: "billing",
          address: a.inbox,
          description: "Pays invoices",
          capabilities: ["invoices.pay", "invoices.read"],
          metadata: { model: "x", limits: { per_day: 10 } }
        })
        expect(own.status, own.text).toBe(201)
        expect(Object.keys(own.body.data).sort()).toEqual(ENTRY_KEYS)
        expect(own.body.data).toMatchObject({
          handle: "billing",
          address: a.inbox,
          description: "Pays invoices",
          capabilities: ["invoices.pay", "invoices.read"],
          metadata: { model: "x", limits: { per_day: 10 } },
          status: "published",
          publisher_is_you: true
        })
        for (const other of [b, c]) {
          const refused = yield* publish(other.token, reg.name, { handle: unique("h"), address: other.inbox })
          expectError(refused, 403, "forbidden")
          expect(refused.body.error.details).toMatchObject({ publish_policy: "owner_only", reason: "owner_only" })
        }
        const entries = yield* call("GET", `/v1/registries/${reg.name}/entries`, { token: b.token })
        expect(entries.body.data.map((e: { handle: string }) => e.handle)).toEqual(["billing"])
        expect(entries.body.data[0]).toMatchObject({ publisher_is_you: false, status: "published" })
        const registry = yield* call("GET", `/v1/registries/${reg.name}`, { token: c.token })
        expect(registry.body.data.entry_count).toBe(1)
      }))

    it.effect("open: anyone publishes at once; entries change only by their publisher or the owner", () =>
      Effect.gen(function*() {
        const a = yield* newOrg()
        const b = yield* newOrg()
        const c = yield* newOrg()
        const reg = yield* createRegistry(a.token, { publish_policy: "open" })
        const byB = yield* publish(b.token, reg.name, { handle: "b-agent", address: b.inbox })
        expect(byB.status).toBe(201)
        expect(byB.body.data).toMatchObject({ status: "published", publisher_is_you: true, description: null, capabilities: [], metadata: {} })
        const byC = yield* publish(c.token, reg.name, { handle: "c-agent", address: c.inbox })
        expect(byC.body.data.status).toBe("published")

        // Everyone reads both.
        for (const viewer of [a, b, c]) {
          const list = yield* call("GET", `/v1/registries/${reg.name}/entries`, { token: viewer.token })
          expect(list.body.data.map((e: { handle: string }) => e.handle)).toEqual(["c-agent", "b-agent"])
          expect(list.body.meta.total).toBe(2)
        }

        // A third organization neither changes nor removes B's entry.
        const cPatch = yield* call("PATCH", `/v1/registries/${reg.name}/entries/b-agent`, { token: c.token, body: { description: "mine now" } })
        expectError(cPatch, 403, "forbidden")
        expect(cPatch.body.error.details).toMatchObject({ reason: "not_publisher_or_owner" })
        expectError(yield* call("DELETE", `/v1/registries/${reg.name}/entries/b-agent`, { token: c.token }), 403, "forbidden")

        // The publisher changes everything of its own entry.
        const bPatch = yield* call("PATCH", `/v1/registries/${reg.name}/entries/b-agent`, {
          token: b.token,
          body: { description: "B's agent", capabilities: ["search"], metadata: { v: 2 }, address: b.inbox.replace("@", "+bot@") }
        })
        expect(bPatch.status, bPatch.text).toBe(200)
        expect(bPatch.body.data).toMatchObject({
          description: "B's agent",
          capabilities: ["search"],
          metadata: { v: 2 },
          address: b.inbox.replace("@", "+bot@"),
          status: "published"
        })

        // The owner curates the description, capabilities and metadata, but never the address.
        const aPatch = yield* call("PATCH", `/v1/registries/${reg.name}/entries/b-agent`, { token: a.token, body: { description: "curated", metadata: {} } })
        expect(aPatch.status).toBe(200)
        expect(aPatch.body.data).toMatchObject({ description: "curated", metadata: {}, capabilities: ["search"], publisher_is_you: false })
        const aAddress = yield* call("PATCH", `/v1/registries/${reg.name}/entries/b-agent`, { token: a.token, body: { address: a.inbox } })
        expectError(aAddress, 403, "forbidden")
        expect(aAddress.body.error.details).toMatchObject({ reason: "not_publisher" })

        // Removal by the owner and by the publisher.
        const aRemove = yield* call("DELETE", `/v1/registries/${reg.name}/entries/b-agent`, { token: a.token })
        expect(aRemove.status).toBe(200)
        expect(aRemove.body.data.handle).toBe("b-agent")
        const cRemove = yield* call("DELETE", `/v1/registries/${reg.name}/entries/c-agent`, { token: c.token })
        expect(cRemove.body.data).toMatchObject({ handle: "c-agent", publisher_is_you: true })
        expectError(yield* call("DELETE", `/v1/registries/${reg.name}/entries/c-agent`, { token: c.token }), 404, "not_found")
        expect((yield* call("GET", `/v1/registries/${reg.name}`, { token: a.token })).body.data.entry_count).toBe(0)
      }))

    it.effect("request: pending until the owner approves or rejects; pending entries are seen only by the owner and the publisher", () =>
      Effect.gen(function*() {
        const a = yield* newOrg()
        const b = yield* newOrg()
        const c = yield* newOrg()
        const reg = yield* createRegistry(a.token, { publish_policy: "request" })
        const pending = yield* publish(b.token, reg.name, { handle: "b-agent", address: b.inbox })
        expect(pending.status).toBe(201)
        expect(pending.body.data.status).toBe("pending")
        // The owner's own entries need no approval.
        const own = yield* publish(a.token, reg.name, { handle: "a-agent", address: a.inbox })
        expect(own.body.data.status).toBe("published")

        // A third organization sees only the published entry, and the pending one not at all.
        const cList = yield* call("GET", `/v1/registries/${reg.name}/entries`, { token: c.token })
        expect(cList.body.data.map((e: { handle: string }) => e.handle)).toEqual(["a-agent"])
        expectError(yield* call("GET", `/v1/registries/${reg.name}/entries/b-agent`, { token: c.token }), 404, "not_found")
        expectError(yield* call("PATCH", `/v1/registries/${reg.name}/entries/b-agent`, { token: c.token, body: { description: "x" } }), 404, "not_found")
        const cPending = yield* call("GET", `/v1/registries/${reg.name}/entries?status=pending`, { token: c.token })
        expect([cPending.body.data, cPending.body.meta.total]).toEqual([[], 0])
        expect((yield* call("GET", `/v1/registries/${reg.name}`, { token: c.token })).body.data.entry_count).toBe(1)

        // The publisher sees its own pending entry.
        const bList = yield* call("GET", `/v1/registries/${reg.name}/entries`, { token: b.token })
        expect(bList.body.data.map((e: { handle: string; status: string }) => [e.handle, e.status])).toEqual([
          ["a-agent", "published"],
          ["b-agent", "pending"]
        ])
        expect((yield* call("GET", `/v1/registries/${reg.name}/entries/b-agent`, { token: b.token })).body.data.status).toBe("pending")

        // The owner sees both, and filters by status.
        const aList = yield* call("GET", `/v1/registries/${reg.name}/entries`, { token: a.token })
        expect(aList.body.meta.total).toBe(2)
        const aPending = yield* call("GET", `/v1/registries/${reg.name}/entries?status=pending`, { token: a.token })
        expect(aPending.body.data.map((e: { handle: string }) => e.handle)).toEqual(["b-agent"])
        const aPublished = yield* call("GET", `/v1/registries/${reg.name}/entries?status=published`, { token: a.token })
        expect(aPublished.body.data.map((e: { handle: string }) => e.handle)).toEqual(["a-agent"])
        expectError(yield* call("GET", `/v1/registries/${reg.name}/entries?status=rejected`, { token: a.token }), 400, "validation_error")

        // Only the owner decides: not the publisher, not a third organization.
        for (const other of [b, c]) {
          expectError(yield* call("POST", `/v1/registries/${reg.name}/entries/b-agent/approve`, { token: other.token }), 403, "forbidden")
          expectError(yield* call("POST", `/v1/registries/${reg.name}/entries/b-agent/reject`, { token: other.token }), 403, "forbidden")
        }
        const approved = yield* call("POST", `/v1/registries/${reg.name}/entries/b-agent/approve`, { token: a.token })
        expect(approved.status).toBe(200)
        expect(approved.body.data).toMatchObject({ handle: "b-agent", status: "published", publisher_is_you: false })
        const twice = yield* call("POST", `/v1/registries/${reg.name}/entries/b-agent/approve`, { token: a.token })
        expectError(twice, 409, "conflict")
        expect(twice.body.error.details).toMatchObject({ status: "published" })
        expectError(yield* call("POST", `/v1/registries/${reg.name}/entries/b-agent/reject`, { token: a.token }), 409, "conflict")
        expect((yield* call("GET", `/v1/registries/${reg.name}/entries/b-agent`, { token: c.token })).body.data.status).toBe("published")

        // A new address under `request` waits for approval again; other changes do not.
        const described = yield* call("PATCH", `/v1/registries/${reg.name}/entries/b-agent`, { token: b.token, body: { description: "hi" } })
        expect(described.body.data.status).toBe("published")
        const moved = yield* call("PATCH", `/v1/registries/${reg.name}/entries/b-agent`, {
          token: b.token,
          body: { address: b.inbox.replace("@", "+v2@") }
        })
        expect(moved.body.data.status).toBe("pending")
        expectError(yield* call("GET", `/v1/registries/${reg.name}/entries/b-agent`, { token: c.token }), 404, "not_found")

        // A rejection removes the entry and frees the handle.
        const cRequest = yield* publish(c.token, reg.name, { handle: "c-agent", address: c.inbox })
        expect(cRequest.body.data.status).toBe("pending")
        const rejected = yield* call("POST", `/v1/registries/${reg.name}/entries/c-agent/reject`, { token: a.token })
        expect(rejected.status).toBe(200)
        expect(rejected.body.data).toMatchObject({ handle: "c-agent", status: "rejected" })
        expectError(yield* call("GET", `/v1/registries/${reg.name}/entries/c-agent`, { token: c.token }), 404, "not_found")
        expectError(yield* call("POST", `/v1/registries/${reg.name}/entries/c-agent/approve`, { token: a.token }), 404, "not_found")
        const retry = yield* publish(c.token, reg.name, { handle: "c-agent", address: c.inbox })
        expect(retry.status).toBe(201)
        expect(retry.body.data.status).toBe("pending")

        expectError(yield* call("POST", `/v1/registries/${reg.name}/entries/nobody/approve`, { token: a.token }), 404, "not_found")
      }))

    it.effect("a changed policy applies to later publishes; pending entries stay pending", () =>
      Effect.gen(function*() {
        const a = yield* newOrg()
        const b = yield* newOrg()
        const c = yield* newOrg()
        const reg = yield* createRegistry(a.token, { publish_policy: "request" })
        yield* publish(b.token, reg.name, { handle: "b", address: b.inbox })
        yield* call("PATCH", `/v1/registries/${reg.name}`, { token: a.token, body: { publish_policy: "open" } })
        expect((yield* call("GET", `/v1/registries/${reg.name}/entries/b`, { token: b.token })).body.data.status).toBe("pending")
        expect((yield* publish(c.token, reg.name, { handle: "c", address: c.inbox })).body.data.status).toBe("published")
        yield* call("PATCH", `/v1/registries/${reg.name}`, { token: a.token, body: { publish_policy: "owner_only" } })
        expectError(yield* publish(c.token, reg.name, { handle: "c2", address: c.inbox }), 403, "forbidden")
        // Existing entries stay, and their publishers still manage them.
        expect((yield* call("PATCH", `/v1/registries/${reg.name}/entries/c`, { token: c.token, body: { description: "still here" } })).status).toBe(200)
      }))
  })

  describe("entries", () => {
    it.effect("the address must be one the publisher can send from: managed inbox, +tag form, verified domain", () =>
      Effect.gen(function*() {
        const a = yield* newOrg()
        const b = yield* newOrg()
        const reg = yield* createRegistry(a.token, { publish_policy: "open" })
        const domain = yield* verifiedDomain(a.token)
        const claimed = `${unique("unverified")}.test`
        expect((yield* call("POST", "/v1/domains", { token: a.token, body: { domain: claimed } })).status).toBe(201)

        expect((yield* publish(a.token, reg.name, { handle: "inbox", address: a.inbox })).status).toBe(201)
        expect((yield* publish(a.token, reg.name, { handle: "tagged", address: a.inbox.replace("@", "+billing@") })).status).toBe(201)
        const upper = yield* publish(a.token, reg.name, { handle: "domain", address: `Billing@${domain.domain.toUpperCase()}` })
        expect(upper.status).toBe(201)
        expect(upper.body.data.address).toBe(`billing@${domain.domain}`)

        for (const address of [`x@${claimed}`, b.inbox, b.inbox.replace("@", "+x@"), "someone@example.com", `x@sub.${domain.domain}`]) {
          const refused = yield* publish(a.token, reg.name, { handle: unique("bad"), address })
          expectError(refused, 403, "cannot_send_from_domain")
          expect(refused.body.error.details.valid_senders).toEqual([a.inbox, domain.domain])
        }
        // B's valid senders are B's own: its inbox only.
        const bRefused = yield* publish(b.token, reg.name, { handle: "b", address: a.inbox })
        expectError(bRefused, 403, "cannot_send_from_domain")
        expect(bRefused.body.error.details.valid_senders).toEqual([b.inbox])
        const bPatch = yield* call("PATCH", `/v1/registries/${reg.name}/entries/inbox`, { token: a.token, body: { address: b.inbox } })
        expectError(bPatch, 403, "cannot_send_from_domain")

        for (
          const bad of [
            { handle: "", address: a.inbox },
            { handle: "Upper", address: a.inbox },
            { handle: "with space", address: a.inbox },
            { handle: "h".repeat(65), address: a.inbox },
            { handle: "ok", address: "not an address" },
            { handle: "ok", address: `Ann <${a.inbox}>` },
            { handle: "ok" },
            { handle: "ok", address: a.inbox, capabilities: [""] },
            { handle: "ok", address: a.inbox, capabilities: Array.from({ length: 51 }, (_, i) => `c${i}`) },
            { handle: "ok", address: a.inbox, metadata: [] },
            { handle: "ok", address: a.inbox, metadata: { big: "x".repeat(9000) } },
            // PostgreSQL's jsonb refuses half a surrogate pair: a 400, never a 500.
            { handle: "ok", address: a.inbox, metadata: { deep: ["\ud800"] } },
            { handle: "ok", address: a.inbox, capabilities: ["\udc00x"] },
            { handle: "ok", address: a.inbox, status: "published" }
          ]
        ) {
          expectError(yield* publish(a.token, reg.name, bad), 400, "validation_error")
        }
        expectError(yield* call("PATCH", `/v1/registries/${reg.name}/entries/inbox`, { token: a.token, body: {} }), 400, "validation_error")
        expectError(yield* call("PATCH", `/v1/registries/${reg.name}/entries/inbox`, { token: a.token, body: { handle: "renamed" } }), 400, "validation_error")
        expectError(yield* publish(a.token, "no-such-registry", { handle: "x", address: a.inbox }), 404, "not_found")
        expectError(yield* call("GET", `/v1/registries/${reg.name}/entries/NOPE`, { token: a.token }), 400, "validation_error")
        expectError(yield* call("GET", `/v1/registries/${reg.name}/entries/nope`, { token: a.token }), 404, "not_found")

        // Publishing needs the entitlement even where the policy lets anyone publish.
        const agent = yield* newOrg("agent")
        const refused = yield* publish(agent.token, reg.name, { handle: "agent", address: agent.inbox })
        expectError(refused, 403, "forbidden")
        expect(refused.body.error.details).toMatchObject({ missing_entitlement: "registries" })
      }))

    it.effect("a handle is unique in its registry (409), not across registries", () =>
      Effect.gen(function*() {
        const a = yield* newOrg()
        const b = yield* newOrg()
        const reg = yield* createRegistry(a.token, { publish_policy: "open" })
        const other = yield* createRegistry(b.token)
        expect((yield* publish(a.token, reg.name, { handle: "support", address: a.inbox })).status).toBe(201)
        const taken = yield* publish(b.token, reg.name, { handle: "support", address: b.inbox })
        expectError(taken, 409, "conflict")
        expect(taken.body.error.details).toMatchObject({ constraint: "handle" })
        expectError(yield* publish(a.token, reg.name, { handle: "support", address: a.inbox.replace("@", "+2@") }), 409, "conflict")
        expect((yield* publish(b.token, other.name, { handle: "support", address: b.inbox })).status).toBe(201)
        const entry = yield* call("GET", `/v1/registries/${reg.name}/entries/support`, { token: b.token })
        expect(entry.body.data.address).toBe(a.inbox)
      }))

    it.effect("two concurrent publishes of one handle: exactly one 201 and one 409, one row", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const a = yield* newOrg()
        const b = yield* newOrg()
        const c = yield* newOrg()
        const reg = yield* createRegistry(a.token, { publish_policy: "open" })
        for (let round = 0; round < 6; round++) {
          const handle = `race-${round}`
          const [x, y] = round % 2 === 0 ? [b, c] : [a, b]
          const results = yield* Effect.all([
            publish(x.token, reg.name, { handle, address: x.inbox }),
            publish(y.token, reg.name, { handle, address: y.inbox })
          ], { concurrency: 2 })
          expect(results.map((r) => r.status).sort(), results.map((r) => r.text).join("\n")).toEqual([201, 409])
          expect(results.find((r) => r.status === 409)!.body.error.code).toBe("conflict")
          const rows = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM registry_entries WHERE registry_id = ${reg.id} AND handle = ${handle}`
          expect(rows[0]!.n).toBe(1)
        }
        // The same for two registries racing for one name.
        const name = unique("race-reg")
        const regs = yield* Effect.all([
          call("POST", "/v1/registries", { token: b.token, body: { name } }),
          call("POST", "/v1/registries", { token: c.token, body: { name } })
        ], { concurrency: 2 })
        expect(regs.map((r) => r.status).sort()).toEqual([201, 409])
      }))

    it.effect("an identical publish retried without a key is answered once (derived idempotency)", () =>
      Effect.gen(function*() {
        const a = yield* newOrg()
        const reg = yield* createRegistry(a.token)
        const body = { handle: "retry", address: a.inbox }
        const first = yield* publish(a.token, reg.name, body)
        const second = yield* publish(a.token, reg.name, body)
        expect(first.status).toBe(201)
        expect(second.status).toBe(201)
        expect(second.headers.get("idempotent-replayed")).toBe("true")
        expect(second.body.data).toEqual(first.body.data)
      }))
  })

  describe("resolution", () => {
    it.effect("GET …/entries/{handle} and resolveHandle answer the published address; pending and lost addresses do not resolve", () =>
      Effect.gen(function*() {
        const directory = yield* RegistryDirectory
        const a = yield* newOrg()
        const b = yield* newOrg()
        const reg = yield* createRegistry(a.token, { publish_policy: "request" })
        const domain = yield* verifiedDomain(a.token)
        yield* publish(a.token, reg.name, { handle: "billing", address: `billing@${domain.domain}` })
        yield* publish(b.token, reg.name, { handle: "b-agent", address: b.inbox })

        const got = yield* call("GET", `/v1/registries/${reg.name}/entries/billing`, { token: b.token })
        expect(got.body.data).toMatchObject({ handle: "billing", address: `billing@${domain.domain}`, status: "published" })
        expect(yield* directory.resolveHandle(reg.name, "billing")).toEqual(
          Option.some({ registry: reg.name, handle: "billing", address: `billing@${domain.domain}` })
        )
        expect(Option.isNone(yield* directory.resolveHandle(reg.name, "b-agent"))).toBe(true)
        expect(Option.isNone(yield* directory.resolveHandle(reg.name, "nobody"))).toBe(true)
        expect(Option.isNone(yield* directory.resolveHandle("no-such-registry", "billing"))).toBe(true)
        yield* call("POST", `/v1/registries/${reg.name}/entries/b-agent/approve`, { token: a.token })
        expect(yield* directory.resolveHandle(reg.name, "b-agent")).toEqual(
          Option.some({ registry: reg.name, handle: "b-agent", address: b.inbox })
        )

        // The publisher gives the domain up: the entry no longer resolves (whoever verifies it next must not receive its mail).
        expect((yield* call("DELETE", `/v1/domains/${domain.id}`, { token: a.token })).status).toBe(200)
        expect(Option.isNone(yield* directory.resolveHandle(reg.name, "billing"))).toBe(true)

        expect(parseRegistryRecipient(`registry:${reg.name}/billing`)).toEqual({ name: reg.name, handle: "billing" })
        expect(parseRegistryRecipient("registry:acme-agents/billing.bot_1")).toEqual({ name: "acme-agents", handle: "billing.bot_1" })
        for (const bad of ["acme-agents/billing", "registry:acme-agents", "registry:AC/billing", "registry:acme-agents/", "registry:acme-agents/a/b", "billing@acme.com"]) {
          expect(parseRegistryRecipient(bad), bad).toBeUndefined()
        }
      }))
  })
})
