/**
 * Labels and read state of received mail, from outside: mail arrives over real SMTP, the API sets
 * labels (a set, replaced whole) and the read state, lists filter by both, threads show the union of
 * their emails' labels and how many are unread, every bad body is 400 `validation_error` naming the
 * field, and another organization's email is 404.
 */
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import nodemailer, { type SendMailOptions } from "nodemailer"
import { Provisioning } from "../src/identity/Provisioning.js"
import { type CliEnv, runCli } from "./support/cli.js"
import { TestServer, testService } from "./support/harness.js"
import { call } from "./support/http.js"

const Env = Provisioning.Default.pipe(Layer.provideMerge(testService({ DNS_SERVER: "127.0.0.1:9" })))

const newOrg = (name = "Labels") =>
  Effect.gen(function*() {
    const p = yield* Provisioning
    const org = yield* p.createOrganization({ name, plan: "developer" })
    const key = yield* p.issueApiKey(org.id)
    return { orgId: org.id, apiKey: key.apiKey, address: org.managedInboxAddress! }
  })

let seq = 0
const mid = (tag: string) => `<${tag}-${Date.now().toString(36)}-${seq++}@example.com>`

/** Sends over SMTP and answers the stored email's id (looked up by its Message-ID through the API). */
const receive = (apiKey: string, message: SendMailOptions & { messageId: string }) =>
  Effect.gen(function*() {
    const server = yield* TestServer
    yield* Effect.promise(async () => {
      const transport = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
      try {
        await transport.sendMail(message)
      } finally {
        transport.close()
      }
    })
    const list = yield* call("GET", "/v1/emails?limit=100", { token: apiKey })
    const found = list.body.data.find((e: { message_id: string }) => e.message_id === message.messageId)
    expect(found).toBeDefined()
    return found as { id: string; thread_id: string; labels: Array<string>; read: boolean }
  })

const ids = (body: { data: Array<{ id: string }> }) => body.data.map((e) => e.id).sort()

layer(Env, { timeout: 120_000, excludeTestServices: true })("labels and read state", (it) => {
  describe("PATCH /v1/emails/{id}", () => {
    it.effect("a new email has no labels and is unread; labels replace the set (sorted, once each); read toggles", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const e = yield* receive(org.apiKey, { from: "ann@example.com", to: org.address, subject: "Invoice", text: "attached", messageId: mid("a") })
        expect([e.labels, e.read]).toEqual([[], false])

        const set = yield* call("PATCH", `/v1/emails/${e.id}`, { token: org.apiKey, body: { labels: ["invoices", "agent:todo", "invoices", "q4_2026-x"] } })
        expect(set.status).toBe(200)
        expect(set.body.data).toMatchObject({ id: e.id, labels: ["agent:todo", "invoices", "q4_2026-x"], read: false, extracted_text: "attached" })

        // `read` alone leaves the labels; `labels` alone leaves the read state.
        const read = yield* call("PATCH", `/v1/emails/${e.id}`, { token: org.apiKey, body: { read: true } })
        expect([read.status, read.body.data.labels, read.body.data.read]).toEqual([200, ["agent:todo", "invoices", "q4_2026-x"], true])
        const replaced = yield* call("PATCH", `/v1/emails/${e.id}`, { token: org.apiKey, body: { labels: ["done"] } })
        expect([replaced.body.data.labels, replaced.body.data.read]).toEqual([["done"], true])

        const got = yield* call("GET", `/v1/emails/${e.id}`, { token: org.apiKey })
        expect([got.body.data.labels, got.body.data.read]).toEqual([["done"], true])

        // Both at once; an empty list clears; exactly 20 labels of 64 characters are fine.
        const both = yield* call("PATCH", `/v1/emails/${e.id}`, { token: org.apiKey, body: { labels: [], read: false } })
        expect([both.body.data.labels, both.body.data.read]).toEqual([[], false])
        const twenty = Array.from({ length: 20 }, (_, i) => `${String(i).padStart(2, "0")}${"x".repeat(62)}`)
        const full = yield* call("PATCH", `/v1/emails/${e.id}`, { token: org.apiKey, body: { labels: twenty } })
        expect([full.status, full.body.data.labels]).toEqual([200, twenty])
      }))

    it.effect("limits and malformed bodies are 400 validation_error naming the field; nothing changes", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const e = yield* receive(org.apiKey, { from: "ann@example.com", to: org.address, subject: "Limits", text: "x", messageId: mid("l") })
        yield* call("PATCH", `/v1/emails/${e.id}`, { token: org.apiKey, body: { labels: ["keep"] } })
        const patch = (body: unknown) => call("PATCH", `/v1/emails/${e.id}`, { token: org.apiKey, body })
        const refused = (reply: { status: number; body: { error: { code: string; message: string } } }) => {
          expect([reply.status, reply.body.error.code]).toEqual([400, "validation_error"])
          return reply.body.error.message
        }

        expect(refused(yield* patch({ labels: Array.from({ length: 21 }, (_, i) => `l${i}`) }))).toMatch(/labels.*at most 20 labels/)
        expect(refused(yield* patch({ labels: ["x".repeat(65)] }))).toMatch(/labels.*1-64 characters of a-z, 0-9, _, : and -/)
        for (const bad of ["", "Urgent", "with space", "ünïcode", "a/b", "a.b"]) {
          expect(refused(yield* patch({ labels: [bad] }))).toMatch(/labels/)
        }
        expect(refused(yield* patch({ labels: "inbox" }))).toMatch(/labels/)
        expect(refused(yield* patch({ labels: [7] }))).toMatch(/labels/)
        expect(refused(yield* patch({ read: "yes" }))).toMatch(/read/)
        expect(refused(yield* patch({}))).toMatch(/at least one property is required/)
        expect(refused(yield* patch({ colour: "red" }))).toMatch(/colour/)
        refused(yield* call("PATCH", `/v1/emails/${e.id}`, { token: org.apiKey, raw: "" }))
        refused(yield* call("PATCH", "/v1/emails/not-a-uuid", { token: org.apiKey, body: { read: true } }))

        const after = yield* call("GET", `/v1/emails/${e.id}`, { token: org.apiKey })
        expect([after.body.data.labels, after.body.data.read]).toEqual([["keep"], false])
      }))

    it.effect("another organization's email and an unknown id are 404 not_found; a missing credential is 401", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const other = yield* newOrg("Other")
        const e = yield* receive(org.apiKey, { from: "ann@example.com", to: org.address, subject: "Mine", text: "x", messageId: mid("o") })
        const foreign = yield* call("PATCH", `/v1/emails/${e.id}`, { token: other.apiKey, body: { labels: ["stolen"], read: true } })
        expect([foreign.status, foreign.body.error.code]).toEqual([404, "not_found"])
        const unknown = yield* call("PATCH", "/v1/emails/00000000-0000-4000-8000-000000000000", { token: org.apiKey, body: { read: true } })
        expect([unknown.status, unknown.body.error.code]).toEqual([404, "not_found"])
        const anonymous = yield* call("PATCH", `/v1/emails/${e.id}`, { body: { read: true } })
        expect([anonymous.status, anonymous.body.error.code]).toEqual([401, "unauthorized"])
        const mine = yield* call("GET", `/v1/emails/${e.id}`, { token: org.apiKey })
        expect([mine.body.data.labels, mine.body.data.read]).toEqual([[], false])
        // The other organization's lists never show it, whatever the filter.
        expect((yield* call("GET", "/v1/emails?label=stolen", { token: other.apiKey })).body.data).toEqual([])
      }))
  })

  describe("filters and threads", () => {
    it.effect("GET /emails filters by label and unread; threads show the union of labels and unread_count, and filter by label", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const root = mid("root")
        const a = yield* receive(org.apiKey, { from: "ann@example.com", to: org.address, subject: "Plan", text: "first", messageId: root })
        const b = yield* receive(org.apiKey, {
          from: "bob@example.com", to: org.address, subject: "Re: Plan", text: "second", messageId: mid("reply"), inReplyTo: root, references: [root]
        })
        const c = yield* receive(org.apiKey, { from: "cy@example.com", to: org.address, subject: "Lunch", text: "third", messageId: mid("lunch") })
        expect(b.thread_id).toBe(a.thread_id)

        yield* call("PATCH", `/v1/emails/${a.id}`, { token: org.apiKey, body: { labels: ["project", "urgent"] } })
        yield* call("PATCH", `/v1/emails/${b.id}`, { token: org.apiKey, body: { labels: ["project", "agent:done"], read: true } })
        yield* call("PATCH", `/v1/emails/${c.id}`, { token: org.apiKey, body: { labels: ["personal"] } })

        const byLabel = yield* call("GET", "/v1/emails?label=project", { token: org.apiKey })
        expect([byLabel.status, ids(byLabel.body), byLabel.body.meta.total]).toEqual([200, [a.id, b.id].sort(), 2])
        expect(ids((yield* call("GET", "/v1/emails?unread=true", { token: org.apiKey })).body)).toEqual([a.id, c.id].sort())
        expect(ids((yield* call("GET", "/v1/emails?unread=false", { token: org.apiKey })).body)).toEqual([b.id])
        expect(ids((yield* call("GET", "/v1/emails?label=project&unread=true", { token: org.apiKey })).body)).toEqual([a.id])
        expect((yield* call("GET", "/v1/emails?label=nothing", { token: org.apiKey })).body).toMatchObject({ data: [], meta: { total: 0 } })
        for (const bad of ["label=Bad%20Label", `label=${"x".repeat(65)}`, "unread=maybe"]) {
          const r = yield* call("GET", `/v1/emails?${bad}`, { token: org.apiKey })
          expect([r.status, r.body.error.code]).toEqual([400, "validation_error"])
        }

        const threads = yield* call("GET", "/v1/threads", { token: org.apiKey })
        const plan = threads.body.data.find((t: { id: string }) => t.id === a.thread_id)
        expect(plan).toMatchObject({ labels: ["agent:done", "project", "urgent"], unread_count: 1, message_count: 2 })
        const lunch = threads.body.data.find((t: { id: string }) => t.id === c.thread_id)
        expect(lunch).toMatchObject({ labels: ["personal"], unread_count: 1 })

        const one = yield* call("GET", `/v1/threads/${a.thread_id}`, { token: org.apiKey })
        expect(one.body.data).toMatchObject({ labels: ["agent:done", "project", "urgent"], unread_count: 1 })
        yield* call("PATCH", `/v1/emails/${a.id}`, { token: org.apiKey, body: { read: true } })
        expect((yield* call("GET", `/v1/threads/${a.thread_id}`, { token: org.apiKey })).body.data.unread_count).toBe(0)

        const labelled = yield* call("GET", "/v1/threads?label=urgent", { token: org.apiKey })
        expect([labelled.status, labelled.body.data.map((t: { id: string }) => t.id), labelled.body.meta.total]).toEqual([200, [a.thread_id], 1])
        expect((yield* call("GET", "/v1/threads?label=agent:done", { token: org.apiKey })).body.data.map((t: { id: string }) => t.id))
          .toEqual([a.thread_id])
        expect((yield* call("GET", "/v1/threads?label=none", { token: org.apiKey })).body.data).toEqual([])
        const bad = yield* call("GET", "/v1/threads?label=NO", { token: org.apiKey })
        expect([bad.status, bad.body.error.code]).toEqual([400, "validation_error"])
      }))
  })

  describe("CLI", () => {
    it.effect("mailroom emails label --add/--remove/--clear, read, unread, and list --label/--unread", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const server = yield* TestServer
        const env: CliEnv = {
          baseUrl: server.baseUrl,
          configHome: mkdtempSync(join(tmpdir(), "mailroom-cli-")),
          extra: { MAILROOM_API_KEY: org.apiKey }
        }
        const cli = (...args: Array<string>) => Effect.promise(() => runCli(args, env))
        const e = yield* receive(org.apiKey, { from: "ann@example.com", to: org.address, subject: "Cli", text: "x", messageId: mid("cli") })
        const other = yield* receive(org.apiKey, { from: "bob@example.com", to: org.address, subject: "Other", text: "y", messageId: mid("cli2") })

        const added = yield* cli("emails", "label", e.id, "--add", "inbox", "--add", "todo")
        expect(added.code, added.stderr).toBe(0)
        expect(added.stdout).toContain(`Labels of ${e.id}: inbox, todo`)
        const changed = yield* cli("emails", "label", e.id, "--add", "done", "--remove", "todo", "--json")
        expect(changed.code, changed.stderr).toBe(0)
        expect(JSON.parse(changed.stdout).labels).toEqual(["done", "inbox"])

        const read = yield* cli("emails", "read", e.id)
        expect([read.code, read.stdout.trim()]).toEqual([0, `Marked ${e.id} read`])
        const listed = yield* cli("emails", "list", "--label", "done", "--json")
        expect(JSON.parse(listed.stdout).data.map((x: { id: string }) => x.id)).toEqual([e.id])
        const unreadOnly = yield* cli("emails", "list", "--unread", "--json")
        expect(JSON.parse(unreadOnly.stdout).data.map((x: { id: string }) => x.id)).toEqual([other.id])
        expect((yield* cli("emails", "unread", e.id)).stdout.trim()).toBe(`Marked ${e.id} unread`)
        expect(JSON.parse((yield* cli("emails", "list", "--unread", "--json")).stdout).data.length).toBe(2)

        const cleared = yield* cli("emails", "label", e.id, "--clear", "--json")
        expect(JSON.parse(cleared.stdout).labels).toEqual([])

        // Refusals: nothing to do (usage), a bad label (the API's validation_error), another id (not found).
        const nothing = yield* cli("emails", "label", e.id)
        expect(nothing.code).not.toBe(0)
        expect(nothing.stderr).toContain("--add LABEL, --remove LABEL or --clear")
        const bad = yield* cli("emails", "label", e.id, "--add", "Not OK")
        expect(bad.code).not.toBe(0)
        expect(bad.stderr).toMatch(/labels/)
        const missing = yield* cli("emails", "read", "00000000-0000-4000-8000-000000000000")
        expect(missing.code).not.toBe(0)
        expect(missing.stderr).toMatch(/not found/)
      }), { timeout: 300_000 })
  })
})
