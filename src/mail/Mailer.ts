/**
 * The outbound mailer every mail of the service goes through.
 *
 * With `OUTBOUND_SMTP_URL` it relays over SMTP (nodemailer); transient failures (connection
 * problems, 4xx replies) are retried on an exponential Schedule, permanent ones (5xx) are not.
 * Without it, the dev outbox: each message is written to `DATA_DIR/outbox/*.eml`
 * and its subject and first lines are logged, so a developer can sign up without a mail server.
 * Nothing of a relayed message's content is logged.
 */
import { Data, Duration, Effect, Option, Redacted, Schedule } from "effect"
import { mkdirSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import nodemailer, { type Transporter } from "nodemailer"
import { isPlainEmailAddress } from "../contract/EmailAddress.js"
import { AppConfig } from "../platform/Config.js"
import { randomToken } from "../platform/Secrets.js"
import type { MailContent } from "./Templates.js"

export interface OutgoingMail extends MailContent {
  readonly to: string
}

export class MailSendError extends Data.TaggedError("MailSendError")<{
  readonly transient: boolean
  readonly reason: string
}> {}

export const FROM_ADDRESS = "Mailroom <no-reply@mailroom.localhost>"
const FROM_ENVELOPE = "no-reply@mailroom.localhost"

/** Connection-level failures and 4xx replies may succeed later; 5xx replies will not. */
export const classify = (error: unknown): MailSendError => {
  const e = (error ?? {}) as { responseCode?: number; code?: string; message?: string }
  const reason = e.responseCode !== undefined ? `SMTP ${e.responseCode}` : e.code ?? "send failed"
  if (typeof e.responseCode === "number") return new MailSendError({ transient: e.responseCode < 500, reason })
  return new MailSendError({ transient: true, reason })
}

export const RETRY_SCHEDULE = Schedule.exponential(Duration.millis(200), 2).pipe(
  Schedule.jittered,
  Schedule.intersect(Schedule.recurs(4))
)

export class Mailer extends Effect.Service<Mailer>()("mailroom/Mailer", {
  effect: Effect.gen(function*() {
    const config = yield* AppConfig
    const relay = Option.map(config.outboundSmtpUrl, (url) =>
      nodemailer.createTransport({
        url: Redacted.value(url),
        connectionTimeout: 10_000,
        greetingTimeout: 10_000,
        socketTimeout: 20_000
      }))
    const builder = nodemailer.createTransport({ streamTransport: true, buffer: true, newline: "unix" })
    const outbox = join(config.dataDir, "outbox")

    /**
     * The recipient goes in as an address object and in an explicit SMTP envelope: given as a
     * string, nodemailer would parse it (display names, `<…>`, lists) and could send to another
     * address than the one recorded.
     */
    const message = (mail: OutgoingMail) => ({
      from: FROM_ADDRESS,
      to: { name: "", address: mail.to },
      envelope: { from: FROM_ENVELOPE, to: [mail.to] },
      subject: mail.subject,
      text: mail.text,
      html: mail.html
    })

    const viaRelay = (transport: Transporter, mail: OutgoingMail) =>
      Effect.tryPromise({ try: () => transport.sendMail(message(mail)), catch: classify }).pipe(
        Effect.tapError((e) => Effect.logWarning(`outbound mail attempt failed: ${e.reason}`)),
        Effect.retry({ schedule: RETRY_SCHEDULE, while: (e) => e.transient }),
        Effect.asVoid
      )

    const toOutbox = (mail: OutgoingMail) =>
      Effect.gen(function*() {
        const info = yield* Effect.tryPromise({ try: () => builder.sendMail(message(mail)), catch: classify })
        const raw = info.message as unknown as Buffer
        const file = join(outbox, `${new Date().toISOString().replace(/[:.]/g, "-")}-${randomToken(6)}.eml`)
        yield* Effect.try({
          try: () => {
            mkdirSync(outbox, { recursive: true })
            writeFileSync(file, raw)
          },
          catch: (e) => new MailSendError({ transient: false, reason: `cannot write ${file}: ${String(e)}` })
        })
        const firstLines = mail.text.split("\n").filter((l) => l.trim() !== "").slice(0, 2).join(" | ")
        yield* Effect.logInfo(`dev outbox: mail to ${mail.to} written to ${file}`).pipe(
          Effect.annotateLogs({ subject: mail.subject, first_lines: firstLines })
        )
      })

    /**
     * Sends one message to exactly `mail.to` (one plain address, else refused as permanent);
     * fails with `MailSendError` only after the retries are exhausted.
     */
    const send = (mail: OutgoingMail): Effect.Effect<void, MailSendError> =>
      (isPlainEmailAddress(mail.to)
        ? Option.match(relay, { onNone: () => toOutbox(mail), onSome: (t) => viaRelay(t, mail) })
        : Effect.fail(new MailSendError({ transient: false, reason: "recipient is not one plain email address" }))
      ).pipe(Effect.withSpan("Mailer.send"))

    return { send, usesRelay: Option.isSome(relay) } as const
  })
}) {}
