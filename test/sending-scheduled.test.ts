/**
 * Scheduled sends: durable leased timers in the database. Each test starts its own service
 * processes over one database (and one scripted relay): on time, reschedule and cancel (409
 * `not_scheduled` otherwise), checks repeated at send time, transient relay failures retried then
 * `failed`, a restart that missed due sends, two processes sharing the work, and cancel racing the
 * send (canceled and never relayed, or relayed and 409 — never both).
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Context, Effect, Exit, Layer, Scope } from "effect"
import nodemailer from "nodemailer"
import { Provisioning } from "../src/identity/Provisioning.js"
import { authenticatedDomain, startDnsServer, TestDns } from "./support/dns.js"
import { extraServer, testDatabase } from "./support/harness.js"
import { fetchReply } from "./support/http.js"
import { startTestRelay, type TestRelay } from "./support/relay.js"

class Relay extends Context.Tag("test/Relay")<Relay, TestRelay>() {}

const Env = Provisioning.Default.pipe(
  Layer.provideMerge(Layer.unwrapScoped(Effect.gen(function*() {
    const relay = yield* startTestRelay
    // A DNS of the test's own: the friend who writes in publishes SPF, so its mail makes it known.
    const dns = yield* startDnsServer
    return testDatabase({ OUTBOUND_SMTP_URL: relay.url, OUTBOUND_TIMEOUT: "2s", DNS_SERVER: `127.0.0.1:${dns.port}` }).pipe(
      Layer.merge(Layer.succeed(Relay, relay)),
      Layer.merge(Layer.succeed(TestDns, { port: dns.port, zone: dns.zone, queries: dns.queries }))
    )
  })))
)

let seq = 0
const unique = (label: string) => `${label}-${++seq}-${Math.random().toString(36).slice(2, 7)}`

const newOrg = (plan: "agent" | "developer" | "pro" = "pro") =>
  Effect.gen(function*() {
    const p = yield* Provisioning
    const org = yield* p.createOrganization({ name: "Scheduler", plan })
    const key = yield* p.issueApiKey(org.id)
    return { orgId: org.id, token: key.apiKey, inbox: org.managedInboxAddress! }
  })

type Server = { readonly baseUrl: string; readonly smtpPort: number }

/** A service process of its own (closed with its scope, as a process that stops). */
const startProcess = Effect.gen(function*() {
  const scope = yield* Scope.make()
  const stop = Scope.close(scope, Exit.void)
  // Stopped at the end of the test at the latest: a process left running would send other tests' mail.
  yield* Effect.addFinalizer(() => stop)
  const server = yield* Scope.extend(extraServer, scope)
  return { server: server as Server, stop }
})

const api = (server: Server, method: string, path: string, token: string, body?: unknown) =>
  Effect.promise(() => fetchReply(`${server.baseUrl}${path}`, method, { token, ...(body !== undefined ? { body } : {}) }))

const schedule = (server: Server, org: { token: string; inbox: string }, to: string, at: Date, extra: Record<string, unknown> = {}) =>
  Effect.map(api(server, "POST", "/v1/send-mail", org.token, { from: org.inbox, to, subject: `for ${to}`, text: "later", send_at: at.toISOString(), ...extra }), (r) => {
    expect(r.status, r.text).toBe(201)
    expect(r.body.data.status).toBe("scheduled")
    return r.body.data as { id: string; send_at: string }
  })

const relayedTo = (to: string) => Effect.map(Relay, (r) => r.messages.filter((m) => m.to.includes(to)))

const waitFor = <A, R>(what: string, check: () => Effect.Effect<A | undefined, never, R>, ms = 15_000) =>
  Effect.gen(function*() {
    const until = Date.now() + ms
    while (Date.now() < until) {
      const v = yield* check()
      if (v !== undefined) return v
      yield* Effect.sleep("50 millis")
    }
    return yield* Effect.dieMessage(`timed out waiting for ${what}`)
  })

/** Mail from `from` into `to` over SMTP, so the receiving organization knows the sender. */
const mailIn = (server: Server, from: string, to: string) =>
  Effect.promise(async () => {
    const t = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
    try {
      await t.sendMail({ from, to, subject: "hi", text: "hi" })
    } finally {
      t.close()
    }
  })

const statusOf = (server: Server, token: string, id: string) =>
  Effect.map(api(server, "GET", `/v1/sent-emails/${id}`, token), (r) => r.body.data as { status: string; error: { code: string } | null; sent_at: string | null })

layer(Env, { timeout: 180_000, excludeTestServices: true })("scheduled sends", (it) => {
  describe("one process", () => {
    it.effect("sent within a second of send_at; reschedule and cancel while scheduled, 409 not_scheduled after", () =>
      Effect.scoped(Effect.gen(function*() {
        const { server } = yield* startProcess
        const org = yield* newOrg()
        const to = `${unique("soon")}@example.com`
        const at = new Date(Date.now() + 1500)
        const s = yield* schedule(server, org, to, at)
        expect(s.send_at).toBe(at.toISOString())
        const status = yield* api(server, "GET", "/v1/outbound/status", org.token)
        expect(status.body.data.scheduled).toBe(1)
        expect((yield* relayedTo(to)).length).toBe(0)
        const [m] = yield* waitFor("the scheduled send", () => Effect.map(relayedTo(to), (l) => (l.length > 0 ? l : undefined)))
        const lateness = m!.at - at.getTime()
        expect(lateness).toBeGreaterThanOrEqual(0)
        // "Within about a second" on a shared, loaded test machine.
        expect(lateness).toBeLessThan(1500)
        const done = yield* waitFor("status sent", () => Effect.map(statusOf(server, org.token, s.id), (x) => (x.status === "sent" ? x : undefined)))
        expect(done.error).toBeNull()
        const late = yield* api(server, "PATCH", `/v1/sent-emails/${s.id}`, org.token, { send_at: new Date(Date.now() + 60_000).toISOString() })
        expect(late.status).toBe(409)
        expect(late.body.error).toMatchObject({ code: "not_scheduled", details: { status: "sent" } })
        expect((yield* api(server, "POST", `/v1/sent-emails/${s.id}/cancel`, org.token)).status).toBe(409)

        // Reschedule: from a minute away to a second away.
        const moved = `${unique("moved")}@example.com`
        const far = yield* schedule(server, org, moved, new Date(Date.now() + 60_000))
        const past = yield* api(server, "PATCH", `/v1/sent-emails/${far.id}`, org.token, { send_at: new Date(Date.now() - 1000).toISOString() })
        expect(past.status).toBe(400)
        const soon = new Date(Date.now() + 800)
        const patched = yield* api(server, "PATCH", `/v1/sent-emails/${far.id}`, org.token, { send_at: soon.toISOString() })
        expect(patched.status, patched.text).toBe(200)
        expect(patched.body.data).toMatchObject({ status: "scheduled", send_at: soon.toISOString() })
        yield* waitFor("the rescheduled send", () => Effect.map(relayedTo(moved), (l) => (l.length > 0 ? l : undefined)))

        // Cancel: never relayed; a second cancel is 409.
        const dropped = `${unique("dropped")}@example.com`
        const c = yield* schedule(server, org, dropped, new Date(Date.now() + 1000))
        const canceled = yield* api(server, "POST", `/v1/sent-emails/${c.id}/cancel`, org.token)
        expect(canceled.status).toBe(200)
        expect(canceled.body.data.status).toBe("canceled")
        const again = yield* api(server, "POST", `/v1/sent-emails/${c.id}/cancel`, org.token)
        expect(again.status).toBe(409)
        expect(again.body.error.details.status).toBe("canceled")
        yield* Effect.sleep("1500 millis")
        expect((yield* relayedTo(dropped)).length).toBe(0)
        const missing = yield* api(server, "POST", `/v1/sent-emails/00000000-0000-4000-8000-000000000000/cancel`, org.token)
        expect(missing.status).toBe(404)
      })))

    it.effect("checks are repeated at send time: a recipient the gate no longer allows fails the send", () =>
      Effect.scoped(Effect.gen(function*() {
        const { server } = yield* startProcess
        const agent = yield* newOrg("agent")
        const sql = yield* SqlClient.SqlClient
        const friend = `${unique("friend")}@${yield* authenticatedDomain("friends")}`
        yield* mailIn(server, friend, agent.inbox)
        const s = yield* schedule(server, agent, friend, new Date(Date.now() + 1000))
        // The organization forgets the address before the send comes due.
        yield* sql`DELETE FROM known_addresses WHERE org_id = ${agent.orgId}`
        const failed = yield* waitFor("the refused send", () => Effect.map(statusOf(server, agent.token, s.id), (x) => (x.status === "failed" ? x : undefined)))
        expect(failed.error!.code).toBe("recipient_not_allowed")
        expect((yield* relayedTo(friend)).length).toBe(0)
      })))

    it.effect("the quota is taken at send time: 4 sends due together with room for 2 left, 2 sent and 2 failed rate_limited", () =>
      Effect.scoped(Effect.gen(function*() {
        const { server } = yield* startProcess
        const agent = yield* newOrg("agent")
        const sql = yield* SqlClient.SqlClient
        const friend = `${unique("counted")}@${yield* authenticatedDomain("friends")}`
        yield* mailIn(server, friend, agent.inbox)
        const at = new Date(Date.now() + 1500)
        // Each its own subject: four identical requests would be one send (the derived idempotency key).
        const ids = yield* Effect.all(Array.from({ length: 4 }, (_, i) => Effect.map(schedule(server, agent, friend, at, { subject: `due ${i}` }), (s) => s.id)))
        // Eight sends of the last hour (the agent plan's hour holds 10) before these come due.
        yield* sql`INSERT INTO sent_emails (org_id, status, from_header, from_address, subject, message_id, quota_at, sent_at)
          SELECT ${agent.orgId}, 'sent', ${agent.inbox}, ${agent.inbox}, 'earlier', '<earlier.' || g || '.' || ${agent.orgId} || '@x>', now() - interval '10 minutes', now()
          FROM generate_series(1, 8) g`
        const outcomes = yield* Effect.all(ids.map((id) =>
          waitFor("the send's outcome", () =>
            Effect.map(statusOf(server, agent.token, id), (x) => (x.status === "sent" || x.status === "failed" ? x : undefined)))
        ))
        expect(outcomes.filter((o) => o.status === "sent").length).toBe(2)
        const failed = outcomes.filter((o) => o.status === "failed")
        expect(failed.length).toBe(2)
        for (const f of failed) expect(f.error!.code).toBe("rate_limited")
        expect((yield* relayedTo(friend)).length).toBe(2)
        const [counted] = yield* sql<{ n: number }>`
          SELECT count(*)::int AS n FROM sent_emails WHERE org_id = ${agent.orgId} AND quota_at IS NOT NULL AND subject <> 'earlier'`
        expect(counted!.n).toBe(2)
      })))

    it.effect("a transient relay failure is retried; after the last retry the send is failed", () =>
      Effect.scoped(Effect.gen(function*() {
        const { server } = yield* startProcess
        const relay = yield* Relay
        const org = yield* newOrg()
        // One 451, then accepted.
        const once = `${unique("once")}@example.com`
        relay.script.push({ stage: "data", action: "451 4.3.0 busy" })
        const a = yield* schedule(server, org, once, new Date(Date.now() + 500))
        yield* waitFor("the retried send", () => Effect.map(statusOf(server, org.token, a.id), (x) => (x.status === "sent" ? x : undefined)))
        expect((yield* relayedTo(once)).length).toBe(1)
        // Three 451s: the first attempt and both retries fail.
        const never = `${unique("never")}@example.com`
        for (let i = 0; i < 3; i++) relay.script.push({ stage: "data", action: "451 4.3.0 busy" })
        const b = yield* schedule(server, org, never, new Date(Date.now() + 500))
        const failed = yield* waitFor("the failed send", () => Effect.map(statusOf(server, org.token, b.id), (x) => (x.status === "failed" ? x : undefined)))
        expect(failed.error!.code).toBe("outbound_relay_failed")
        expect(relay.script).toEqual([])
        const sql = yield* SqlClient.SqlClient
        const rows = yield* sql<{ attempt_count: number }>`SELECT attempt_count FROM sent_emails WHERE id = ${b.id}`
        expect(rows[0]!.attempt_count).toBe(3)
        // A permanent refusal is not retried.
        const perm = `${unique("perm")}@example.com`
        relay.script.push({ stage: "data", action: "550 5.1.1 no such user" })
        const c = yield* schedule(server, org, perm, new Date(Date.now() + 500))
        const f = yield* waitFor("the refused send", () => Effect.map(statusOf(server, org.token, c.id), (x) => (x.status === "failed" ? x : undefined)))
        expect(f.error!.code).toBe("outbound_relay_failed")
        const once550 = yield* sql<{ attempt_count: number }>`SELECT attempt_count FROM sent_emails WHERE id = ${c.id}`
        expect(once550[0]!.attempt_count).toBe(1)
      })))
  })

  describe("several processes", () => {
    it.effect("a restart: sends due while no process ran go out once at start; later ones at their time, in order", () =>
      Effect.scoped(Effect.gen(function*() {
        const org = yield* newOrg()
        const first = yield* startProcess
        // Lead times from the schedule, not from how fast this machine is: each send_at is still ahead when
        // its request is checked, however loaded the machine.
        const base = Date.now()
        const missed = [0, 1, 2].map((i) => `${unique(`missed${i}`)}@example.com`)
        const later = `${unique("later")}@example.com`
        for (const to of missed) yield* schedule(first.server, org, to, new Date(base + 4000))
        yield* first.stop
        const laterAt = new Date(Math.max(Date.now(), base + 4000) + 4000)
        yield* Effect.sleep(Math.max(0, base + 5000 - Date.now()))
        for (const to of missed) expect((yield* relayedTo(to)).length).toBe(0)
        const second = yield* startProcess
        yield* schedule(second.server, org, later, laterAt)
        const sentMissed = yield* Effect.forEach(missed, (to) =>
          waitFor(`the missed send to ${to}`, () => Effect.map(relayedTo(to), (l) => (l.length > 0 ? l : undefined))))
        const [m] = yield* waitFor("the later send", () => Effect.map(relayedTo(later), (l) => (l.length > 0 ? l : undefined)))
        // The later send keeps its own time: never before it, and after every missed one.
        expect(m!.at).toBeGreaterThanOrEqual(laterAt.getTime())
        for (const [s] of sentMissed) expect(s!.at).toBeLessThanOrEqual(m!.at)
        yield* Effect.sleep("500 millis")
        for (const to of [...missed, later]) expect((yield* relayedTo(to)).length).toBe(1)
        yield* second.stop
      })))

    it.effect("two processes share the due sends: each sent exactly once, never before send_at", () =>
      Effect.scoped(Effect.gen(function*() {
        const org = yield* newOrg()
        const a = yield* startProcess
        const b = yield* startProcess
        // Lead time for scheduling 40 sends on a busy machine: send_at must still be ahead when each
        // request is checked.
        const at = new Date(Date.now() + 15_000)
        const recipients = Array.from({ length: 40 }, (_, i) => `${unique(`pair${i}`)}@example.com`)
        yield* Effect.forEach(recipients, (to, i) => schedule(i % 2 === 0 ? a.server : b.server, org, to, at), { concurrency: 8 })
        yield* waitFor("every send", () =>
          Effect.map(Effect.forEach(recipients, relayedTo), (lists) => (lists.every((l) => l.length > 0) ? true : undefined)), 20_000)
        yield* Effect.sleep("500 millis")
        const lists = yield* Effect.forEach(recipients, relayedTo)
        expect(lists.map((l) => l.length)).toEqual(recipients.map(() => 1))
        // Never before send_at. How late is this machine's load, not the schedule's: printed, not asserted
        // (the one-process test holds the schedule's bound on an idle timer).
        const lateness = lists.map((l) => l[0]!.at - at.getTime()).sort((x, y) => x - y)
        expect(lateness[0]!).toBeGreaterThanOrEqual(0)
        console.log(`two processes: 40 sends relayed ${lateness[0]}–${lateness[lateness.length - 1]} ms after send_at`)
        yield* a.stop
        yield* b.stop
      })))

    it.effect("cancel at the moment of sending: canceled and never relayed, or relayed and 409 — never both", () =>
      Effect.scoped(Effect.gen(function*() {
        const org = yield* newOrg()
        const a = yield* startProcess
        const b = yield* startProcess
        const at = new Date(Date.now() + 12_000)
        const recipients = Array.from({ length: 30 }, (_, i) => `${unique(`race${i}`)}@example.com`)
        const sends = yield* Effect.forEach(recipients, (to) => schedule(a.server, org, to, at), { concurrency: 8 })
        yield* Effect.sleep(Math.max(0, at.getTime() - Date.now() - 30))
        const answers = yield* Effect.forEach(sends, (s, i) =>
          api(i % 2 === 0 ? a.server : b.server, "POST", `/v1/sent-emails/${s.id}/cancel`, org.token), { concurrency: "unbounded" })
        yield* Effect.sleep("2000 millis")
        for (let i = 0; i < sends.length; i++) {
          const relayed = (yield* relayedTo(recipients[i]!)).length
          const final = yield* statusOf(a.server, org.token, sends[i]!.id)
          if (answers[i]!.status === 200) {
            expect(relayed).toBe(0)
            expect(final.status).toBe("canceled")
          } else {
            expect(answers[i]!.status).toBe(409)
            expect(answers[i]!.body.error.code).toBe("not_scheduled")
            expect(relayed).toBe(1)
            expect(final.status).toBe("sent")
          }
        }
        yield* a.stop
        yield* b.stop
      })))
  })
})
