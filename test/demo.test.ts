/**
 * The demo sandbox over real HTTP: every operation answers without a credential, in the response
 * schema of the authenticated operation it mirrors (the OpenAPI document points both at the same
 * component, and the bodies decode with the real schemas), the same bytes on every call, filters and
 * cursors like the real lists, nothing written but its own limiter window, and that window is its
 * own: it neither uses up nor is used up by an organization's.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Either, Layer, Schema } from "effect"
import { Account } from "../src/account/Api.js"
import { WebhookDelivery } from "../src/deliveries/Api.js"
import { Email, EmailSummary } from "../src/emails/Api.js"
import { Provisioning } from "../src/identity/Provisioning.js"
import { SearchResponse } from "../src/search/Api.js"
import { SentEmail } from "../src/sending/Api.js"
import { Thread, ThreadWithMessages } from "../src/threads/Api.js"
import { DEMO_RATE_LIMIT } from "../src/platform/RateLimits.js"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { runCli } from "./support/cli.js"
import { TestServer, testService } from "./support/harness.js"
import { call, call as callAs } from "./support/http.js"

// Behind a trusted proxy (loopback), a test block can be a client of its own: the demo window is per client.
const Env = Provisioning.Default.pipe(Layer.provideMerge(testService({ TRUSTED_PROXIES: "127.0.0.0/8" })))

/** Row counts of every table but the limiter's windows (the only thing a demo call may write). */
const rowCounts = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const tables = yield* sql<{ table_name: string }>`
    SELECT table_name FROM information_schema.tables
    WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' AND table_name <> 'rate_limit_windows'
    ORDER BY table_name`
  const counts: Record<string, number> = {}
  for (const { table_name } of tables) {
    const rows = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql(table_name)}`
    counts[table_name] = rows[0]!.n
  }
  return counts
})

const decodes = <A, I>(schema: Schema.Schema<A, I>, value: unknown) => {
  const result = Schema.decodeUnknownEither(schema, { onExcessProperty: "error" })(value)
  if (Either.isLeft(result)) throw new Error(String(result.left))
  return true
}

layer(Env, { timeout: 120_000, excludeTestServices: true })("demo", (it) => {
  describe("operations", () => {
    it.effect("answer without a credential, with the real operations' schemas, identically on every call", () =>
      Effect.gen(function*() {
        const account = yield* call("GET", "/v1/demo/account")
        expect(account.status).toBe(200)
        expect(decodes(Account, account.body.data)).toBe(true)
        expect(account.body.data.managed_inbox_address).toBe("agent@demo.example")

        const emails = yield* call("GET", "/v1/demo/emails")
        expect(emails.status).toBe(200)
        expect(emails.body.data.length).toBeGreaterThanOrEqual(6)
        for (const e of emails.body.data) expect(decodes(EmailSummary, e)).toBe(true)
        expect(emails.body.meta).toEqual({ total: emails.body.data.length, limit: 50, cursor: null })
        const times = emails.body.data.map((e: { received_at: string }) => Date.parse(e.received_at))
        expect([...times].sort((a, b) => b - a)).toEqual(times)
        expect(emails.body.data.map((e: { status: string }) => e.status)).toContain("rejected")

        const first = emails.body.data[0]
        const one = yield* call("GET", `/v1/demo/emails/${first.id}`)
        expect(one.status).toBe(200)
        expect(decodes(Email, one.body.data)).toBe(true)
        expect(one.body.data.text.length).toBeGreaterThan(0)
        // A reply in the story names its parent, as a received reply would.
        const reply = emails.body.data.find((e: { subject: string }) => e.subject.startsWith("Re: "))
        const replyDetail = yield* call("GET", `/v1/demo/emails/${reply.id}`)
        expect(replyDetail.body.data.in_reply_to).toMatch(/^<demo-/)
        expect(replyDetail.body.data.references).toContain(replyDetail.body.data.in_reply_to)

        const deliveries = yield* call("GET", "/v1/demo/webhooks/deliveries")
        expect(deliveries.status).toBe(200)
        for (const d of deliveries.body.data) expect(decodes(WebhookDelivery, d)).toBe(true)
        const ids = new Set(emails.body.data.map((e: { id: string }) => e.id))
        for (const d of deliveries.body.data) expect(ids.has(d.email_id)).toBe(true)
        expect(new Set(deliveries.body.data.map((d: { status: string }) => d.status))).toEqual(new Set(["delivered", "pending"]))

        const threads = yield* call("GET", "/v1/demo/threads")
        expect(threads.status).toBe(200)
        for (const t of threads.body.data) expect(decodes(Thread, t)).toBe(true)
        const invoice = threads.body.data.find((t: { subject: string }) => t.subject === "Invoice INV-2041 for January")
        expect(invoice).toMatchObject({ message_count: 3, received_count: 3 })
        const lastActivity = threads.body.data.map((t: { last_message_at: string }) => Date.parse(t.last_message_at))
        expect([...lastActivity].sort((a, b) => b - a)).toEqual(lastActivity)
        // Every accepted email is in exactly one thread, and no rejected one is.
        const accepted = emails.body.data.filter((e: { status: string }) => e.status === "accepted")
        expect(threads.body.data.reduce((n: number, t: { message_count: number }) => n + t.message_count, 0)).toBe(accepted.length)
        const thread = yield* call("GET", `/v1/demo/threads/${invoice.id}`)
        expect(thread.status).toBe(200)
        expect(decodes(ThreadWithMessages, thread.body.data)).toBe(true)
        expect(thread.body.data.messages.map((m: { subject: string }) => m.subject)).toEqual([
          "Invoice INV-2041 for January", "Re: Invoice INV-2041 for January", "Re: Invoice INV-2041 for January"
        ])
        for (const m of thread.body.data.messages) {
          const e = emails.body.data.find((x: { id: string }) => x.id === m.id)
          expect(e.thread_id).toBe(invoice.id)
        }
        const watched = threads.body.data.find((t: { subject: string }) => t.subject.startsWith("Your application"))
        expect((yield* call("GET", `/v1/demo/threads/${watched.id}`)).body.data.watches).toHaveLength(1)

        for (const path of ["/v1/demo/account", "/v1/demo/emails?limit=3", `/v1/demo/emails/${first.id}`, "/v1/demo/webhooks/deliveries"]) {
          const again = yield* call("GET", path)
          const before = path === "/v1/demo/account" ? account : path.includes("deliveries") ? deliveries : path.includes("limit") ? undefined : one
          if (before !== undefined) expect(again.text, path).toBe(before.text)
          const third = yield* call("GET", path)
          expect(third.text, path).toBe(again.text)
        }
      }))

    it.effect("the OpenAPI document gives each demo operation the very response component of its authenticated twin", () =>
      Effect.gen(function*() {
        const spec = (yield* call("GET", "/v1/openapi.json")).body
        const ok = (path: string) => spec.paths[path].get.responses["200"].content["application/json"].schema
        const twins: ReadonlyArray<readonly [string, string]> = [
          ["/v1/demo/account", "/v1/account"],
          ["/v1/demo/emails", "/v1/emails"],
          ["/v1/demo/emails/{id}", "/v1/emails/{id}"],
          ["/v1/demo/webhooks/deliveries", "/v1/webhooks/deliveries"],
          ["/v1/demo/threads", "/v1/threads"],
          ["/v1/demo/threads/{id}", "/v1/threads/{id}"],
          ["/v1/demo/search", "/v1/search"]
        ]
        const posted = (path: string) => spec.paths[path].post
        expect(posted("/v1/demo/send-mail").requestBody).toEqual(posted("/v1/send-mail").requestBody)
        expect(posted("/v1/demo/send-mail").responses["201"]).toEqual(posted("/v1/send-mail").responses["201"])
        for (const [demo, real] of twins) {
          expect(ok(demo), demo).toEqual(ok(real))
          expect(ok(demo).$ref, demo).toMatch(/^#\/components\/schemas\//)
          expect(spec.paths[demo].get.security ?? [], demo).toEqual([])
          // The same query parameters as the real list, by name.
          const names = (p: string) => (spec.paths[p].get.parameters ?? []).map((x: { name: string }) => x.name).sort()
          expect(names(demo), demo).toEqual(names(real))
        }
      }))

    it.effect("lists filter and page like the real ones; bad input is refused in the usual envelope", () =>
      Effect.gen(function*() {
        const all = (yield* call("GET", "/v1/demo/emails")).body.data as Array<{ id: string; from: string; status: string }>
        const seen: Array<string> = []
        let cursor: string | null = null
        do {
          const page: { body: { data: Array<{ id: string }>; meta: { cursor: string | null; total: number } } } =
            yield* call("GET", `/v1/demo/emails?limit=3${cursor !== null ? `&cursor=${cursor}` : ""}`)
          expect(page.body.data.length).toBeLessThanOrEqual(3)
          expect(page.body.meta.total).toBe(all.length)
          seen.push(...page.body.data.map((e) => e.id))
          cursor = page.body.meta.cursor
        } while (cursor !== null)
        expect(seen).toEqual(all.map((e) => e.id))

        const maria = yield* call("GET", "/v1/demo/emails?sender=MARIA@northwind.example")
        expect(maria.body.data.length).toBe(all.filter((e) => e.from === "maria@northwind.example").length)
        expect(maria.body.data.length).toBeGreaterThan(1)
        const rejected = yield* call("GET", "/v1/demo/emails?status=rejected")
        expect(rejected.body.data.map((e: { status: string }) => e.status)).toEqual(["rejected"])
        const later = yield* call("GET", "/v1/demo/emails?date_from=2026-01-08T00:00:00Z")
        expect(later.body.data.length).toBe(2)
        const sams = yield* call("GET", "/v1/demo/threads?participant=LEE@contoso.example")
        expect(sams.body.data.map((t: { subject: string }) => t.subject)).toEqual(["Can we move Thursday's call?"])
        const threadPage = yield* call("GET", "/v1/demo/threads?limit=1")
        expect(threadPage.body.meta.cursor).not.toBeNull()
        const nextThreads = yield* call("GET", `/v1/demo/threads?limit=1&cursor=${threadPage.body.meta.cursor}`)
        expect(nextThreads.body.data[0].id).not.toBe(threadPage.body.data[0].id)
        expect((yield* call("GET", "/v1/demo/threads/00000000-0000-4000-8000-000000000000")).status).toBe(404)
        const forOne = yield* call("GET", `/v1/demo/webhooks/deliveries?email_id=${all[1]!.id}`)
        expect(forOne.body.data.map((d: { email_id: string }) => d.email_id)).toEqual([all[1]!.id])

        const missing = yield* call("GET", "/v1/demo/emails/00000000-0000-4000-8000-000000000000")
        expect(missing.status).toBe(404)
        expect(missing.body.error.code).toBe("not_found")
        const badId = yield* call("GET", "/v1/demo/emails/nope")
        expect(badId.status).toBe(400)
        expect(badId.body.error.code).toBe("validation_error")
        const badLimit = yield* call("GET", "/v1/demo/emails?limit=0")
        expect(badLimit.status).toBe(400)
        expect(badLimit.body.error.code).toBe("validation_error")
        const badCursor = yield* call("GET", "/v1/demo/emails?cursor=garbage")
        expect(badCursor.status).toBe(400)
        expect(badCursor.body.error.code).toBe("validation_error")
      }))
  })

  describe("CLI", () => {
    it.effect("mailroom demo … reads the sandbox with no login: tables, --json, a missing email exits 3", () =>
      Effect.gen(function*() {
        const server = yield* TestServer
        const env = { baseUrl: server.baseUrl, configHome: mkdtempSync(join(tmpdir(), "mailroom-demo-")) }
        const cli = (...args: Array<string>) => Effect.promise(() => runCli(args, env))
        const table = yield* cli("demo", "emails", "--sender", "maria@northwind.example")
        expect(table.code, table.stderr).toBe(0)
        expect(table.stdout).toContain("Invoice INV-2041 for January")
        expect(table.stdout).not.toContain("lottery")
        const listed = yield* cli("demo", "emails", "--json")
        expect(listed.code, listed.stderr).toBe(0)
        const emails = JSON.parse(listed.stdout).data as Array<{ id: string; subject: string }>
        const one = yield* cli("demo", "email", emails[0]!.id)
        expect(one.code, one.stderr).toBe(0)
        expect(one.stdout).toContain(emails[0]!.subject)
        const account = yield* cli("demo", "account", "--json")
        expect(JSON.parse(account.stdout).managed_inbox_address).toBe("agent@demo.example")
        const deliveries = yield* cli("demo", "deliveries", "--status", "pending", "--json")
        expect((JSON.parse(deliveries.stdout).data as Array<{ status: string }>).map((d) => d.status)).toEqual(["pending"])
        const threads = yield* cli("demo", "threads", "--participant", "sam@contoso.example", "--json")
        expect(threads.code, threads.stderr).toBe(0)
        const call = JSON.parse(threads.stdout).data[0] as { id: string }
        const thread = yield* cli("demo", "thread", call.id)
        expect(thread.code, thread.stderr).toBe(0)
        expect(thread.stdout).toContain("Re: Can we move Thursday's call?")
        expect(thread.stdout).toContain("lee@contoso.example")
        const found = yield* cli("demo", "search", "invoice", "--mode", "lexical")
        expect(found.code, found.stderr).toBe(0)
        expect(found.stdout).toContain("Invoice INV-2041")
        expect(found.stderr).toContain("3 results (lexical")
        const missing = yield* cli("demo", "email", "00000000-0000-4000-8000-000000000000")
        expect(missing.code).toBe(3)
        expect(missing.stderr).toContain("not_found")
      }), 300_000)
  })
  describe("search", () => {
    it.effect("lexical, semantic and hybrid over the demo mailbox, in the real response shape, the same results every call", () =>
      Effect.gen(function*() {
        // This block's own client address: its polling does not use up the other blocks' demo window.
        const call = (method: string, path: string) => callAs(method, path, { headers: { "x-forwarded-for": "198.51.100.23" } })
        const lexical = yield* call("GET", "/v1/demo/search?q=invoice&mode=lexical")
        expect(lexical.status, lexical.text).toBe(200)
        expect(decodes(SearchResponse, lexical.body)).toBe(true)
        expect(lexical.body.meta).toMatchObject({ mode: "lexical", embedding_model: null })
        const subjects = lexical.body.data.results.map((r: { subject: string }) => r.subject)
        expect(subjects.length).toBe(3)
        for (const s of subjects) expect(s).toMatch(/Invoice INV-2041/)
        for (const r of lexical.body.data.results) expect(r.matched).toEqual(["lexical"])
        // A typo still finds it (trigram), an exclusion removes it, spam is never searched.
        const typo = yield* call("GET", "/v1/demo/search?q=invoce&mode=lexical")
        expect(typo.body.data.results[0].subject).toMatch(/Invoice/)
        const excluded = yield* call("GET", `/v1/demo/search?q=${encodeURIComponent("invoice -purchase")}&mode=lexical`)
        expect(excluded.body.data.results.length).toBe(2)
        const spam = yield* call("GET", "/v1/demo/search?q=lottery&mode=lexical")
        expect(spam.body.data.results).toEqual([])

        // The demo's vectors are made in the background after the first search: until then, nothing semantic.
        let semantic = yield* call("GET", `/v1/demo/search?q=${encodeURIComponent("rescheduling a meeting")}&mode=semantic`)
        for (let i = 0; i < 50 && semantic.status === 200 && semantic.body.data.results.length === 0; i++) {
          yield* Effect.sleep("1 second")
          semantic = yield* call("GET", `/v1/demo/search?q=${encodeURIComponent("rescheduling a meeting")}&mode=semantic`)
        }
        expect(semantic.status, semantic.text).toBe(200)
        expect(semantic.body.meta.embedding_model).toEqual(expect.any(String))
        expect(semantic.body.data.results.slice(0, 3).map((r: { subject: string }) => r.subject)).toContain("Can we move Thursday's call?")

        const hybrid = yield* call("GET", "/v1/demo/search?q=invoice")
        expect(hybrid.body.meta.mode).toBe("hybrid")
        expect(hybrid.body.data.results[0].matched).toEqual(["lexical", "semantic"])
        const again = yield* call("GET", "/v1/demo/search?q=invoice")
        expect(again.body.data).toEqual(hybrid.body.data)

        const sent = yield* call("GET", "/v1/demo/search?q=invoice&scope=sent&mode=lexical")
        expect(sent.body.data.results.every((r: { kind: string }) => r.kind === "sent")).toBe(true)
        const bad = yield* call("GET", "/v1/demo/search?q=")
        expect(bad.status).toBe(400)
        expect(bad.body.error.code).toBe("validation_error")
      }), 120_000)
  })

  describe("send-mail", () => {
    it.effect("validates exactly like POST /send-mail and answers the sent email it would, sending and storing nothing", () =>
      Effect.gen(function*() {
        const as = { "x-forwarded-for": "198.51.100.24" }
        const p = yield* Provisioning
        const org = yield* p.createOrganization({ name: "Demo twin", plan: "developer" })
        const key = yield* p.issueApiKey(org.id)
        const body = { from: "Agent <agent@demo.example>", to: ["maria@northwind.example"], subject: "Re: Invoice", text: "Paid, thanks." }
        const sent = yield* call("POST", "/v1/demo/send-mail", { body, headers: { ...as, "idempotency-key": "demo-1" } })
        expect(sent.status, sent.text).toBe(201)
        expect(decodes(SentEmail, sent.body.data)).toBe(true)
        expect(sent.headers.get("idempotency-key")).toBe("demo-1")
        expect(sent.body.data).toMatchObject({
          status: "sent",
          from: "Agent <agent@demo.example>",
          to: ["maria@northwind.example"],
          subject: "Re: Invoice",
          error: null,
          content_discarded: false
        })
        const again = yield* call("POST", "/v1/demo/send-mail", { body, headers: as })
        expect(again.body.data).toEqual(sent.body.data)
        const tagged = yield* call("POST", "/v1/demo/send-mail", { body: { ...body, from: "agent+billing@demo.example" }, headers: as })
        expect(tagged.status).toBe(201)
        expect(tagged.body.data.id).not.toBe(sent.body.data.id)
        const later = new Date(Date.now() + 3_600_000).toISOString()
        const scheduled = yield* call("POST", "/v1/demo/send-mail", { body: { ...body, send_at: later }, headers: as })
        expect(scheduled.body.data).toMatchObject({ status: "scheduled", sent_at: null })
        expect(Date.parse(scheduled.body.data.send_at)).toBe(Date.parse(later))

        const foreign = yield* call("POST", "/v1/demo/send-mail", { body: { ...body, from: "me@example.com" }, headers: as })
        expect(foreign.status).toBe(403)
        expect(foreign.body.error).toMatchObject({ code: "cannot_send_from_domain", details: { valid_senders: ["agent@demo.example"] } })
        const discard = yield* call("POST", "/v1/demo/send-mail", { body: { ...body, discard_content: true }, headers: as })
        expect(discard.status).toBe(403)
        expect(discard.body.error.code).toBe("discard_not_enabled")

        // Each invalid body: the same 400 and the same issues as the authenticated operation.
        const invalid: ReadonlyArray<Record<string, unknown>> = [
          { ...body, text: undefined },
          { ...body, to: [] },
          { ...body, to: "not an address" },
          { ...body, subject: "" },
          { ...body, subject: "two\nlines" },
          { ...body, headers: { "Reply-To": "x@example.com" } },
          { ...body, send_at: "2020-01-01T00:00:00Z" },
          { ...body, send_at: new Date(Date.now() + 40 * 86_400_000).toISOString() },
          { ...body, attachments: [{ filename: "a.txt", content_base64: "***" }] },
          { ...body, to: Array.from({ length: 51 }, (_, i) => `r${i}@example.com`) },
          { ...body, unknown_field: 1 },
          { ...body, to: ["registry:nope/none"] }
        ]
        for (const b of invalid) {
          const clean = JSON.parse(JSON.stringify(b))
          const demo = yield* call("POST", "/v1/demo/send-mail", { body: clean, headers: as })
          const real = yield* call("POST", "/v1/send-mail", { body: clean, token: key.apiKey })
          expect(demo.status, JSON.stringify(clean)).toBe(400)
          expect(real.status, JSON.stringify(clean)).toBe(400)
          expect(demo.body.error, JSON.stringify(clean)).toEqual(real.body.error)
        }
      }), 120_000)
  })

  // Last: it exhausts the demo window of this test server's client address.
  describe("isolation", () => {
    it.effect("a demo call writes nothing but its limiter window; its window and an organization's never touch", () =>
      Effect.gen(function*() {
        const p = yield* Provisioning
        const org = yield* p.createOrganization({ name: "Demo isolation", plan: "developer" })
        const key = yield* p.issueApiKey(org.id)
        const before = yield* rowCounts

        const own = yield* call("GET", "/v1/account", { token: key.apiKey })
        const orgRemaining = Number(own.headers.get("ratelimit-remaining"))
        // Demo calls made with the organization's credential still count on the demo window only.
        const first = yield* call("GET", "/v1/demo/emails", { token: key.apiKey })
        expect(first.headers.get("ratelimit-policy")).toBe(`${DEMO_RATE_LIMIT.limit};w=${DEMO_RATE_LIMIT.windowSeconds}`)
        const demoRemaining = Number(first.headers.get("ratelimit-remaining"))
        for (let i = 0; i < 4; i++) yield* call("GET", "/v1/demo/account", { token: key.apiKey })
        const ownAgain = yield* call("GET", "/v1/account", { token: key.apiKey })
        expect(Number(ownAgain.headers.get("ratelimit-remaining"))).toBe(orgRemaining - 1)

        // Exhaust the demo window: the 429 is the demo's, and the organization is unaffected.
        let refused: { status: number; headers: Headers; body: { error: { code: string } } } | undefined
        for (let i = 0; i < demoRemaining + 2 && refused === undefined; i++) {
          const r = yield* call("GET", "/v1/demo/account")
          if (r.status === 429) refused = r
        }
        expect(refused?.status).toBe(429)
        expect(refused!.body.error.code).toBe("rate_limited")
        expect(Number(refused!.headers.get("retry-after"))).toBeGreaterThan(0)
        const stillOk = yield* call("GET", "/v1/account", { token: key.apiKey })
        expect(stillOk.status).toBe(200)
        expect(Number(stillOk.headers.get("ratelimit-remaining"))).toBe(orgRemaining - 2)

        const send = yield* call("POST", "/v1/demo/send-mail", {
          body: { from: "agent@demo.example", to: "x@example.com", subject: "hi", text: "hi" },
          headers: { "x-forwarded-for": "198.51.100.25" }
        })
        expect(send.status).toBe(201)
        expect(yield* rowCounts).toEqual(before)
      }))
  })
})
