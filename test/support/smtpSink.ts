/**
 * A real SMTP server on 127.0.0.1 that keeps every message it accepts, parsed. Tests read the
 * verification codes the service mails from here. `failures` lets a test make the next N
 * deliveries fail with a given SMTP reply (e.g. 421 transient, 550 permanent).
 */
import { Context, Effect, Layer } from "effect"
import { simpleParser } from "mailparser"
import { SMTPServer } from "smtp-server"

export interface SinkMessage {
  readonly to: ReadonlyArray<string>
  readonly subject: string
  readonly text: string
  readonly html: string
  readonly contentTypes: ReadonlyArray<string>
}

export interface SmtpSinkShape {
  readonly port: number
  readonly messages: Array<SinkMessage>
  /** SMTP reply codes to answer the next DATA commands with, in order. */
  readonly failures: Array<number>
  readonly attempts: { count: number }
  /** Resolves with the next message to `to` after `seen` earlier ones (waits up to 10 s). */
  readonly next: (to: string, seen: number) => Promise<SinkMessage>
  readonly count: (to: string) => number
}

export class SmtpSink extends Context.Tag("test/SmtpSink")<SmtpSink, SmtpSinkShape>() {}

export const startSmtpSink = Effect.acquireRelease(
  Effect.promise(async () => {
    const messages: Array<SinkMessage> = []
    const failures: Array<number> = []
    const attempts = { count: 0 }
    const server = new SMTPServer({
      authOptional: true,
      disabledCommands: ["STARTTLS", "AUTH"],
      logger: false,
      onData(stream, session, callback) {
        attempts.count++
        const chunks: Array<Buffer> = []
        stream.on("data", (c: Buffer) => chunks.push(c))
        stream.on("end", () => {
          const failure = failures.shift()
          if (failure !== undefined) {
            const err = Object.assign(new Error(`sink refuses with ${failure}`), { responseCode: failure })
            return callback(err)
          }
          const raw = Buffer.concat(chunks)
          simpleParser(raw).then((parsed) => {
            const types = [...raw.toString("utf8").matchAll(/Content-Type:\s*([^;\s]+)/gi)].map((m) => m[1]!.toLowerCase())
            messages.push({
              to: session.envelope.rcptTo.map((r) => r.address.toLowerCase()),
              subject: parsed.subject ?? "",
              text: parsed.text ?? "",
              html: typeof parsed.html === "string" ? parsed.html : "",
              contentTypes: types
            })
            callback()
          }, (e: Error) => callback(e))
        })
      }
    })
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
    const address = server.server.address()
    const port = typeof address === "object" && address !== null ? address.port : 0
    const mine = (to: string) => messages.filter((m) => m.to.includes(to.toLowerCase()))
    const next = async (to: string, seen: number) => {
      for (let i = 0; i < 200; i++) {
        const list = mine(to)
        if (list.length > seen) return list[seen]!
        await new Promise((r) => setTimeout(r, 50))
      }
      throw new Error(`no mail to ${to} after ${seen} earlier ones`)
    }
    return { server, sink: { port, messages, failures, attempts, next, count: (to: string) => mine(to).length } }
  }),
  ({ server }) => Effect.promise(() => new Promise<void>((resolve) => server.close(() => resolve())))
).pipe(Effect.map(({ sink }) => sink as SmtpSinkShape))

export const SmtpSinkLive = Layer.scoped(SmtpSink, startSmtpSink)

/** The 6-digit code of a mail. */
export const codeOf = (m: SinkMessage): string => {
  const match = /\b(\d{6})\b/.exec(m.text)
  if (!match) throw new Error(`no code in mail "${m.subject}"`)
  return match[1]!
}
