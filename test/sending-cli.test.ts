/**
 * `mailroom send|reply|forward|sent|outbound` as a subprocess (the built CLI) against a running
 * service whose outbound relay is a scripted SMTP server: a send with an attachment reaches the
 * relay, `--at` schedules and `sent cancel` cancels, `sent reschedule` moves a send (409 once it is
 * canceled), reply and forward of mail received over SMTP, the first-send gate's refusal printed
 * with each refused recipient and its fix, and `outbound status`.
 */
import { describe, expect, layer } from "@effect/vitest"
import { Context, Effect, Fiber, Layer } from "effect"
import { simpleParser } from "mailparser"
import nodemailer from "nodemailer"
import { mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Provisioning } from "../src/identity/Provisioning.js"
import { type CliEnv, runCli } from "./support/cli.js"
import { authenticatedDomain, testServiceWithDns } from "./support/dns.js"
import { TestServer, testService } from "./support/harness.js"
import { call } from "./support/http.js"
import { startTestRelay, type TestRelay } from "./support/relay.js"
import { dsn } from "./support/reports.js"

class Relay extends Context.Tag("test/Relay")<Relay, TestRelay>() {}

const Env = Provisioning.Default.pipe(
  Layer.provideMerge(Layer.unwrapScoped(Effect.map(startTestRelay, (relay) =>
    testServiceWithDns({ OUTBOUND_SMTP_URL: relay.url }).pipe(Layer.merge(Layer.succeed(Relay, relay))))))
)

/** Every CLI run starts a Node process: seconds each on a busy machine. */
const SLOW = 300_000

let seq = 0
const unique = (label: string) => `${label}-${++seq}-${Math.random().toString(36).slice(2, 7)}`

const newOrg = (plan: "agent" | "developer" = "developer") =>
  Effect.gen(function*() {
    const p = yield* Provisioning
    const org = yield* p.createOrganization({ name: "Cli sender", plan })
    const key = yield* p.issueApiKey(org.id)
    const server = yield* TestServer
    const env: CliEnv = {
      baseUrl: server.baseUrl,
      configHome: mkdtempSync(join(tmpdir(), "mailroom-cli-")),
      extra: { MAILROOM_API_KEY: key.apiKey }
    }
    return { env, inbox: org.managedInboxAddress!, token: key.apiKey }
  })

const cli = (env: CliEnv, ...args: Array<string>) => Effect.promise(() => runCli(args, env))
const json = (stdout: string) => JSON.parse(stdout) as Record<string, any>

/** Mail into the service over SMTP; answers the stored email's id. */
const mailIn = (from: string, to: string, subject: string) =>
  Effect.flatMap(TestServer, (server) =>
    Effect.promise(async () => {
      const t = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
      try {
        const info = await t.sendMail({ from, to, cc: "colleague@example.net", subject, text: "Can you help?" })
        return /queued as ([0-9a-f-]{36})/.exec(String(info.response))?.[1]!
      } finally {
        t.close()
      }
    }))

const relayedTo = (to: string) =>
  Effect.flatMap(Relay, (r) =>
    Effect.promise(async () => {
      const found = r.messages.filter((x) => x.to.includes(to))
      return Promise.all(found.map(async (m) => ({ envelope: m, parsed: await simpleParser(m.raw) })))
    }))

layer(Env, { timeout: SLOW, excludeTestServices: true })("sending CLI", (it) => {
  describe("send", () => {
    it.effect("sends with an attachment and a text file to the relay; --json prints the sent email; usage errors exit 2", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const to = `${unique("ada")}@example.com`
        const dir = mkdtempSync(join(tmpdir(), "mailroom-send-"))
        writeFileSync(join(dir, "numbers.csv"), "a,b\n1,2\n")
        writeFileSync(join(dir, "body.txt"), "Numbers attached.\n")
        writeFileSync(join(dir, "body.html"), "<p>Numbers <b>attached</b>.</p>")

        const sent = yield* cli(
          org.env,
          "send", "--from", `Agent <${org.inbox}>`, "--to", to, "--cc", "carol@example.org", "--subject", "Quarterly",
          "--text-file", join(dir, "body.txt"), "--html-file", join(dir, "body.html"), "--attach", join(dir, "numbers.csv"),
          "--idempotency-key", unique("key")
        )
        expect(sent.code, sent.stderr).toBe(0)
        expect(sent.stdout).toMatch(new RegExp(`^Sent [0-9a-f-]{36} to ${to}, carol@example.org \\(relay: 250`))
        const [m] = yield* relayedTo(to)
        // The envelope sender is the message's VERP return path on the managed domain (bounces come back to it).
        expect(m!.envelope.from).toMatch(/^bounces\+[0-9a-f]{48}@/)
        expect(m!.envelope.from.split("@")[1]).toBe(org.inbox.split("@")[1])
        expect(m!.parsed.subject).toBe("Quarterly")
        expect(m!.parsed.text?.trim()).toBe("Numbers attached.")
        expect(m!.parsed.html).toContain("<b>attached</b>")
        expect(m!.parsed.attachments.map((a) => [a.filename, a.contentType, a.content.toString()])).toEqual([
          ["numbers.csv", "text/csv", "a,b\n1,2\n"]
        ])

        const id = /^Sent ([0-9a-f-]{36})/.exec(sent.stdout)![1]!
        const got = yield* cli(org.env, "sent", "get", id)
        expect(got.code, got.stderr).toBe(0)
        expect(got.stdout).toMatch(/status\s+sent/)
        expect(got.stdout).toMatch(/numbers\.csv\s+text\/csv\s+8/)
        expect(got.stdout).toContain("Numbers attached.")

        // No --from: the organization's only address, as reply does.
        const asJson = yield* cli(org.env, "send", "--to", to, "--subject", "Again", "--text", "hi", "--json")
        expect(asJson.code, asJson.stderr).toBe(0)
        expect(json(asJson.stdout)).toMatchObject({ status: "sent", subject: "Again", to: [to], error: null, from: org.inbox })
        expect(yield* relayedTo(to)).toHaveLength(2)

        const list = yield* cli(org.env, "sent", "list", "--to", to, "--status", "sent", "--json")
        expect(json(list.stdout).data.map((s: { subject: string }) => s.subject)).toEqual(["Again", "Quarterly"])

        // Refused before any request.
        const noBody = yield* cli(org.env, "send", "--from", org.inbox, "--to", to, "--subject", "x")
        expect(noBody.code).toBe(2)
        expect(noBody.stderr).toContain("a body is required")
        const noTo = yield* cli(org.env, "send", "--from", org.inbox, "--subject", "x", "--text", "y")
        expect(noTo.code).toBe(2)
        expect(noTo.stderr).toContain("--to")
        const missingFile = yield* cli(org.env, "send", "--from", org.inbox, "--to", to, "--subject", "x", "--text", "y", "--attach", join(dir, "nope.pdf"))
        expect(missingFile.code).toBe(2)
        expect(missingFile.stderr).toContain("--attach: cannot read")
        const badAt = yield* cli(org.env, "send", "--from", org.inbox, "--to", to, "--subject", "x", "--text", "y", "--at", "tomorrow")
        expect(badAt.code).toBe(2)
        expect(badAt.stderr).toContain("--at: not a time")
        // The API's refusal of a sender names the valid ones.
        const wrongFrom = yield* cli(org.env, "send", "--from", "someone@elsewhere.example", "--to", to, "--subject", "x", "--text", "y")
        expect(wrongFrom.code).toBe(3)
        expect(wrongFrom.stderr).toContain("error: cannot_send_from_domain:")
        expect(wrongFrom.stderr).toContain(org.inbox)
        expect(yield* relayedTo(to)).toHaveLength(2)
      }), SLOW)

    it.effect("an immediate send in flight is listed as sending, never as scheduled", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const relay = yield* Relay
        const to = `${unique("inflight")}@example.com`
        // The relay takes the message and says nothing: the send is in flight until the connection drops.
        relay.script.push({ stage: "data", action: "stall" })
        const ends = relay.dataEnds.count
        const sending = yield* Effect.fork(cli(org.env, "send", "--to", to, "--subject", "In flight", "--text", "t"))
        const listed = (status?: string) =>
          Effect.map(
            call("GET", `/v1/sent-emails?to=${encodeURIComponent(to)}${status === undefined ? "" : `&status=${status}`}`, { token: org.token }),
            (r) => r.body.data as Array<{ id: string; status: string }>
          )
        let rows = yield* listed()
        for (let i = 0; i < 600 && (rows.length === 0 || relay.dataEnds.count === ends); i++) {
          yield* Effect.sleep("50 millis")
          rows = yield* listed()
        }
        expect(rows.map((r) => r.status)).toEqual(["sending"])
        expect(yield* listed("scheduled")).toEqual([])
        expect((yield* listed("sending")).map((r) => r.id)).toEqual([rows[0]!.id])
        const status = yield* call("GET", "/v1/outbound/status", { token: org.token })
        expect(status.body.data.scheduled).toBe(0)
        relay.dropConnections()
        const done = yield* Fiber.join(sending)
        expect(done.code).toBe(3)
        expect((yield* listed()).map((r) => r.status)).toEqual(["failed"])
      }), SLOW)

    it.effect("--at schedules; sent cancel cancels; sent reschedule moves; a canceled send cannot be rescheduled", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const to = `${unique("later")}@example.com`
        const at = new Date(Date.now() + 3_600_000)
        const scheduled = yield* cli(org.env, "send", "--from", org.inbox, "--to", to, "--subject", "Later", "--text", "t", "--at", at.toISOString(), "--json")
        expect(scheduled.code, scheduled.stderr).toBe(0)
        const one = json(scheduled.stdout)
        expect(one).toMatchObject({ status: "scheduled", sent_at: null })
        expect(one.send_at).toBe(at.toISOString())

        const second = yield* cli(org.env, "send", "--from", org.inbox, "--to", to, "--subject", "Later 2", "--text", "t", "--at", "2h")
        expect(second.code, second.stderr).toBe(0)
        expect(second.stdout).toMatch(/^Scheduled [0-9a-f-]{36} to .* for \d{4}-/)
        const secondId = /^Scheduled ([0-9a-f-]{36})/.exec(second.stdout)![1]!

        const status = yield* cli(org.env, "outbound", "status", "--json")
        expect(json(status.stdout)).toMatchObject({ relay: "smtp", scheduled: 2 })

        const canceled = yield* cli(org.env, "sent", "cancel", one.id)
        expect(canceled.code, canceled.stderr).toBe(0)
        expect(canceled.stdout).toContain(`Canceled ${one.id}`)
        const listed = yield* cli(org.env, "sent", "list", "--status", "canceled", "--json")
        expect(json(listed.stdout).data.map((s: { id: string }) => s.id)).toEqual([one.id])

        const target = new Date(Date.now() + 5 * 3_600_000)
        const moved = yield* cli(org.env, "sent", "reschedule", secondId, "--at", target.toISOString(), "--json")
        expect(moved.code, moved.stderr).toBe(0)
        expect(json(moved.stdout)).toMatchObject({ id: secondId, status: "scheduled", send_at: target.toISOString() })
        const movedForPeople = yield* cli(org.env, "sent", "reschedule", secondId, "--at", "3h")
        expect(movedForPeople.stdout).toMatch(new RegExp(`^Rescheduled ${secondId} for \\d{4}-`))

        const tooLate = yield* cli(org.env, "sent", "reschedule", one.id, "--at", "1h")
        expect(tooLate.code).toBe(3)
        expect(tooLate.stderr).toContain("error: not_scheduled:")
        const again = yield* cli(org.env, "--json", "sent", "cancel", one.id)
        expect(again.code).toBe(3)
        expect(json(again.stderr).error).toMatchObject({ code: "not_scheduled", details: { status: "canceled" } })
        const farAway = yield* cli(org.env, "sent", "reschedule", secondId, "--at", "31d")
        expect(farAway.code).toBe(3)
        expect(farAway.stderr).toContain("--at: must be at most 30 days ahead")
        // Nothing scheduled reached the relay.
        expect(yield* relayedTo(to)).toHaveLength(0)
      }), SLOW)
  })

  describe("reply and forward", () => {
    it.effect("reply (and --all) answers the sender in the thread; forward attaches the original", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const sender = `${unique("customer")}@example.com`
        const emailId = yield* mailIn(`Customer <${sender}>`, org.inbox, "Need help")
        expect(emailId).toMatch(/^[0-9a-f-]{36}$/)

        const replied = yield* cli(org.env, "reply", emailId, "--text", "On it.", "--json")
        expect(replied.code, replied.stderr).toBe(0)
        const r = json(replied.stdout)
        expect(r).toMatchObject({ status: "sent", subject: "Re: Need help", to: [expect.stringContaining(sender)], cc: [] })
        const [answer] = yield* relayedTo(sender)
        expect(answer!.parsed.subject).toBe("Re: Need help")
        expect(answer!.parsed.inReplyTo).toBeTruthy()
        expect(answer!.parsed.text?.trim()).toBe("On it.")

        const all = yield* cli(org.env, "reply", emailId, "--all", "--text", "Looping in.")
        expect(all.code, all.stderr).toBe(0)
        expect(all.stdout).toMatch(/^Replied [0-9a-f-]{36} to .*colleague@example\.net/)
        expect((yield* relayedTo("colleague@example.net")).length).toBeGreaterThanOrEqual(1)

        const ops = `${unique("ops")}@example.com`
        const forwarded = yield* cli(org.env, "forward", emailId, "--to", ops, "--text", "FYI")
        expect(forwarded.code, forwarded.stderr).toBe(0)
        expect(forwarded.stdout).toMatch(new RegExp(`^Forwarded [0-9a-f-]{36} to ${ops}`))
        const [fwd] = yield* relayedTo(ops)
        expect(fwd!.parsed.subject).toMatch(/^Fwd: Need help/)
        expect(fwd!.parsed.text).toContain("FYI")
        expect(fwd!.envelope.raw.toString("latin1")).toContain("message/rfc822")

        const unknown = yield* cli(org.env, "reply", "00000000-0000-4000-8000-000000000000", "--text", "x")
        expect(unknown.code).toBe(3)
        expect(unknown.stderr).toContain("error: not_found:")
      }), SLOW)
  })

  describe("the first-send gate and outbound status", () => {
    it.effect("a refused recipient is printed with its fix and docs URL; --json prints the API's error; status shows quotas", () =>
      Effect.gen(function*() {
        const agent = yield* newOrg("agent")
        // Its domain publishes SPF: once it writes in (authenticated), it is known.
        const stranger = `${unique("stranger")}@${yield* authenticatedDomain("strangers")}`
        const other = `${unique("other")}@example.com`
        const refused = yield* cli(agent.env, "send", "--from", agent.inbox, "--to", stranger, "--to", other, "--subject", "hi", "--text", "t")
        expect(refused.code).toBe(3)
        expect(refused.stderr).toContain("error: recipient_not_allowed:")
        const server = yield* TestServer
        for (const address of [stranger, other]) {
          const line = refused.stderr.split("\n").find((l) => l.includes(`: ${address}: `))
          expect(line, refused.stderr).toBeDefined()
          expect(line).toContain("gate send_to_known_addresses:")
          expect(line).toContain(`fix: wait_for_inbound ${address}`)
          expect(line).toContain(`${server.baseUrl}/docs#tag/sending`)
        }
        const asJson = yield* cli(agent.env, "--json", "send", "--from", agent.inbox, "--to", stranger, "--subject", "hi", "--text", "t")
        expect(asJson.code).toBe(3)
        const error = json(asJson.stderr).error
        expect(error.code).toBe("recipient_not_allowed")
        expect(error.gates).toEqual([expect.objectContaining({ subject: stranger, fix: { action: "wait_for_inbound", subject: stranger } })])
        expect(yield* relayedTo(stranger)).toHaveLength(0)

        // Once the stranger writes in, the send goes out.
        yield* mailIn(stranger, agent.inbox, "hello")
        const ok = yield* cli(agent.env, "send", "--from", agent.inbox, "--to", stranger, "--subject", "hi", "--text", "t")
        expect(ok.code, ok.stderr).toBe(0)
        expect(yield* relayedTo(stranger)).toHaveLength(1)

        const status = yield* cli(agent.env, "outbound", "status")
        expect(status.code, status.stderr).toBe(0)
        expect(status.stdout).toMatch(/relay\s+smtp/)
        expect(status.stdout).toMatch(/reachable\s+true/)
        expect(status.stdout).toMatch(/sent last hour\s+1 of \d+ \(\d+ left\)/)
        const statusJson = json((yield* cli(agent.env, "outbound", "status", "--json")).stdout)
        expect(statusJson).toMatchObject({ relay: "smtp", reachable: true, usage: { last_hour: 1 }, scheduled: 0 })
        expect(statusJson.remaining.hour).toBe(statusJson.limits.send_per_hour - 1)
      }), SLOW)
  })

  describe("send-batch and suppressions", () => {
    it.effect("send-batch sends each message of a JSON file and lists the refused ones; suppressions list and rm", () =>
      Effect.gen(function*() {
        const { env, inbox, token } = yield* newOrg()
        const dir = mkdtempSync(join(tmpdir(), "mailroom-batch-"))
        const a = `${unique("ba")}@example.com`
        const file = join(dir, "messages.json")
        writeFileSync(file, JSON.stringify([{ to: a, subject: "one", text: "1" }, { to: "not an address", subject: "two", text: "2" }]))
        const r = yield* cli(env, "send-batch", "--file", file)
        expect(r.code, r.stderr).toBe(0)
        expect(r.stdout).toContain("validation_error")
        expect(r.stdout).toContain("1 of 2 sent or scheduled, 1 refused")
        const asJson = yield* cli(env, "send-batch", "--file", file, "--json")
        expect(json(asJson.stdout).results[0].email.to).toEqual([a])
        writeFileSync(join(dir, "bad.json"), "{nope")
        expect((yield* cli(env, "send-batch", "--file", join(dir, "bad.json"))).code).toBe(2)

        // A hard bounce returned to the message's return path suppresses the address.
        const relay = yield* Relay
        const returnPath = relay.messages.find((m) => m.to.includes(a))!.from
        const server = yield* TestServer
        yield* Effect.promise(() =>
          nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true }).sendMail({
            envelope: { from: "", to: [returnPath] },
            raw: dsn({ to: returnPath, recipient: a, action: "failed", status: "5.1.1", diagnostic: "550 unknown", messageId: "<x@y>" })
          }))
        const listed = yield* cli(env, "suppressions", "list")
        expect(listed.code, listed.stderr).toBe(0)
        expect(listed.stdout).toContain(a)
        expect(listed.stdout).toContain("hard_bounce")
        const again = yield* cli(env, "send", "--from", inbox, "--to", a, "--subject", "again", "--text", "x")
        expect(again.code).not.toBe(0)
        expect(again.stderr).toContain("recipient_suppressed")
        const rm = yield* cli(env, "suppressions", "rm", a)
        expect(rm.code, rm.stderr).toBe(0)
        expect((yield* cli(env, "suppressions", "rm", a)).code).not.toBe(0)
        expect((yield* call("GET", "/v1/suppressions", { token })).body.meta.total).toBe(0)
      }), SLOW)
  })
})
