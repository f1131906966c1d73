/**
 * Thread watches ("wake me if no reply") over real HTTP, SMTP and workerd: a watch fires its wake on
 * silence (the function gets `wake.command` naming the thread), ends as `replied` when received mail
 * joins the thread in time (never firing), as `thread_deleted` when the thread's last message is
 * deleted, goes with its function, and refuses bad input in the usual envelope.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import nodemailer from "nodemailer"
import { Provisioning } from "../src/identity/Provisioning.js"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { runCli } from "./support/cli.js"
import { TestServer, testService } from "./support/harness.js"
import { call } from "./support/http.js"

const Env = Provisioning.Default.pipe(
  Layer.provideMerge(testService({ FUNCTION_TIMEOUT: "10s", DELIVERY_RETRY_DELAYS: "300ms", DNS_SERVER: "127.0.0.1:9" }))
)

/** Every event the function receives, kept in its memory under `seen:<event id>`. */
const RECORDER = `export default { async fetch(request, env) {
  const event = await request.json();
  await env.MEMORY.put("seen:" + event.id, JSON.stringify({ event: event.event, wake: event.wake ?? null }));
  return new Response("ok");
} }`

const newOrg = (plan: "agent" | "developer" = "developer") =>
  Effect.gen(function*() {
    const p = yield* Provisioning
    const org = yield* p.createOrganization({ name: "Watch", plan })
    const key = yield* p.issueApiKey(org.id)
    return { orgId: org.id, token: key.apiKey, inbox: org.managedInboxAddress! }
  })

let seq = 0
const deploy = (token: string) =>
  Effect.gen(function*() {
    const r = yield* call("POST", "/v1/functions", { token, body: { name: `watcher-${++seq}`, code: RECORDER } })
    expect(r.status, r.text).toBe(201)
    return r.body.data.id as string
  })

const until = <A, E, R>(what: string, probe: Effect.Effect<A | undefined, E, R>) =>
  Effect.gen(function*() {
    for (let i = 0; i < 200; i++) {
      const value = yield* probe
      if (value !== undefined) return value
      yield* Effect.sleep("100 millis")
    }
    return yield* Effect.dieMessage(`timed out waiting for ${what}`)
  })

const seenBy = (token: string, fnId: string) =>
  Effect.gen(function*() {
    const keys = yield* call("GET", `/v1/functions/${fnId}/memories?prefix=seen:`, { token })
    const out: Array<{ event: string; wake: Record<string, unknown> | null }> = []
    for (const k of keys.body.data as Array<{ key: string }>) {
      const item = yield* call("GET", `/v1/functions/${fnId}/memories/${encodeURIComponent(k.key)}`, { token })
      out.push(item.body.data.value)
    }
    return out
  })

/** Mails `to` over SMTP; `headers` for In-Reply-To/References. */
const mail = (to: string, subject: string, messageId: string, headers: Record<string, string> = {}) =>
  Effect.flatMap(TestServer, (server) =>
    Effect.promise(async () => {
      const t = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
      try {
        await t.sendMail({ from: "customer@example.com", to, subject, text: `body of ${subject}`, messageId, headers })
      } finally {
        t.close()
      }
    }))

/** The thread of the stored email with this Message-ID. */
const threadOf = (token: string, messageId: string) =>
  until(`the email ${messageId}`, Effect.map(call("GET", "/v1/emails", { token }), (r) =>
    (r.body.data as Array<{ message_id: string; thread_id: string; id: string }>).find((e) => e.message_id === messageId)))

const watch = (token: string, threadId: string, body: Record<string, unknown>) =>
  call("POST", `/v1/threads/${threadId}/watch`, { token, body })

const watchesOf = (token: string, threadId: string) =>
  Effect.map(call("GET", `/v1/threads/${threadId}`, { token }), (r) => r.body.data.watches as Array<Record<string, unknown>>)

layer(Env, { timeout: 240_000, excludeTestServices: true })("thread watches", (it) => {
  describe("silence and replies", () => {
    it.effect("no reply in time: the wake fires once with the thread's id, and the watch shows as fired", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const fn = yield* deploy(org.token)
        yield* mail(org.inbox, "Quote request", "<q1@example.com>")
        const email = yield* threadOf(org.token, "<q1@example.com>")
        const created = yield* watch(org.token, email.thread_id, {
          within: "1s",
          wake: { function_id: fn, command: { type: "follow_up", payload: { nudge: true } } }
        })
        expect(created.status, created.text).toBe(201)
        expect(created.body.data).toMatchObject({
          thread_id: email.thread_id,
          function_id: fn,
          command: { type: "follow_up", payload: { nudge: true } },
          within: "1s",
          status: "active",
          canceled_reason: null
        })
        expect(Date.parse(created.body.data.due_at) - Date.parse(created.body.data.created_at)).toBe(1000)
        const shown = yield* watchesOf(org.token, email.thread_id)
        expect(shown.map((w) => [w.id, w.status])).toEqual([[created.body.data.id, "active"]])

        const seen = yield* until("the wake.command", Effect.map(seenBy(org.token, fn), (all) => all.find((s) => s.event === "wake.command")))
        expect(seen.wake).toMatchObject({ id: created.body.data.id, type: "follow_up", payload: { nudge: true }, thread_id: email.thread_id, verified: true })
        const after = yield* until("fired", Effect.map(watchesOf(org.token, email.thread_id), (ws) => ws[0]?.status === "fired" ? ws : undefined))
        expect(after[0]).toMatchObject({ status: "fired", canceled_reason: null })
        const asWake = yield* call("GET", `/v1/wakes/${created.body.data.id}`, { token: org.token })
        expect(asWake.body.data).toMatchObject({ status: "completed", run_count: 1, thread_id: email.thread_id, schedule: { in: "1s" } })
      }))

    it.effect("a reply joining the thread in time ends the watch as replied; it never fires", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const fn = yield* deploy(org.token)
        yield* mail(org.inbox, "Contract", "<c1@example.com>")
        const first = yield* threadOf(org.token, "<c1@example.com>")
        const created = yield* watch(org.token, first.thread_id, { within: "3s", wake: { function_id: fn, command: { type: "chase" } } })
        expect(created.status, created.text).toBe(201)
        yield* mail(org.inbox, "Re: Contract", "<c2@example.com>", { "In-Reply-To": "<c1@example.com>", References: "<c1@example.com>" })
        const reply = yield* threadOf(org.token, "<c2@example.com>")
        expect(reply.thread_id).toBe(first.thread_id)
        const ws = yield* watchesOf(org.token, first.thread_id)
        expect(ws[0]).toMatchObject({ id: created.body.data.id, status: "canceled", canceled_reason: "replied" })
        // Past its due time: nothing fired.
        yield* Effect.sleep("4 seconds")
        expect((yield* seenBy(org.token, fn)).filter((s) => s.event === "wake.command")).toEqual([])
        const asWake = yield* call("GET", `/v1/wakes/${created.body.data.id}`, { token: org.token })
        expect(asWake.body.data).toMatchObject({ status: "canceled", run_count: 0, next_run_at: null })
      }))

    it.effect("mail joining another thread leaves the watch waiting; a message merging two threads carries the watch along", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const fn = yield* deploy(org.token)
        yield* mail(org.inbox, "Topic A", "<a1@example.com>")
        const a = yield* threadOf(org.token, "<a1@example.com>")
        const created = yield* watch(org.token, a.thread_id, { within: "1h", wake: { function_id: fn, command: { type: "chase" } } })
        yield* mail(org.inbox, "Topic B", "<b1@example.com>")
        const b = yield* threadOf(org.token, "<b1@example.com>")
        expect(b.thread_id).not.toBe(a.thread_id)
        expect((yield* watchesOf(org.token, a.thread_id))[0]).toMatchObject({ id: created.body.data.id, status: "active" })
        // B is younger; a watch on it moves into A when a message names both, and that message answers it.
        const onB = yield* watch(org.token, b.thread_id, { within: "1h", wake: { function_id: fn, command: { type: "chase" } } })
        yield* mail(org.inbox, "Re: Topic A and B", "<ab@example.com>", { References: "<a1@example.com> <b1@example.com>" })
        const ab = yield* threadOf(org.token, "<ab@example.com>")
        expect(ab.thread_id).toBe(a.thread_id)
        const merged = yield* watchesOf(org.token, a.thread_id)
        expect(merged.map((w) => [w.id, w.thread_id, w.status, w.canceled_reason]).sort()).toEqual([
          [created.body.data.id, a.thread_id, "canceled", "replied"],
          [onB.body.data.id, a.thread_id, "canceled", "replied"]
        ].sort())
      }))
  })

  describe("ends", () => {
    it.effect("deleting the thread's last message ends its watches as thread_deleted; deleting the function removes them", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const fn = yield* deploy(org.token)
        yield* mail(org.inbox, "One", "<d1@example.com>")
        yield* mail(org.inbox, "Re: One", "<d2@example.com>", { "In-Reply-To": "<d1@example.com>" })
        const first = yield* threadOf(org.token, "<d1@example.com>")
        const second = yield* threadOf(org.token, "<d2@example.com>")
        const created = yield* watch(org.token, first.thread_id, { within: "1h", wake: { function_id: fn, command: { type: "chase" } } })
        expect(created.status, created.text).toBe(201)
        expect((yield* call("DELETE", `/v1/emails/${first.id}`, { token: org.token })).status).toBe(200)
        // One message left: the thread and its watch live on.
        expect((yield* watchesOf(org.token, first.thread_id))[0]).toMatchObject({ status: "active" })
        expect((yield* call("DELETE", `/v1/emails/${second.id}`, { token: org.token })).status).toBe(200)
        const asWake = yield* call("GET", `/v1/wakes/${created.body.data.id}`, { token: org.token })
        expect(asWake.body.data).toMatchObject({ status: "canceled", next_run_at: null })
        const reason = yield* Effect.flatMap(SqlClient.SqlClient, (sql) =>
          sql<{ cancel_reason: string }>`SELECT cancel_reason FROM wakes WHERE id = ${created.body.data.id}`)
        expect(reason[0]!.cancel_reason).toBe("thread_deleted")
        expect((yield* call("GET", `/v1/threads/${first.thread_id}`, { token: org.token })).status).toBe(404)

        const fn2 = yield* deploy(org.token)
        yield* mail(org.inbox, "Two", "<e1@example.com>")
        const e = yield* threadOf(org.token, "<e1@example.com>")
        const w2 = yield* watch(org.token, e.thread_id, { within: "1h", wake: { function_id: fn2, command: { type: "chase" } } })
        expect(w2.status).toBe(201)
        expect((yield* call("DELETE", `/v1/functions/${fn2}`, { token: org.token })).status).toBe(200)
        expect(yield* watchesOf(org.token, e.thread_id)).toEqual([])
        expect((yield* call("GET", `/v1/wakes/${w2.body.data.id}`, { token: org.token })).status).toBe(404)
      }))

    it.effect("mailroom wake watch creates one by function name; a bad --within is the API's validation_error (exit 3)", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        yield* deploy(org.token)
        const name = `watcher-${seq}`
        yield* mail(org.inbox, "Cli", "<cli1@example.com>")
        const t = yield* threadOf(org.token, "<cli1@example.com>")
        const server = yield* TestServer
        const env = { baseUrl: server.baseUrl, configHome: mkdtempSync(join(tmpdir(), "mailroom-watch-")), extra: { MAILROOM_API_KEY: org.token } }
        const ok = yield* Effect.promise(() =>
          runCli(["wake", "watch", t.thread_id, "--within", "48h", "--function", name, "--type", "follow_up", "--payload", "{\"n\":1}", "--json"], env))
        expect(ok.code, ok.stderr).toBe(0)
        expect(JSON.parse(ok.stdout)).toMatchObject({ thread_id: t.thread_id, within: "48h", status: "active", command: { type: "follow_up", payload: { n: 1 } } })
        const bad = yield* Effect.promise(() => runCli(["wake", "watch", t.thread_id, "--within", "soon", "--function", name, "--type", "x"], env))
        expect(bad.code).toBe(3)
        expect(bad.stderr).toContain("validation_error")
      }), 300_000)

    it.effect("DELETE /wakes/{id} cancels a watch (reason canceled)", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const fn = yield* deploy(org.token)
        yield* mail(org.inbox, "Three", "<f1@example.com>")
        const f = yield* threadOf(org.token, "<f1@example.com>")
        const w = yield* watch(org.token, f.thread_id, { within: "2h", wake: { function_id: fn, command: { type: "chase" } } })
        expect((yield* call("DELETE", `/v1/wakes/${w.body.data.id}`, { token: org.token })).status).toBe(200)
        expect((yield* watchesOf(org.token, f.thread_id))[0]).toMatchObject({ status: "canceled", canceled_reason: "canceled" })
      }))
  })

  describe("refusals", () => {
    it.effect("bad within, unknown thread, another organization's thread or function, no entitlement", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const other = yield* newOrg()
        const fn = yield* deploy(org.token)
        const otherFn = yield* deploy(other.token)
        yield* mail(org.inbox, "Mine", "<g1@example.com>")
        const g = yield* threadOf(org.token, "<g1@example.com>")
        const ok = { function_id: fn, command: { type: "chase" } }

        for (const within of ["soon", "0s", "400d", ""]) {
          const r = yield* watch(org.token, g.thread_id, { within, wake: ok })
          expect(r.status, within).toBe(400)
          expect(r.body.error.code).toBe("validation_error")
          expect(r.body.error.details.issues[0].field).toBe("within")
        }
        const badType = yield* watch(org.token, g.thread_id, { within: "1h", wake: { function_id: fn, command: { type: "Bad Type" } } })
        expect(badType.status).toBe(400)
        const extra = yield* watch(org.token, g.thread_id, { within: "1h", wake: ok, every: "1h" })
        expect(extra.status).toBe(400)
        const unknown = yield* watch(org.token, "0190b4a0-0000-7000-8000-000000000000", { within: "1h", wake: ok })
        expect(unknown.status).toBe(404)
        expect(unknown.body.error.code).toBe("not_found")
        const theirs = yield* watch(other.token, g.thread_id, { within: "1h", wake: { function_id: otherFn, command: { type: "chase" } } })
        expect(theirs.status).toBe(404)
        const theirFn = yield* watch(org.token, g.thread_id, { within: "1h", wake: { function_id: otherFn, command: { type: "chase" } } })
        expect(theirFn.status).toBe(404)
        const agent = yield* newOrg("agent")
        const refused = yield* watch(agent.token, g.thread_id, { within: "1h", wake: ok })
        expect(refused.status).toBe(403)
        expect(yield* watchesOf(org.token, g.thread_id)).toEqual([])
      }))
  })
})
