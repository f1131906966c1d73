/**
 * The outbound mailer: SMTP relay with Schedule retries on transient failures (a real SMTP sink
 * that refuses on demand), no retry on permanent ones, and the dev outbox without a relay.
 */
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { vi } from "vitest"
import { readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { Mailer } from "../src/mail/Mailer.js"
import { Templates } from "../src/mail/Templates.js"
import { tempDir, testConfigLayer } from "./support/harness.js"
import { SmtpSink, SmtpSinkLive } from "./support/smtpSink.js"

class Outbox extends Effect.Tag("test/Outbox")<Outbox, { readonly mailer: Mailer; readonly dir: string }>() {}

const RelayMailer = Layer.unwrapEffect(Effect.map(SmtpSink, (sink) =>
  Mailer.Default.pipe(Layer.provide(testConfigLayer({ OUTBOUND_SMTP_URL: `smtp://127.0.0.1:${sink.port}` })))))

const OutboxLive = Layer.scoped(Outbox, Effect.gen(function*() {
  const dir = yield* tempDir
  const mailer = yield* Effect.provide(Mailer, Mailer.Default.pipe(Layer.provide(testConfigLayer({ DATA_DIR: dir }))))
  return { mailer, dir }
}))

const Env = Layer.mergeAll(RelayMailer.pipe(Layer.provideMerge(SmtpSinkLive)), OutboxLive)

const mail = (to: string) => ({ to, ...Templates.signupCode("424242", 15) })

layer(Env, { timeout: 60_000, excludeTestServices: true })("mailer", (it) => {
  describe("SMTP relay", () => {
    it.effect("delivers text and HTML parts", () =>
      Effect.gen(function*() {
        const sink = yield* SmtpSink
        const mailer = yield* Mailer
        expect(mailer.usesRelay).toBe(true)
        yield* mailer.send(mail("a@example.com"))
        const m = yield* Effect.promise(() => sink.next("a@example.com", 0))
        expect(m.subject).toBe("Your Mailroom sign-up code")
        expect(m.text).toContain("424242")
        expect(m.contentTypes).toEqual(expect.arrayContaining(["text/plain", "text/html"]))
      }))

    it.effect("retries transient failures (421) and delivers once", () =>
      Effect.gen(function*() {
        const sink = yield* SmtpSink
        const mailer = yield* Mailer
        sink.failures.push(421, 451)
        const before = sink.attempts.count
        yield* mailer.send(mail("b@example.com"))
        expect(sink.attempts.count - before).toBe(3)
        expect(sink.count("b@example.com")).toBe(1)
      }))

    it.effect("does not retry a permanent failure (550) and reports it", () =>
      Effect.gen(function*() {
        const sink = yield* SmtpSink
        const mailer = yield* Mailer
        sink.failures.push(550)
        const before = sink.attempts.count
        const error = yield* Effect.flip(mailer.send(mail("c@example.com")))
        expect(error).toMatchObject({ _tag: "MailSendError", transient: false, reason: "SMTP 550" })
        expect(sink.attempts.count - before).toBe(1)
        expect(sink.count("c@example.com")).toBe(0)
      }))

    it.effect("gives up after the schedule's retries when the relay keeps failing", () =>
      Effect.gen(function*() {
        const sink = yield* SmtpSink
        const mailer = yield* Mailer
        sink.failures.push(421, 421, 421, 421, 421, 421)
        const before = sink.attempts.count
        const error = yield* Effect.flip(mailer.send(mail("d@example.com")))
        expect(error.transient).toBe(true)
        expect(sink.attempts.count - before).toBe(5)
        sink.failures.length = 0
      }))
  })

  describe("dev outbox", () => {
    it.effect("without OUTBOUND_SMTP_URL each mail is an .eml file in DATA_DIR/outbox", () =>
      Effect.gen(function*() {
        const { mailer, dir } = yield* Outbox
        expect(mailer.usesRelay).toBe(false)
        const lines: Array<string> = []
        const spy = vi.spyOn(console, "log").mockImplementation((...args: Array<unknown>) => void lines.push(args.map(String).join(" ")))
        yield* mailer.send(mail("dev@example.com")).pipe(Effect.ensuring(Effect.sync(() => spy.mockRestore())))
        // The subject and first lines are logged so a developer can sign up without a mail server.
        const logged = lines.join("\n")
        expect(logged).toContain("dev outbox: mail to dev@example.com")
        expect(logged).toContain("Your Mailroom sign-up code")
        expect(logged).toContain("Your Mailroom code: 424242")
        const files = readdirSync(join(dir, "outbox")).filter((f) => f.endsWith(".eml"))
        expect(files.length).toBe(1)
        const raw = readFileSync(join(dir, "outbox", files[0]!), "utf8")
        expect(raw).toContain("Subject: Your Mailroom sign-up code")
        expect(raw).toContain("To: dev@example.com")
        expect(raw).toMatch(/Content-Type: text\/plain/i)
        expect(raw).toContain("424242")
      }))
  })
})
