/**
 * The inbound SMTP listener (smtp-server). Recipients are checked at RCPT time; the message is
 * streamed with a hard size limit (advertised with SIZE; an oversized stream is drained without
 * being kept) and spooled to DATA_DIR past 1 MiB (Spool.ts); parse, SPF/DKIM/DMARC, score and
 * event type of a message over 4 KB run in a worker thread (AnalyzePool.ts); the `250` is sent only after every copy is
 * committed to PostgreSQL, and a database failure answers a temporary `451`, so the sending server
 * retries and nothing is lost.
 *
 * A recipient address given twice in one transaction (exactly or in another case) is accepted and
 * counts once. Storage quotas: a recipient whose organization is full (or has no room for the size
 * announced with MAIL FROM SIZE=) gets `452 4.2.2` at RCPT; a message that would take any of its
 * organizations past the quota gets `452 4.2.2` at the end of DATA and nothing is stored.
 */
import { Effect, Layer, Option, Runtime } from "effect"
import * as SqlCounters from "../platform/SqlCounters.js"
import { readFileSync } from "node:fs"
import { SMTPServer, type SMTPServerDataStream, type SMTPServerSession } from "smtp-server"
import { AppConfig } from "../platform/Config.js"
import { asPortInUse } from "../platform/Ports.js"
import { MessageAnalysis } from "./AnalyzePool.js"
import { WebhookSecrets } from "../account/WebhookSecret.js"
import { SqlClient } from "@effect/sql"
import { mayCommand } from "../mail/WakeMessage.js"
import { checkCommand } from "./Commands.js"
import { copyKey, normalizeAddress, type Recipient, Recipients } from "./Recipients.js"
import { prepareSpool, receive, spoolDirectory } from "./Spool.js"
import { EmailStoredHooks, InboundStore } from "./Store.js"
import { judgeAttachments } from "../account/AttachmentPolicy.js"
import { BounceIntake } from "./BounceIntake.js"
import { hasRoomFor } from "../routes/Resolver.js"

export const MAX_MESSAGE_BYTES = 30 * 1024 * 1024
export const MAX_RECIPIENTS = 100

const smtpError = (code: number, message: string) => Object.assign(new Error(message), { responseCode: code })

const SmtpListener = Layer.scopedDiscard(Effect.gen(function*() {
  const config = yield* AppConfig
  const secrets = yield* WebhookSecrets
  const sql = yield* SqlClient.SqlClient
  const recipients = yield* Recipients
  const store = yield* InboundStore
  const hooks = yield* EmailStoredHooks
  const bounces = yield* BounceIntake
  // Sent emails whose VERP return paths this transaction was addressed to (src/inbound/BounceIntake.ts).
  const returned = new Map<string, Array<string>>()
  const runtime = yield* Effect.runtime<never>()
  const run = Runtime.runPromise(runtime)
  // Each message is one operation (SqlCounters.ts): its recipient lookups and everything before
  // its reply. Work it leaves running after the reply is charged to it too, but not in `last`.
  const operations = new Map<string, SqlCounters.Operation>()
  const operationOf = (id: string) => {
    const found = operations.get(id)
    if (found !== undefined) return found
    const made = SqlCounters.begin("smtp message")
    operations.set(id, made)
    return made
  }
  const runIn = (operation: SqlCounters.Operation) => <A, E>(effect: Effect.Effect<A, E>) => run(SqlCounters.within(operation, effect))
  const accepted = new Map<string, Array<Recipient>>()
  // Distinct addresses accepted per session: the recipient limit counts these, not stored copies
  // (several `+tag` forms of one mailbox share a copy but are still distinct recipients).
  const given = new Map<string, Set<string>>()
  const dnsServer = Option.getOrNull(config.dnsServer)
  const spoolDir = spoolDirectory(config.dataDir)
  yield* Effect.sync(() => prepareSpool(spoolDir))
  const pool = yield* MessageAnalysis
  const tls = Option.isSome(config.smtpTlsCert) && Option.isSome(config.smtpTlsKey)
    ? { cert: readFileSync(config.smtpTlsCert.value), key: readFileSync(config.smtpTlsKey.value) }
    : undefined

  /** The size the client announced with MAIL FROM … SIZE=n (RFC 1870), if any. */
  const declaredSize = (session: SMTPServerSession) => {
    const args: unknown = session.envelope.mailFrom ? session.envelope.mailFrom.args : undefined
    const size = typeof args === "object" && args !== null ? (args as Record<string, unknown>)["SIZE"] : undefined
    const n = Number(size)
    return typeof size === "string" && Number.isSafeInteger(n) && n > 0 ? n : 0
  }

  const onRcptTo = (
    address: { address: string },
    session: SMTPServerSession,
    callback: (err?: Error | null) => void
  ) => {
    const list = accepted.get(session.id) ?? []
    // The same mailbox again (exactly or in another case): accepted, stored and delivered once.
    const normalized = normalizeAddress(address.address)
    const addresses = given.get(session.id) ?? new Set<string>()
    if (addresses.has(normalized) || list.some((r) => r.address === normalized)) return callback()
    if (addresses.size >= MAX_RECIPIENTS) {
      return callback(smtpError(452, `4.5.3 Too many recipients (at most ${MAX_RECIPIENTS} per message)`))
    }
    const verp = bounces.rcpt(address.address)
    if (verp._tag === "Unknown") return callback(smtpError(550, `5.1.1 <${address.address}>: no such return path here`))
    if (verp._tag === "Accepted") {
      returned.set(session.id, [...(returned.get(session.id) ?? []), verp.sentEmailId])
      addresses.add(normalized)
      given.set(session.id, addresses)
      return callback()
    }
    const check = Effect.gen(function*() {
      const found = yield* recipients.lookup(address.address)
      if (Option.isNone(found)) return { _tag: "Unknown" } as const
      const wake = found.value.wake
      if (wake !== null && !mayCommand(session.envelope.mailFrom ? session.envelope.mailFrom.address : "", wake.allowlist)) {
        return { _tag: "NotAllowed" } as const
      }
      // Room for the announced size times this organization's recipients so far, or at least a byte.
      const orgId = found.value.orgId
      const copies = list.filter((r) => r.orgId === orgId).length + 1
      const room = hasRoomFor(found.value.org, Math.max(1, declaredSize(session) * copies))
      return room ? { _tag: "Accepted", recipient: found.value } as const : { _tag: "Full" } as const
    })
    runIn(operationOf(session.id))(check).then(
      (outcome) => {
        if (outcome._tag === "Unknown") {
          return callback(smtpError(550, `5.1.1 <${address.address}>: no such mailbox here`))
        }
        if (outcome._tag === "Full") {
          return callback(smtpError(452, `4.2.2 <${address.address}>: mailbox full, try again later`))
        }
        if (outcome._tag === "NotAllowed") {
          return callback(smtpError(550, `5.7.1 <${address.address}>: this wake address takes commands only from senders on its allowlist`))
        }
        // One copy per mailbox and destination (checked again: a pipelined duplicate may have been
        // accepted meanwhile); a repeat is answered 250 like the first.
        const key = copyKey(outcome.recipient)
        if (!list.some((r) => copyKey(r) === key)) list.push(outcome.recipient)
        accepted.set(session.id, list)
        addresses.add(normalized)
        given.set(session.id, addresses)
        callback()
      },
      () => callback(smtpError(451, "4.3.0 Temporary lookup failure, try again later"))
    )
  }

  const process = async (
    raw: Buffer,
    session: SMTPServerSession,
    accepted: Array<Recipient>,
    returnedFor: ReadonlyArray<string>,
    operation: SqlCounters.Operation
  ) => {
    const run = runIn(operation)
    // Reports to return paths are applied; what is not a report is kept as the organization's mail.
    const rcpts = [...accepted]
    for (const r of returnedFor.length === 0 ? [] : await run(bounces.data(raw, returnedFor))) {
      if (!rcpts.some((x) => copyKey(x) === copyKey(r))) rcpts.push(r)
    }
    if (rcpts.length === 0) return { _tag: "Report" } as const
    const envelopeFrom = session.envelope.mailFrom ? session.envelope.mailFrom.address || null : null
    // A wake address takes commands, nothing else: without one the whole message is refused.
    const checked = await run(checkCommand(raw, rcpts).pipe(
      Effect.provideService(WebhookSecrets, secrets),
      Effect.provideService(SqlClient.SqlClient, sql)
    ))
    if (checked._tag !== "Command") return checked
    const command = checked.command
    const analysis = await pool.analyze(
      raw,
      session.remoteAddress
        ? { ip: session.remoteAddress, helo: session.hostNameAppearsAs ?? null, sender: envelopeFrom, dnsServer }
        : null
    )
    // Attachment policies of the organizations reached: one that rejects refuses the whole
    // message at DATA (552 5.3.4), one that quarantines holds back that organization's copies.
    const policies = new Map(rcpts.filter((r) => r.wake === null).map((r) => [r.orgId, r.org.attachmentPolicy]))
    const { rejecting, quarantining: policyQuarantine } = judgeAttachments(policies, analysis.parsed.attachments)
    const [rejected] = rejecting.values()
    if (rejected !== undefined) return { _tag: "PolicyRejected", reason: rejected } as const
    const message = {
      raw,
      envelopeFrom,
      clientAddress: session.remoteAddress ?? null,
      helo: session.hostNameAppearsAs ?? null,
      ...analysis,
      command,
      policyQuarantine
    }
    return run(store.store(message, rcpts).pipe(
      Effect.provideService(EmailStoredHooks, hooks),
      Effect.map((stored) => ({ _tag: "Stored", stored } as const)),
      Effect.catchTag("StorageQuotaExceeded", () => Effect.succeed({ _tag: "Full" } as const))
    ))
  }

  const onData = (stream: SMTPServerDataStream, session: SMTPServerSession, callback: (err?: Error | null, message?: string) => void) => {
    receive(stream, { dir: spoolDir, limit: MAX_MESSAGE_BYTES }).then(
      (received) => {
        const rcpts = accepted.get(session.id) ?? []
        const returnedFor = returned.get(session.id) ?? []
        const operation = operationOf(session.id)
        operations.delete(session.id)
        accepted.delete(session.id)
        given.delete(session.id)
        returned.delete(session.id)
        if (received._tag === "TooLarge" || stream.sizeExceeded) {
          return callback(smtpError(552, `5.3.4 Message exceeds the maximum size of ${MAX_MESSAGE_BYTES} bytes`))
        }
        if (rcpts.length === 0 && returnedFor.length === 0) return callback(smtpError(554, "5.5.1 No valid recipients"))
        process(received.raw, session, rcpts, returnedFor, operation).then(
          (outcome) => {
            SqlCounters.end(operation)
            if (outcome._tag === "Report") return callback(null, "2.0.0 Ok: report received")
            if (outcome._tag === "Full") {
              return callback(smtpError(452, "4.2.2 Mailbox full: the message exceeds the recipient's storage quota, try again later"))
            }
            if (outcome._tag === "NoCommand") {
              return callback(smtpError(554, `5.6.0 A wake address takes a command: ${outcome.problem}`))
            }
            if (outcome._tag === "Refused") return callback(smtpError(550, outcome.reason))
            if (outcome._tag === "PolicyRejected") {
              return callback(smtpError(552, `5.3.4 Message refused by the recipient's attachment policy: ${outcome.reason}`))
            }
            const stored = outcome.stored
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
      },
      (e: Error) => {
        // A failed read or spool write: logged here, never echoed (the message may name a spool path).
        Runtime.runFork(runtime)(Effect.logError("inbound message not received; answered 451", e))
        callback(smtpError(451, "4.3.0 Temporary failure receiving the message, try again later"))
      }
    )
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
      given.delete(session.id)
      returned.delete(session.id)
      operations.delete(session.id)
      callback()
    },
    onClose: (session) => {
      accepted.delete(session.id)
      given.delete(session.id)
      returned.delete(session.id)
      operations.delete(session.id)
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
    // Stops accepting at once; open sessions get smtp-server's closeTimeout to finish their message.
    () => Effect.async<void>((resume) => server.close(() => resume(Effect.void)))
  ).pipe(Effect.catchAll((e) => {
    const taken = asPortInUse(config.smtpPort, "SMTP_PORT")(e)
    return taken === undefined ? Effect.die(e) : Effect.fail(taken)
  }))
  yield* Effect.logInfo(`SMTP listening on ${config.host}:${config.smtpPort}`)
}))

/** The listener, with the webhook secrets signed wake commands are checked with. */
export const SmtpServerLive = SmtpListener.pipe(Layer.provide([WebhookSecrets.Default, BounceIntake.Default, MessageAnalysis.Default]))
