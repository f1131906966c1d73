/**
 * Threads: messages linked by Message-ID, In-Reply-To and References over real SMTP, in either
 * order, merges into the older thread, organizations kept apart, thread ids in the API and in event
 * payloads, the migration that threads stored mail, and the Threads API.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { cpSync, mkdirSync, readdirSync } from "node:fs"
import { join } from "node:path"
import nodemailer, { type SendMailOptions } from "nodemailer"
import { Provisioning } from "../src/identity/Provisioning.js"
import { MIGRATIONS_DIR, migrate } from "../src/platform/Database.js"
import { TestServer, tempDir, testService } from "./support/harness.js"
import { call } from "./support/http.js"
import { startReceiver } from "./support/receiver.js"

const Env = Provisioning.Default.pipe(Layer.provideMerge(testService({ DNS_SERVER: "127.0.0.1:9" })))

const newOrg = (name = "Threads") =>
  Effect.gen(function*() {
    const p = yield* Provisioning
    const org = yield* p.createOrganization({ name, plan: "developer" })
    const key = yield* p.issueApiKey(org.id)
    return { orgId: org.id, apiKey: key.apiKey, address: org.managedInboxAddress }
  })

const send = (message: SendMailOptions) =>
  Effect.flatMap(TestServer, (server) =>
    Effect.promise(async () => {
      const transport = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
      try {
        await transport.sendMail(message)
      } finally {
        transport.close()
      }
    }))

let seq = 0
const mid = (tag: string) => `<${tag}-${Date.now().toString(36)}-${seq++}@example.com>`

/** The thread id of the email with this Message-ID in the organization. */
const threadOf = (orgId: string, messageId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ thread_id: string }>`SELECT thread_id FROM emails WHERE org_id = ${orgId} AND message_id = ${messageId}`).pipe(
    Effect.map((rows) => {
      expect(rows.length).toBeGreaterThan(0)
      return rows[0]!.thread_id
    }),
    Effect.orDie
  )

layer(Env, { timeout: 120_000, excludeTestServices: true })("threads", (it) => {
  describe("threading on ingestion", () => {
    it.effect("a reply joins its parent's thread, in order and out of order", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const parent = mid("parent")
        const reply = mid("reply")
        yield* send({ from: "alice@example.com", to: org.address, subject: "Budget", text: "first", messageId: parent })
        yield* send({ from: "bob@example.com", to: org.address, subject: "Re: Budget", text: "second", messageId: reply, inReplyTo: parent, references: [parent] })
        expect(yield* threadOf(org.orgId, reply)).toBe(yield* threadOf(org.orgId, parent))

        // The reply first, then the parent it names: one thread.
        const lateParent = mid("late-parent")
        const earlyReply = mid("early-reply")
        yield* send({ from: "bob@example.com", to: org.address, subject: "Re: Travel", text: "r", messageId: earlyReply, inReplyTo: lateParent })
        yield* send({ from: "alice@example.com", to: org.address, subject: "Travel", text: "p", messageId: lateParent })
        const t = yield* threadOf(org.orgId, earlyReply)
        expect(yield* threadOf(org.orgId, lateParent)).toBe(t)
        expect(t).not.toBe(yield* threadOf(org.orgId, parent))

        // Known only through References (no In-Reply-To).
        const third = mid("third")
        yield* send({ from: "carol@example.com", to: org.address, subject: "Re: Re: Budget", text: "x", messageId: third, references: [parent, reply] })
        expect(yield* threadOf(org.orgId, third)).toBe(yield* threadOf(org.orgId, parent))

        // The API shows it.
        const list = yield* call("GET", "/v1/emails", { token: org.apiKey })
        for (const e of list.body.data) expect(e.thread_id).toMatch(/^[0-9a-f-]{36}$/)
        const one = list.body.data.find((e: { message_id: string }) => e.message_id === third)
        expect(one.thread_id).toBe(yield* threadOf(org.orgId, parent))
      }))

    it.effect("a message naming two threads merges them into the older one", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const a = mid("a")
        const b = mid("b")
        yield* send({ from: "a@example.com", to: org.address, subject: "A", text: "a", messageId: a })
        yield* Effect.sleep("5 millis")
        yield* send({ from: "b@example.com", to: org.address, subject: "B", text: "b", messageId: b })
        const ta = yield* threadOf(org.orgId, a)
        const tb = yield* threadOf(org.orgId, b)
        expect(ta).not.toBe(tb)
        expect(ta < tb).toBe(true) // time-ordered ids: A's thread is the older
        const c = mid("c")
        yield* send({ from: "c@example.com", to: org.address, subject: "Both", text: "c", messageId: c, references: [b, a] })
        expect(yield* threadOf(org.orgId, a)).toBe(ta)
        expect(yield* threadOf(org.orgId, b)).toBe(ta)
        expect(yield* threadOf(org.orgId, c)).toBe(ta)
      }))

    it.effect("the same Message-ID in two organizations never links them", () =>
      Effect.gen(function*() {
        const one = yield* newOrg("One")
        const two = yield* newOrg("Two")
        const shared = mid("shared")
        const reply = mid("reply")
        yield* send({ from: "x@example.com", to: one.address, subject: "Hi", text: "1", messageId: shared })
        yield* send({ from: "x@example.com", to: two.address, subject: "Hi", text: "2", messageId: shared })
        yield* send({ from: "y@example.com", to: two.address, subject: "Re: Hi", text: "3", messageId: reply, inReplyTo: shared })
        const t1 = yield* threadOf(one.orgId, shared)
        const t2 = yield* threadOf(two.orgId, shared)
        expect(t1).not.toBe(t2)
        expect(yield* threadOf(two.orgId, reply)).toBe(t2)
        const sql = yield* SqlClient.SqlClient
        const inOne = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM emails WHERE thread_id = ${t1}`
        expect(inOne[0]!.n).toBe(1)
        // One message to both organizations at once: one thread in each, still apart.
        const both = mid("both")
        yield* send({ from: "x@example.com", to: [one.address, two.address], subject: "Both", text: "b", messageId: both, inReplyTo: shared })
        expect(yield* threadOf(one.orgId, both)).toBe(t1)
        expect(yield* threadOf(two.orgId, both)).toBe(t2)
      }))

    it.scoped("the event payload carries the thread id", () =>
      Effect.gen(function*() {
        const hooks = yield* startReceiver
        const org = yield* newOrg()
        const created = yield* call("POST", "/v1/endpoints", { token: org.apiKey, body: { url: hooks.url("/t") } })
        expect(created.status).toBe(201)
        const m = mid("payload")
        yield* send({ from: "a@example.com", to: org.address, subject: "Payload", text: "p", messageId: m })
        for (let i = 0; i < 200 && hooks.received.length === 0; i++) yield* Effect.sleep("25 millis")
        const payload = JSON.parse(hooks.received[0]!.body)
        expect(payload.email.thread_id).toBe(yield* threadOf(org.orgId, m))
      }))
  })

  describe("threads API", () => {
    it.effect("lists threads by last activity with counts, participants, subject and snippet; pages; filters; gets one", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const other = yield* newOrg("Other")
        const p1 = mid("p1")
        const p2 = mid("p2")
        yield* send({ from: "Alice <alice@example.com>", to: org.address, cc: "Dan@Example.com", subject: "Quarterly plan", text: "Let us plan the quarter.", messageId: p1 })
        yield* send({ from: "erin@example.com", to: org.address, subject: "Lunch?", text: "Lunch at noon?", messageId: p2 })
        yield* send({ from: "bob@example.com", to: org.address, subject: "RE: Fwd: Quarterly plan", text: "  Sounds   good,\n\n count me in. " + "x".repeat(400), messageId: mid("r1"), inReplyTo: p1 })
        yield* send({ from: "zed@example.com", to: other.address, subject: "Not yours", text: "other org", messageId: mid("o") })

        const list = yield* call("GET", "/v1/threads", { token: org.apiKey })
        expect(list.status).toBe(200)
        expect(list.body.meta).toEqual({ total: 2, limit: 50, cursor: null })
        const [first, second] = list.body.data
        expect(second.subject).toBe("Lunch?")
        expect(first).toMatchObject({
          subject: "Quarterly plan",
          message_count: 2,
          received_count: 2,
          sent_count: 0,
          participants: ["alice@example.com", "bob@example.com", "dan@example.com", org.address].sort()
        })
        expect(first.snippet.startsWith("Sounds good, count me in. xxx")).toBe(true)
        expect(first.snippet.length).toBe(200)
        expect(Date.parse(first.last_message_at)).toBeGreaterThanOrEqual(Date.parse(second.last_message_at))
        expect(Date.parse(first.first_message_at)).toBeLessThan(Date.parse(first.last_message_at))

        // Pages of one, by cursor.
        const page1 = yield* call("GET", "/v1/threads?limit=1", { token: org.apiKey })
        expect(page1.body.data.map((t: { id: string }) => t.id)).toEqual([first.id])
        expect(page1.body.meta.total).toBe(2)
        const page2 = yield* call("GET", `/v1/threads?limit=1&cursor=${page1.body.meta.cursor}`, { token: org.apiKey })
        expect(page2.body.data.map((t: { id: string }) => t.id)).toEqual([second.id])
        expect(page2.body.meta.cursor).toBeNull()
        expect((yield* call("GET", "/v1/threads?cursor=nope", { token: org.apiKey })).body.error.code).toBe("validation_error")
        expect((yield* call("GET", "/v1/threads?limit=0", { token: org.apiKey })).status).toBe(400)

        // Filters: a participant (To, Cc or From, any case), and last activity.
        const dan = yield* call("GET", "/v1/threads?participant=DAN@example.com", { token: org.apiKey })
        expect(dan.body.data.map((t: { id: string }) => t.id)).toEqual([first.id])
        const erin = yield* call("GET", "/v1/threads?participant=erin@example.com", { token: org.apiKey })
        expect(erin.body.data.map((t: { id: string }) => t.id)).toEqual([second.id])
        const future = yield* call("GET", `/v1/threads?date_from=${new Date(Date.now() + 60_000).toISOString()}`, { token: org.apiKey })
        expect(future.body.meta.total).toBe(0)
        expect(future.body.data).toEqual([])
        const past = yield* call("GET", `/v1/threads?date_to=${second.last_message_at}`, { token: org.apiKey })
        expect(past.body.data.map((t: { id: string }) => t.id)).toEqual([second.id])

        const one = yield* call("GET", `/v1/threads/${first.id}`, { token: org.apiKey })
        expect(one.status).toBe(200)
        expect(one.body.data.messages.map((m: { from: string; direction: string }) => [m.from, m.direction])).toEqual([
          ["alice@example.com", "received"],
          ["bob@example.com", "received"]
        ])
        expect(one.body.data.messages[0]).toMatchObject({ message_id: p1, subject: "Quarterly plan", cc: ["dan@example.com"], snippet: "Let us plan the quarter." })
        expect(one.body.data.message_count).toBe(2)

        // Another organization's thread is not found; neither is an unknown id.
        const theirs = (yield* call("GET", "/v1/threads", { token: other.apiKey })).body.data[0].id
        expect((yield* call("GET", `/v1/threads/${theirs}`, { token: org.apiKey })).status).toBe(404)
        expect((yield* call("GET", "/v1/threads/00000000-0000-4000-8000-000000000000", { token: org.apiKey })).body.error.code).toBe("not_found")
        expect((yield* call("GET", "/v1/threads/not-a-uuid", { token: org.apiKey })).status).toBe(400)
        expect((yield* call("GET", "/v1/threads")).status).toBe(401)
      }))
  })

  describe("sent mail", () => {
    it.effect("a reply sent through the API joins its original's thread, and so does the answer to it; threads and search show both directions", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const original = mid("original")
        yield* send({ from: "Alice <alice@example.com>", to: org.address, subject: "Dinner on Friday?", text: "Are you free for dinner?", messageId: original })
        const emailId = (yield* call("GET", "/v1/emails", { token: org.apiKey })).body.data[0].id as string
        const t = yield* threadOf(org.orgId, original)

        const reply = yield* call("POST", `/v1/emails/${emailId}/reply`, { token: org.apiKey, body: { text: "Gladly, the tapas place at eight." } })
        expect(reply.status, reply.text).toBe(201)
        expect(reply.body.data.thread_id).toBe(t)
        expect(reply.body.data.in_reply_to).toBe(original)
        const sentMessageId = reply.body.data.message_id as string

        // Alice answers our reply: it names only the sent message, and joins the same thread.
        const answer = mid("answer")
        yield* send({ from: "alice@example.com", to: org.address, subject: "Re: Re: Dinner on Friday?", text: "Perfect, see you there.", messageId: answer, inReplyTo: sentMessageId })
        expect(yield* threadOf(org.orgId, answer)).toBe(t)

        const thread = yield* call("GET", `/v1/threads/${t}`, { token: org.apiKey })
        expect(thread.status).toBe(200)
        expect(thread.body.data).toMatchObject({ subject: "Dinner on Friday?", message_count: 3, received_count: 2, sent_count: 1 })
        expect(thread.body.data.messages.map((m: { direction: string }) => m.direction)).toEqual(["received", "sent", "received"])
        expect(thread.body.data.messages[1]).toMatchObject({ id: reply.body.data.id, from: org.address, message_id: sentMessageId, snippet: "Gladly, the tapas place at eight." })
        expect(thread.body.data.participants).toEqual(["alice@example.com", org.address].sort())
        expect(thread.body.data.snippet).toBe("Perfect, see you there.")

        // A new message (not a reply) starts a thread of its own, listed with its sent count.
        const fresh = yield* call("POST", "/v1/send-mail", { token: org.apiKey, body: { from: org.address, to: "Bob <bob@example.com>", subject: "Fresh topic", text: "Unrelated news." } })
        expect(fresh.status, fresh.text).toBe(201)
        expect(fresh.body.data.thread_id).not.toBe(t)
        const list = yield* call("GET", "/v1/threads", { token: org.apiKey })
        const listed = list.body.data.find((x: { id: string }) => x.id === fresh.body.data.thread_id)
        expect(listed).toMatchObject({ subject: "Fresh topic", message_count: 1, received_count: 0, sent_count: 1, participants: ["bob@example.com", org.address].sort() })
        const bob = yield* call("GET", "/v1/threads?participant=bob@example.com", { token: org.apiKey })
        expect(bob.body.data.map((x: { id: string }) => x.id)).toEqual([fresh.body.data.thread_id])

        // Search: sent mail is found with kind "sent" and its thread, and scope picks the direction.
        const q = (params: Record<string, string>) => call("GET", `/v1/search?${new URLSearchParams({ mode: "lexical", ...params })}`, { token: org.apiKey })
        const sent = yield* q({ q: "tapas", scope: "sent" })
        expect(sent.status, sent.text).toBe(200)
        expect(sent.body.data.results).toHaveLength(1)
        expect(sent.body.data.results[0]).toMatchObject({ kind: "sent", id: reply.body.data.id, thread_id: t, from: org.address, matched: ["lexical"] })
        expect((yield* q({ q: "tapas", scope: "received" })).body.data.results).toEqual([])
        const all = yield* q({ q: "dinner" })
        expect(new Set(all.body.data.results.map((r: { kind: string }) => r.kind))).toEqual(new Set(["received", "sent"]))
        const toBob = yield* q({ q: "news", to: "bob@example.com" })
        expect(toBob.body.data.results.map((r: { id: string }) => r.id)).toEqual([fresh.body.data.id])
        const inThread = yield* q({ q: "dinner or tapas or perfect", thread_id: t })
        expect(inThread.body.data.results).toHaveLength(3)
      }))
  })

  describe("the migration threading stored mail", () => {
    it.scoped("links mail stored before threads existed, across orders and merges, per organization", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* sql`CREATE SCHEMA premig`
        const dir = yield* tempDir
        const before = join(dir, "before")
        mkdirSync(before)
        for (const f of readdirSync(MIGRATIONS_DIR)) if (Number(f.slice(0, 4)) < 60) cpSync(join(MIGRATIONS_DIR, f), join(before, f))
        // Run the migrations in a schema of their own on the same database, as an older release did.
        const inSchema = <A, E, R>(e: Effect.Effect<A, E, R>) =>
          sql.withTransaction(Effect.zipRight(sql`SET LOCAL search_path TO premig, public`, e))
        yield* inSchema(Effect.asVoid(migrate(before)))
        const org = "10000000-0000-4000-8000-000000000001"
        const other = "10000000-0000-4000-8000-000000000002"
        yield* inSchema(sql`INSERT INTO organizations (id, name, plan) VALUES (${org}, 'a', 'developer'), (${other}, 'b', 'developer')`)
        const rows: Array<[string, string, string | null, Array<string>, string]> = [
          // id suffix, message id, in-reply-to, references, org
          ["01", "<p@x>", null, [], org],
          ["02", "<r@x>", "<p@x>", ["<p@x>"], org], // in order
          ["03", "<late-r@x>", "<late-p@x>", [], org], // the reply first …
          ["04", "<late-p@x>", null, [], org], // … then its parent
          ["05", "<bridge@x>", null, ["<r@x>", "<late-p@x>"], org], // merges both threads
          ["06", "<p@x>", null, [], other], // same id, other organization
          ["07", "<alone@x>", null, [], org]
        ]
        for (const [suffix, messageId, irt, refs, o] of rows) {
          yield* inSchema(sql`INSERT INTO emails (id, org_id, recipient, size_bytes, event_type, status, message_id, in_reply_to, "references", received_at)
            VALUES (${`20000000-0000-4000-8000-0000000000${suffix}`}, ${o}, 'in@agents.localhost', 1, 'email.received', 'accepted',
              ${messageId}, ${irt}, ${JSON.stringify(refs)}::jsonb, ${new Date(Date.UTC(2026, 0, 1, 0, Number(suffix)))})`)
        }
        // Sent mail stored before threads: a reply to "<alone@x>", and one naming nothing stored.
        for (const [suffix, irt] of [["08", "<alone@x>"], ["09", "<unknown@x>"]] as const) {
          yield* inSchema(sql`INSERT INTO sent_emails (id, org_id, status, from_header, from_address, subject, message_id, in_reply_to, "references", sent_at)
            VALUES (${`30000000-0000-4000-8000-0000000000${suffix}`}, ${org}, 'sent', 'in@agents.localhost', 'in@agents.localhost', 'Re: x',
              ${`<sent-${suffix}@x>`}, ${irt}, ${JSON.stringify([irt])}::jsonb, now())`)
        }
        yield* inSchema(Effect.asVoid(migrate(MIGRATIONS_DIR)))
        const threads = yield* inSchema(sql<{ id: string; thread_id: string }>`SELECT id, thread_id FROM emails ORDER BY id`)
        const t = (suffix: string) => threads.find((r) => r.id.endsWith(suffix))!.thread_id
        expect(new Set(["01", "02", "03", "04", "05"].map(t)).size).toBe(1)
        expect(t("06")).not.toBe(t("01"))
        expect(t("07")).not.toBe(t("01"))
        const sentThreads = yield* inSchema(sql<{ id: string; thread_id: string }>`SELECT id, thread_id FROM sent_emails ORDER BY id`)
        expect(sentThreads[0]!.thread_id).toBe(t("07"))
        expect(sentThreads[1]!.thread_id).not.toBe(t("07"))
        // Sent mail already sent is searchable.
        const docs = yield* inSchema(sql<{ n: number }>`SELECT count(*)::int AS n FROM search_documents WHERE kind = 'sent'`)
        expect(docs[0]!.n).toBe(2)
        // The thread kept is the oldest: its id carries the first message's time.
        expect(parseInt(t("01").replace(/-/g, "").slice(0, 12), 16)).toBe(Date.UTC(2026, 0, 1, 0, 1))
        yield* sql`DROP SCHEMA premig CASCADE`
      }))
  })
})

