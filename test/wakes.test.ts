/**
 * Wakes over real HTTP, SMTP and workerd: validation of each schedule kind, a wake firing as a
 * signed email that is stored, listed and delivered to the function as `wake.command` (verified),
 * run now, cancel, the per-function sender allowlist at RCPT (refused, admitted unsigned, admitted
 * signed), exactly-once firing with two service instances, a firing taken over from a dead process
 * without a second email, one catch-up firing after downtime, and cron stepping across day and
 * month ends.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { createHmac } from "node:crypto"
import nodemailer from "nodemailer"
import { Provisioning } from "../src/identity/Provisioning.js"
import { checkSchedule, nextAfter } from "../src/wake/Schedule.js"
import { extraServer, TestServer, testService } from "./support/harness.js"
import { call } from "./support/http.js"
import { openSmtp } from "./support/smtpClient.js"
import { type CliEnv, runCli } from "./support/cli.js"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"

const Env = Provisioning.Default.pipe(
  Layer.provideMerge(testService({ FUNCTION_TIMEOUT: "10s", DELIVERY_RETRY_DELAYS: "300ms", DNS_SERVER: "127.0.0.1:9" }))
)

/** Every event the function receives, kept in its memory under `seen:<event id>`. */
const RECORDER = `export default { async fetch(request, env) {
  const event = await request.json();
  await env.MEMORY.put("seen:" + event.id, JSON.stringify({ event: event.event, wake: event.wake ?? null, subject: event.email.subject }));
  return new Response("ok");
} }`

const newOrg = (plan: "agent" | "developer" = "developer") =>
  Effect.gen(function*() {
    const p = yield* Provisioning
    const org = yield* p.createOrganization({ name: "Wake", plan })
    const key = yield* p.issueApiKey(org.id)
    return { orgId: org.id, token: key.apiKey, inbox: org.managedInboxAddress! }
  })

let seq = 0
const deploy = (token: string) =>
  Effect.gen(function*() {
    const r = yield* call("POST", "/v1/functions", { token, body: { name: `wake-${++seq}`, code: RECORDER } })
    expect(r.status, r.text).toBe(201)
    return r.body.data.id as string
  })

const createWake = (token: string, body: Record<string, unknown>) => call("POST", "/v1/wakes", { token, body })

/** Runs `probe` every 100 ms until it gives a value (at most 20 s). */
const until = <A, E, R>(what: string, probe: Effect.Effect<A | undefined, E, R>) =>
  Effect.gen(function*() {
    for (let i = 0; i < 200; i++) {
      const value = yield* probe
      if (value !== undefined) return value
      yield* Effect.sleep("100 millis")
    }
    return yield* Effect.dieMessage(`timed out waiting for ${what}`)
  })

interface Seen {
  readonly event: string
  readonly wake: null | { id: string | null; type: string; payload: unknown; scheduled_for: string | null; fired_at: string; sender: string; verified: boolean }
  readonly subject: string
}

/** What the function has recorded so far. */
const seenBy = (token: string, fnId: string) =>
  Effect.gen(function*() {
    const keys = yield* call("GET", `/v1/functions/${fnId}/memories?prefix=seen:`, { token })
    const out: Array<Seen> = []
    for (const k of keys.body.data as Array<{ key: string }>) {
      const item = yield* call("GET", `/v1/functions/${fnId}/memories/${encodeURIComponent(k.key)}`, { token })
      out.push(item.body.data.value as Seen)
    }
    return out
  })

const wakeEmails = (orgId: string, wakeId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ n: number }>`SELECT count(*)::int AS n FROM emails WHERE org_id = ${orgId} AND message_id LIKE ${`<wake.${wakeId}.%`}`)
    .pipe(Effect.map((rows) => rows[0]!.n))

const smtp = Effect.map(TestServer, (s) => s.smtpPort)

layer(Env, { timeout: 240_000, excludeTestServices: true })("wakes", (it) => {
  describe("schedules", () => {
    it.effect("exactly one of at, in, every (≥ 1m) or cron (5 fields), a valid type and payload; the function must be yours", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const fn = yield* deploy(org.token)
        const command = { type: "digest" }
        const expect400 = (body: Record<string, unknown>, message: string) =>
          Effect.map(createWake(org.token, { function_id: fn, command, ...body }), (r) => {
            expect(r.status, r.text).toBe(400)
            expect(r.body.error.code).toBe("validation_error")
            expect(r.body.error.message).toContain(message)
          })
        yield* expect400({}, "give exactly one of at, in, every or cron")
        yield* expect400({ in: "5m", every: "1h" }, "got in, every")
        yield* expect400({ at: new Date(Date.now() - 1000).toISOString() }, "at: must be in the future")
        yield* expect400({ every: "30s" }, "every: must be at least 1m")
        yield* expect400({ in: "soon" }, "is not a duration")
        yield* expect400({ cron: "61 * * * *" }, "cron: ")
        yield* expect400({ cron: "0 8 * *" }, "must have 5 fields")
        const badType = yield* createWake(org.token, { function_id: fn, command: { type: "Has Spaces" }, in: "5m" })
        expect(badType.status).toBe(400)
        const big = yield* createWake(org.token, { function_id: fn, command: { type: "x", payload: "y".repeat(17_000) }, in: "5m" })
        expect(big.status).toBe(400)
        expect(big.body.error.message).toContain("command.payload")
        const other = yield* newOrg()
        expect((yield* createWake(other.token, { function_id: fn, command, in: "5m" })).status).toBe(404)
        const agent = yield* newOrg("agent")
        const denied = yield* createWake(agent.token, { function_id: fn, command, in: "5m" })
        expect(denied.status).toBe(403)
        expect(denied.body.error.details).toMatchObject({ missing_entitlement: "functions" })

        const created = yield* createWake(org.token, { function_id: fn, command: { type: "digest", payload: { n: 1 } }, cron: "0 8 * * *" })
        expect(created.status, created.text).toBe(201)
        expect(created.body.data).toMatchObject({
          function_id: fn,
          command: { type: "digest", payload: { n: 1 } },
          schedule: { cron: "0 8 * * *" },
          status: "scheduled",
          last_run_at: null,
          run_count: 0
        })
        expect(created.body.data.next_run_at).toMatch(/T08:00:00\.000Z$/)
        const listed = yield* call("GET", `/v1/wakes?function_id=${fn}&status=scheduled`, { token: org.token })
        expect(listed.body.data.map((w: { id: string }) => w.id)).toEqual([created.body.data.id])
        // The wake address reaches the function: it got an endpoint (a route target) if it had none.
        const endpoints = yield* call("GET", "/v1/endpoints", { token: org.token })
        expect(endpoints.body.data).toEqual([expect.objectContaining({ function_id: fn, is_route_target: true })])
      }))

    it.effect("cron steps across day, month and year ends, in UTC; late recurring wakes go on from now", () =>
      Effect.sync(() => {
        const at = (iso: string) => new Date(iso)
        const cron = (value: string, from: string) => nextAfter({ kind: "cron", value }, at(from), at(from))!.toISOString()
        expect(cron("0 8 * * *", "2026-01-31T09:00:00Z")).toBe("2026-02-01T08:00:00.000Z")
        expect(cron("30 23 31 * *", "2026-02-01T00:00:00Z")).toBe("2026-03-31T23:30:00.000Z")
        expect(cron("0 0 1 1 *", "2026-12-31T23:59:00Z")).toBe("2027-01-01T00:00:00.000Z")
        expect(cron("0 12 29 2 *", "2027-03-01T00:00:00Z")).toBe("2028-02-29T12:00:00.000Z")
        expect(cron("*/15 * * * *", "2026-05-31T23:50:00Z")).toBe("2026-06-01T00:00:00.000Z")
        // Due at 08:00, fired on time: the next day's 08:00. Fired 3 days late: the next 08:00 after now.
        expect(nextAfter({ kind: "cron", value: "0 8 * * *" }, at("2026-03-01T08:00:00Z"), at("2026-03-01T08:00:01Z"))!.toISOString())
          .toBe("2026-03-02T08:00:00.000Z")
        expect(nextAfter({ kind: "cron", value: "0 8 * * *" }, at("2026-03-01T08:00:00Z"), at("2026-03-04T10:00:00Z"))!.toISOString())
          .toBe("2026-03-05T08:00:00.000Z")
        // `every` keeps its cadence on time, and restarts from now when late.
        expect(nextAfter({ kind: "every", value: "1h" }, at("2026-03-01T08:00:00Z"), at("2026-03-01T08:00:02Z"))!.toISOString())
          .toBe("2026-03-01T09:00:00.000Z")
        expect(nextAfter({ kind: "every", value: "1h" }, at("2026-03-01T08:00:00Z"), at("2026-03-01T12:30:00Z"))!.toISOString())
          .toBe("2026-03-01T13:30:00.000Z")
        expect(nextAfter({ kind: "in", value: "5m" }, at("2026-03-01T08:00:00Z"), at("2026-03-01T08:00:00Z"))).toBeUndefined()
        const first = checkSchedule({ every: "2h" }, at("2026-03-01T08:00:00Z"))
        expect("first" in first && first.first.toISOString()).toBe("2026-03-01T10:00:00.000Z")
      }))
  })

  describe("firing", () => {
    it.effect("an `in` wake fires as a signed email: stored, listed, delivered to the function as a verified wake.command, then completed", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const fn = yield* deploy(org.token)
        const created = yield* createWake(org.token, { function_id: fn, command: { type: "tick", payload: { a: [1, "ü"] } }, in: "1s" })
        expect(created.status, created.text).toBe(201)
        const wake = created.body.data
        const seen = yield* until("the wake.command", Effect.map(seenBy(org.token, fn), (all) => all.find((s) => s.event === "wake.command")))
        expect(seen.wake).toMatchObject({
          id: wake.id,
          type: "tick",
          payload: { a: [1, "ü"] },
          scheduled_for: wake.next_run_at,
          sender: "wake@agents.localhost",
          verified: true
        })
        expect(new Date(seen.wake!.fired_at).getTime() - new Date(wake.next_run_at).getTime()).toBeLessThan(2000)
        const done = yield* until("completed", Effect.map(call("GET", `/v1/wakes/${wake.id}`, { token: org.token }), (r) =>
          r.body.data.status === "completed" ? r.body.data : undefined))
        expect(done).toMatchObject({ run_count: 1, next_run_at: null })
        const emails = yield* call("GET", "/v1/emails?event_type=wake.command", { token: org.token })
        expect(emails.body.data).toHaveLength(1)
        expect(emails.body.data[0]).toMatchObject({ subject: "Wake: tick", recipient: `fn-${fn}@agents.localhost` })
        expect(yield* wakeEmails(org.orgId, wake.id)).toBe(1)
      }))

    it.effect("run fires now and keeps the schedule; cancel stops it for good; a completed wake cannot be canceled", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const fn = yield* deploy(org.token)
        const wake = (yield* createWake(org.token, { function_id: fn, command: { type: "manual" }, every: "1h" })).body.data
        const ran = yield* call("POST", `/v1/wakes/${wake.id}/run`, { token: org.token })
        expect(ran.status, ran.text).toBe(200)
        expect(ran.body.data).toMatchObject({ status: "scheduled", run_count: 1, next_run_at: wake.next_run_at })
        yield* until("the run's wake.command", Effect.map(seenBy(org.token, fn), (all) => all.find((s) => s.wake?.type === "manual")))
        const again = yield* call("POST", `/v1/wakes/${wake.id}/run`, { token: org.token })
        expect(again.body.data.run_count).toBe(2)
        expect(yield* wakeEmails(org.orgId, wake.id)).toBe(2)

        const canceled = yield* call("DELETE", `/v1/wakes/${wake.id}`, { token: org.token })
        expect(canceled.body.data).toMatchObject({ status: "canceled", next_run_at: null })
        expect((yield* call("DELETE", `/v1/wakes/${wake.id}`, { token: org.token })).status).toBe(200)
        expect((yield* call("POST", `/v1/wakes/${wake.id}/run`, { token: org.token })).status).toBe(409)

        const once = (yield* createWake(org.token, { function_id: fn, command: { type: "once" }, in: "1s" })).body.data
        yield* until("completed", Effect.map(call("GET", `/v1/wakes/${once.id}`, { token: org.token }), (r) =>
          r.body.data.status === "completed" ? true : undefined))
        const late = yield* call("DELETE", `/v1/wakes/${once.id}`, { token: org.token })
        expect(late.status).toBe(409)
        expect(late.body.error.code).toBe("conflict")
        // Deleting the function deletes its wakes.
        yield* call("DELETE", `/v1/functions/${fn}`, { token: org.token })
        expect((yield* call("GET", `/v1/wakes/${once.id}`, { token: org.token })).status).toBe(404)
      }))
  })

  describe("wake firings in the mailbox", () => {
    it.effect("default email and thread lists (API and CLI) leave wake firings out; include=wake and --include-wake show them", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const fn = yield* deploy(org.token)
        const wake = (yield* createWake(org.token, { function_id: fn, command: { type: "tidy" }, every: "1h" })).body.data
        expect((yield* call("POST", `/v1/wakes/${wake.id}/run`, { token: org.token })).status).toBe(200)
        yield* until("the firing stored", Effect.map(wakeEmails(org.orgId, wake.id), (n) => (n === 1 ? true : undefined)))
        const port = yield* smtp
        yield* Effect.promise(() => {
          const transport = nodemailer.createTransport({ host: "127.0.0.1", port, secure: false, ignoreTLS: true })
          return transport.sendMail({ from: "ada@example.com", to: org.inbox, subject: "A person writes", text: "hello" })
            .finally(() => transport.close())
        })
        const subjects = (r: { body: { data: Array<{ subject: string }> } }) => r.body.data.map((e) => e.subject).sort()
        const person = yield* until("the person's mail", Effect.map(call("GET", "/v1/emails", { token: org.token }), (r) =>
          r.body.data.length > 0 ? r : undefined))
        expect(subjects(person)).toEqual(["A person writes"])
        expect(person.body.meta.total).toBe(1)
        const all = yield* call("GET", "/v1/emails?include=wake", { token: org.token })
        expect(subjects(all)).toEqual(["A person writes", "Wake: tidy"])
        expect(all.body.meta.total).toBe(2)
        // Asking for the wake event type explicitly lists firings without include.
        expect(subjects(yield* call("GET", "/v1/emails?event_type=wake.command", { token: org.token }))).toEqual(["Wake: tidy"])
        expect((yield* call("GET", "/v1/emails?include=everything", { token: org.token })).status).toBe(400)

        const threads = yield* call("GET", "/v1/threads", { token: org.token })
        expect(subjects(threads)).toEqual(["A person writes"])
        expect(threads.body.meta.total).toBe(1)
        const withWakes = yield* call("GET", "/v1/threads?include=wake", { token: org.token })
        expect(subjects(withWakes)).toEqual(["A person writes", "Wake: tidy"])
        // A firing's own thread still opens by id.
        const wakeThread = all.body.data.find((e: { subject: string }) => e.subject === "Wake: tidy").thread_id as string
        expect((yield* call("GET", `/v1/threads/${wakeThread}`, { token: org.token })).body.data.messages).toHaveLength(1)

        const server = yield* TestServer
        const env: CliEnv = {
          baseUrl: server.baseUrl,
          configHome: mkdtempSync(join(tmpdir(), "mailroom-cli-")),
          extra: { MAILROOM_API_KEY: org.token }
        }
        const cliSubjects = (args: Array<string>) =>
          Effect.promise(async () => {
            const r = await runCli([...args, "--json"], env)
            expect(r.code, r.stderr).toBe(0)
            return (JSON.parse(r.stdout) as { data: Array<{ subject: string }> }).data.map((e) => e.subject).sort()
          })
        expect(yield* cliSubjects(["emails", "list"])).toEqual(["A person writes"])
        expect(yield* cliSubjects(["emails", "list", "--include-wake"])).toEqual(["A person writes", "Wake: tidy"])
        expect(yield* cliSubjects(["threads", "list"])).toEqual(["A person writes"])
        expect(yield* cliSubjects(["threads", "list", "--include-wake"])).toEqual(["A person writes", "Wake: tidy"])
      }))
  })

  describe("wake allowlist", () => {
    it.effect("mail to a wake address: refused at RCPT unless the sender is allowed; unsigned commands are unverified, signed ones verified", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const fn = yield* deploy(org.token)
        const address = `fn-${fn}@agents.localhost`
        const initial = yield* call("GET", `/v1/functions/${fn}/wake-allowlist`, { token: org.token })
        expect(initial.body.data).toEqual({ function_id: fn, wake_address: address, senders: [], updated_at: null })
        const bad = yield* call("PUT", `/v1/functions/${fn}/wake-allowlist`, { token: org.token, body: { senders: ["not an address"] } })
        expect(bad.status).toBe(400)
        const put = yield* call("PUT", `/v1/functions/${fn}/wake-allowlist`, {
          token: org.token,
          body: { senders: ["Ops@Example.com", "@trusted.example", "ops@example.com"] }
        })
        expect(put.body.data.senders).toEqual(["@trusted.example", "ops@example.com"])

        const port = yield* smtp
        const rcpt = (from: string) =>
          Effect.promise(async () => {
            const s = await openSmtp(port)
            try {
              await s.command("EHLO test")
              await s.command(`MAIL FROM:<${from}>`)
              return await s.command(`RCPT TO:<${address}>`)
            } finally {
              s.close()
            }
          })
        expect((yield* rcpt("stranger@example.com")).code).toBe(550)
        expect((yield* rcpt("ops@example.com")).code).toBe(250)
        expect((yield* rcpt("anyone@trusted.example")).code).toBe(250)

        const secret = (yield* call("GET", "/v1/account/webhook-secret", { token: org.token })).body.data.secret as string
        const mail = (from: string, subject: string, command: string | undefined, signature?: string) =>
          Effect.promise(async () => {
            const transport = nodemailer.createTransport({ host: "127.0.0.1", port, secure: false, ignoreTLS: true })
            try {
              return await transport.sendMail({
                from,
                to: address,
                subject,
                text: "a command",
                ...(signature !== undefined ? { headers: { "Mailroom-Wake-Signature": signature } } : {}),
                ...(command !== undefined ? { attachments: [{ filename: "c.json", content: command, contentType: "application/json" }] } : {})
              }).then(() => "accepted", (e: { responseCode?: number; response?: string }) => `${e.responseCode} ${e.response}`)
            } finally {
              transport.close()
            }
          })
        expect(yield* mail("ops@example.com", "unsigned", JSON.stringify({ type: "refresh", payload: { q: 1 }, wake_id: crypto.randomUUID() })))
          .toBe("accepted")
        // A signed command names the function it is for and a wake id of its own (used once).
        const json = JSON.stringify({ type: "signed.cmd", payload: null, function_id: fn, wake_id: crypto.randomUUID() })
        const t = Math.floor(Date.now() / 1000)
        const sig = `t=${t},v1=${createHmac("sha256", secret).update(`${t}.${json}`).digest("hex")}`
        expect(yield* mail("anyone@trusted.example", "signed", json, sig)).toBe("accepted")
        expect(yield* mail("anyone@trusted.example", "signed again", json, sig)).toMatch(/^550 .*already used/)
        const unbound = JSON.stringify({ type: "signed.cmd", payload: null })
        const unboundSig = `t=${t},v1=${createHmac("sha256", secret).update(`${t}.${unbound}`).digest("hex")}`
        expect(yield* mail("anyone@trusted.example", "unbound", unbound, unboundSig)).toMatch(/^550 .*no named function/)
        const wrong = `t=${t},v1=${createHmac("sha256", "not-the-secret").update(`${t}.${json}`).digest("hex")}`
        expect(yield* mail("ops@example.com", "forged", json, wrong)).toBe("accepted")
        expect(yield* mail("ops@example.com", "no command", undefined)).toMatch(/^554 .*application\/json/)

        const all = yield* until("three commands", Effect.map(seenBy(org.token, fn), (s) => (s.length >= 3 ? s : undefined)))
        const bySubject = Object.fromEntries(all.map((s) => [s.subject, s]))
        expect(bySubject["unsigned"]!.wake).toMatchObject({ id: null, type: "refresh", payload: { q: 1 }, sender: "ops@example.com", verified: false })
        expect(bySubject["signed"]!.wake).toMatchObject({ type: "signed.cmd", sender: "anyone@trusted.example", verified: true })
        expect(bySubject["forged"]!.wake).toMatchObject({ verified: false })
        expect(all.every((s) => s.event === "wake.command")).toBe(true)
      }))
  })

  describe("replays", () => {
    it.effect("a captured wake email mailed in again, or to another function, is refused at DATA; the sender shown is the authenticated one", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const fn = yield* deploy(org.token)
        const other = yield* deploy(org.token)
        for (const f of [fn, other]) {
          const put = yield* call("PUT", `/v1/functions/${f}/wake-allowlist`, { token: org.token, body: { senders: ["relay@allowed.example"] } })
          expect(put.status, put.text).toBe(200)
        }
        const wake = (yield* createWake(org.token, { function_id: fn, command: { type: "pay.out", payload: { n: 1 } }, every: "1h" })).body.data
        expect((yield* call("POST", `/v1/wakes/${wake.id}/run`, { token: org.token })).status).toBe(200)
        const first = yield* until("the fired wake", Effect.map(seenBy(org.token, fn), (all) => all.find((s) => s.wake?.type === "pay.out")))
        expect(first.wake).toMatchObject({ id: wake.id, verified: true, sender: "wake@agents.localhost" })
        const emails = yield* call("GET", "/v1/emails?event_type=wake.command", { token: org.token })
        const stored = yield* call("GET", `/v1/emails/${emails.body.data[0].id}`, { token: org.token })
        const raw = yield* Effect.promise(() => fetch(stored.body.data.raw_url).then((r) => r.text()))
        expect(raw).toContain("Mailroom-Wake-Signature")

        const port = yield* smtp
        const resend = (to: string, headerFrom?: string) =>
          Effect.promise(async () => {
            const transport = nodemailer.createTransport({ host: "127.0.0.1", port, secure: false, ignoreTLS: true })
            try {
              const body = headerFrom === undefined ? raw : raw.replace(/^From: .*$/m, `From: ${headerFrom}`)
              return await transport.sendMail({ envelope: { from: "relay@allowed.example", to: [to] }, raw: body })
                .then(() => "accepted", (e: { responseCode?: number; response?: string }) => `${e.responseCode} ${e.response}`)
            } finally {
              transport.close()
            }
          })
        // The same signed command again (its Message-ID too, or another one): used already.
        expect(yield* resend(`fn-${fn}@agents.localhost`)).toMatch(/^550 .*already used/)
        expect(yield* resend(`fn-${fn}@agents.localhost`, "Mailroom wake <wake@agents.localhost>")).toMatch(/^550 /)
        // Another function of the organization: the signature is bound to the first one.
        expect(yield* resend(`fn-${other}@agents.localhost`)).toMatch(/^550 .*another function/)
        yield* Effect.sleep("1 second")
        const after = yield* seenBy(org.token, fn)
        expect(after.filter((s) => s.wake?.type === "pay.out")).toHaveLength(1)
        expect((yield* seenBy(org.token, other)).length).toBe(0)

        // An allowed sender's unsigned command shows who the envelope says sent it, not a forged header From.
        const forged = yield* Effect.promise(async () => {
          const transport = nodemailer.createTransport({ host: "127.0.0.1", port, secure: false, ignoreTLS: true })
          try {
            return await transport.sendMail({
              envelope: { from: "relay@allowed.example", to: [`fn-${other}@agents.localhost`] },
              from: "ceo@bank.example",
              to: `fn-${other}@agents.localhost`,
              subject: "unsigned",
              text: "x",
              attachments: [{ filename: "c.json", content: JSON.stringify({ type: "plain" }), contentType: "application/json" }]
            }).then(() => "accepted", (e: { response?: string }) => String(e.response))
          } finally {
            transport.close()
          }
        })
        expect(forged).toBe("accepted")
        const seen = yield* until("the unsigned command", Effect.map(seenBy(org.token, other), (all) => all.find((s) => s.wake?.type === "plain")))
        expect(seen.wake).toMatchObject({ verified: false, sender: "relay@allowed.example" })
      }))
  })

  describe("use marks", () => {
    it.effect("a scheduled firing stores its command's use mark with its email, and the organization's marks older than two days go", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const org = yield* newOrg()
        const fn = yield* deploy(org.token)
        yield* sql`INSERT INTO wake_commands_used (org_id, use_key, used_at) VALUES
          (${org.orgId}, 'old|x', now() - interval '3 days'), (${org.orgId}, 'recent|x', now() - interval '1 day')`
        const at = new Date(Date.now() + 1500).toISOString()
        const wake = (yield* createWake(org.token, { function_id: fn, command: { type: "tick" }, at })).body.data
        yield* until("the fired wake", Effect.map(seenBy(org.token, fn), (all) => all.find((s) => s.wake?.id === wake.id)))
        yield* until("the wake completed", Effect.map(
          sql<{ status: string }>`SELECT status FROM wakes WHERE id = ${wake.id}`,
          (rows) => (rows[0]?.status === "completed" ? true : undefined)
        ))
        const marks = yield* sql<{ use_key: string }>`SELECT use_key FROM wake_commands_used WHERE org_id = ${org.orgId} ORDER BY use_key`
        expect(marks.map((m) => m.use_key)).toEqual([`${wake.id}|${wake.next_run_at ?? at}`, "recent|x"].sort())
        expect(yield* wakeEmails(org.orgId, wake.id)).toBe(1)
      }))
  })

  describe("durability", () => {
    it.scoped("two service instances: 30 wakes due together each fire exactly once", () =>
      Effect.gen(function*() {
        yield* extraServer
        const org = yield* newOrg()
        const fn = yield* deploy(org.token)
        const ids: Array<string> = []
        for (let i = 0; i < 30; i++) {
          const r = yield* createWake(org.token, { function_id: fn, command: { type: `n${i}` }, in: "2s" })
          ids.push(r.body.data.id)
        }
        const sql = yield* SqlClient.SqlClient
        yield* until("all 30 completed", Effect.map(
          sql<{ n: number }>`SELECT count(*)::int AS n FROM wakes WHERE org_id = ${org.orgId} AND status = 'completed'`,
          (rows) => (rows[0]!.n === 30 ? true : undefined)
        ))
        for (const id of ids) expect(yield* wakeEmails(org.orgId, id)).toBe(1)
        const runs = yield* sql<{ run_count: number }>`SELECT run_count FROM wakes WHERE org_id = ${org.orgId}`
        expect(runs.every((r) => r.run_count === 1)).toBe(true)
      }))

    it.effect("a firing held by a dead process is finished by another after its lease, without a second email", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const fn = yield* deploy(org.token)
        const sql = yield* SqlClient.SqlClient
        const wake = (yield* createWake(org.token, { function_id: fn, command: { type: "crash" }, every: "1h" })).body.data
        const due = new Date(Date.now() - 1000)
        // A process claimed the firing and stored its email (the Message-ID is the wake's and the due
        // time's), then died before moving the wake on; its lease runs 1.5 s more.
        yield* sql`UPDATE wakes SET next_run_at = ${due}, lease_token = 'dead-process', lease_expires_at = ${new Date(Date.now() + 1500)}
                   WHERE id = ${wake.id}`
        yield* sql`INSERT INTO emails (org_id, recipient, size_bytes, event_type, status, message_id)
                   VALUES (${org.orgId}, ${`fn-${fn}@agents.localhost`}, 1, 'wake.command', 'accepted',
                           ${`<wake.${wake.id}.${due.getTime()}@agents.localhost>`})`
        yield* Effect.sleep("700 millis")
        expect((yield* call("GET", `/v1/wakes/${wake.id}`, { token: org.token })).body.data.run_count).toBe(0)
        const after = yield* until("moved on by a live process", Effect.map(
          call("GET", `/v1/wakes/${wake.id}`, { token: org.token }),
          (r) => (r.body.data.run_count === 1 ? r.body.data : undefined)
        ))
        expect(new Date(after.next_run_at).getTime()).toBeGreaterThan(Date.now() + 50 * 60_000)
        expect(yield* wakeEmails(org.orgId, wake.id)).toBe(1)
        yield* Effect.sleep("500 millis")
        expect(yield* seenBy(org.token, fn)).toEqual([])
      }))

    it.effect("missed while the service was down: one catch-up firing, then on from now", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const fn = yield* deploy(org.token)
        const sql = yield* SqlClient.SqlClient
        const wake = (yield* createWake(org.token, { function_id: fn, command: { type: "late" }, every: "1m" })).body.data
        // Due 10 minutes ago: ten firings were missed.
        yield* sql`UPDATE wakes SET next_run_at = ${new Date(Date.now() - 10 * 60_000)} WHERE id = ${wake.id}`
        const fired = yield* until("the catch-up firing", Effect.map(
          call("GET", `/v1/wakes/${wake.id}`, { token: org.token }),
          (r) => (r.body.data.run_count >= 1 ? r.body.data : undefined)
        ))
        yield* Effect.sleep("1 second")
        const later = (yield* call("GET", `/v1/wakes/${wake.id}`, { token: org.token })).body.data
        expect(later.run_count).toBe(1)
        const next = new Date(fired.next_run_at).getTime()
        expect(next).toBeGreaterThan(Date.now() + 50_000)
        expect(next).toBeLessThan(Date.now() + 61_000)
        expect(yield* wakeEmails(org.orgId, wake.id)).toBe(1)
      }))
  })
})
