/**
 * The inbound SMTP listener (smtp-server). Recipients are checked at RCPT time; the message is
 * streamed with a hard size limit (advertised with SIZE; an oversized stream is drained without
 * being kept); the `250` is sent only after every copy is committed to PostgreSQL, and a database
 * failure answers a temporary `451`, so the sending server retries and nothing is lost.
 */
import { Effect, Layer, Option, Runtime } from "effect"
import { readFileSync } from "node:fs"
import { SMTPServer, type SMTPServerDataStream, type SMTPServerSession } from "smtp-server"
import { AppConfig } from "../platform/Config.js"
import { checkAuthenticity, NO_AUTH } from "./Authenticity.js"
import { classify } from "./Classify.js"
import { emptyParsed, parseEmail, type ParsedEmail } from "./Parse.js"
import { type Recipient, Recipients } from "./Recipients.js"
import { scoreSpam } from "./SpamScore.js"
import { InboundStore } from "./Store.js"

export const MAX_MESSAGE_BYTES = 30 * 1024 * 1024
export const MAX_RECIPIENTS = 100
const PARSE_TIMEOUT_MS = 10_000

const smtpError = (code: number, message: string) => Object.assign(new Error(message), { responseCode: code })

const withTimeout = <A>(p: Promise<A>, ms: number, what: string) =>
  new Promise<A>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`${what} timed out after ${ms} ms`)), ms)
    p.then((v) => {
      clearTimeout(t)
      resolve(v)
    }, (e) => {
      clearTimeout(t)
      reject(e)
    })
  })

export const SmtpServerLive = Layer.scopedDiscard(Effect.gen(function*() {
  const config = yield* AppConfig
  const recipients = yield* Recipients
  const store = yield* InboundStore
  const runtime = yield* Effect.runtime<never>()
  const run = Runtime.runPromise(runtime)
  const accepted = new Map<string, Array<Recipient>>()
  const dnsServer = Option.getOrNull(config.dnsServer)
  const tls = Option.isSome(config.smtpTlsCert) && Option.isSome(config.smtpTlsKey)
    ? { cert: readFileSync(config.smtpTlsCert.value), key: readFileSync(config.smtpTlsKey.value) }
    : undefined

  const onRcptTo = (
    address: { address: string },
    session: SMTPServerSession,
    callback: (err?: Error | null) => void
  ) => {
    const list = accepted.get(session.id) ?? []
    if (list.length >= MAX_RECIPIENTS) {
      return callback(smtpError(452, `4.5.3 Too many recipients (at most ${MAX_RECIPIENTS} per message)`))
    }
    run(recipients.lookup(address.address)).then(
      (found) => {
        if (Option.isNone(found)) {
          return callback(smtpError(550, `5.1.1 <${address.address}>: no such mailbox here`))
        }
        list.push(found.value)
        accepted.set(session.id, list)
        callback()
      },
      () => callback(smtpError(451, "4.3.0 Temporary lookup failure, try again later"))
    )
  }

  const process = async (raw: Buffer, session: SMTPServerSession, rcpts: Array<Recipient>) => {
    let parsed: ParsedEmail = emptyParsed
    let parseError: string | null = null
    try {
      parsed = await withTimeout(parseEmail(raw), PARSE_TIMEOUT_MS, "MIME parsing")
    } catch (e) {
      parseError = e instanceof Error ? e.message : String(e)
    }
    const envelopeFrom = session.envelope.mailFrom ? session.envelope.mailFrom.address || null : null
    const auth = session.remoteAddress
      ? await checkAuthenticity(raw, {
        ip: session.remoteAddress,
        helo: session.hostNameAppearsAs ?? null,
        sender: envelopeFrom,
        dnsServer
      })
      : NO_AUTH
    const message = {
      raw,
      envelopeFrom,
      clientAddress: session.remoteAddress ?? null,
      helo: session.hostNameAppearsAs ?? null,
      parsed,
      parseError,
      auth,
      spam: scoreSpam(parsed, auth),
      event: classify(parsed, raw)
    }
    return run(store.store(message, rcpts))
  }

  const onData = (stream: SMTPServerDataStream, session: SMTPServerSession, callback: (err?: Error | null, message?: string) => void) => {
    const chunks: Array<Buffer> = []
    let size = 0
    stream.on("data", (chunk: Buffer) => {
      size += chunk.length
      // Past the limit the message is refused anyway: what was kept is released at once and the
      // rest is drained, so an oversized stream holds no memory for the rest of its length.
      if (size <= MAX_MESSAGE_BYTES) chunks.push(chunk)
      else if (chunks.length > 0) chunks.length = 0
    })
    stream.on("error", (e) => callback(smtpError(451, `4.3.0 ${e.message}`)))
    stream.on("end", () => {
      const rcpts = accepted.get(session.id) ?? []
      accepted.delete(session.id)
      if (stream.sizeExceeded || size > MAX_MESSAGE_BYTES) {
        return callback(smtpError(552, `5.3.4 Message exceeds the maximum size of ${MAX_MESSAGE_BYTES} bytes`))
      }
      if (rcpts.length === 0) return callback(smtpError(554, "5.5.1 No valid recipients"))
      const raw = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size)
      chunks.length = 0
      process(raw, session, rcpts).then(
        (stored) => {
          if (stored.every((s) => s.status === "rejected")) {
            return callback(smtpError(550, "5.7.1 Message rejected as spam"))
          }
          callback(null, `2.0.0 Ok: queued as ${stored.map((s) => s.id).join(",")}`)
        },
        (e) => {
          Runtime.runFork(runtime)(Effect.logError("inbound message not committed; answered 451", e))
          callback(smtpError(451, "4.3.0 Temporary failure storing the message, try again later"))
        }
      )
    })
  }

  const server = new SMTPServer({
    banner: "Mailroom ESMTP",
    size: MAX_MESSAGE_BYTES,
    authOptional: true,
    disabledCommands: tls ? ["AUTH"] : ["AUTH", "STARTTLS"],
    ...(tls ? { key: tls.key, cert: tls.cert } : {}),
    maxClients: 2000,
    socketTimeout: 60_000,
    closeTimeout: 5_000,
    logger: false,
    onRcptTo,
    onData,
    onMailFrom: (_address, session, callback) => {
      // A new transaction on the same connection (after RSET or a previous message).
      accepted.delete(session.id)
      callback()
    },
    onClose: (session) => {
      accepted.delete(session.id)
    }
  })
  server.on("error", (e) => Runtime.runFork(runtime)(Effect.logWarning("smtp server error", e)))

  yield* Effect.acquireRelease(
    Effect.async<void, Error>((resume) => {
      const onError = (e: Error) => resume(Effect.fail(e))
      server.once("error", onError)
      server.listen(config.smtpPort, config.host, () => {
        server.off("error", onError)
        resume(Effect.void)
      })
    }),
    () => Effect.async<void>((resume) => server.close(() => resume(Effect.void)))
  ).pipe(Effect.orDie)
  yield* Effect.logInfo(`SMTP listening on ${config.host}:${config.smtpPort}`)
}))
