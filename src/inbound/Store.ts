/**
 * Durable storage of an inbound SMTP transaction: one `emails` row (+ raw content) per distinct
 * recipient address, committed before the SMTP `250` is sent, together with the work the delivery pipeline attaches
 * to each copy (its delivery row): no accepted mail without its deliveries, no deliveries without
 * their mail.
 *
 * Group commit: SMTP transactions that arrive while earlier ones are being written are stored
 * together, in ONE autocommitted statement (multi-row INSERTs), by a few writers; each transaction's
 * `250` still waits for the commit of the statement that holds it. Alone, a transaction is one
 * statement and one round trip. Should a batch fail for a reason that lies in some message's data
 * (not the database's availability), its transactions are retried one by one, so one message can
 * never cost the others their acceptance.
 *
 * Storage quotas are enforced by the database as the rows are inserted (migrations/0025): a
 * transaction that would take any of its organizations past the plan's `storage_mb` stores nothing
 * and fails with `StorageQuotaExceeded` (the SMTP answer is a temporary `452 4.2.2`).
 */
import { SqlClient, type SqlError, type Statement } from "@effect/sql"
import { Cause, Context, Data, Effect, Exit, Option } from "effect"
import { randomUUID } from "node:crypto"
import { makeBatcher } from "../platform/Batching.js"
import { sqlState } from "../platform/SqlErrors.js"
import { AppConfig } from "../platform/Config.js"
import { replyTextOf } from "../mail/ReplyText.js"
import { documentRow } from "../mail/SearchDocument.js"
import { Threading } from "../mail/Threading.js"
import type { AuthResults } from "./Authenticity.js"
import type { CommandPart } from "../mail/WakeMessage.js"
import { type EventType, isAutoSubmitted } from "./Classify.js"
import type { ParsedEmail } from "../mail/Parse.js"
import { copyKey, type Recipient } from "./Recipients.js"
import type { SpamVerdict } from "./SpamScore.js"
import { quarantineMatch } from "../filters/Evaluate.js"
import type { Trust } from "../mail/Trust.js"
import { ArrivalLookups } from "./ArrivalLookups.js"

export interface InboundMessage {
  readonly raw: Buffer
  readonly envelopeFrom: string | null
  readonly clientAddress: string | null
  readonly helo: string | null
  readonly parsed: ParsedEmail
  readonly parseError: string | null
  readonly auth: AuthResults
  /** The From address when DMARC or an aligned DKIM signature proves it; else null. */
  readonly authenticatedFrom: string | null
  /** The From address when it may become a known sender (DMARC, or aligned DKIM/SPF without a DMARC record); else null. */
  readonly knownFrom: string | null
  readonly spam: SpamVerdict
  readonly event: EventType
  /** The wake command the message carries (its `application/json` part), for copies to wake addresses. */
  readonly command: CommandPart | null
  /**
   * The command was composed and signed by this service's own wake firing (never set for mail
   * that arrived): its signature needs no check against the organization's secrets.
   */
  readonly commandSignedHere?: boolean
  /** Trust signals of its content (src/mail/Signals.ts). */
  readonly signals: ReadonlyArray<string>
  /** Organizations whose attachment policy quarantines this message (src/account/AttachmentPolicy.ts). */
  readonly policyQuarantine?: ReadonlyArray<string>
}

/** A copy for a function's wake address that carries a command is a `wake.command`; the rest keep the message's type. */
export const eventOf = (recipient: Recipient, message: InboundMessage): EventType =>
  recipient.wake !== null && message.command !== null ? "wake.command" : message.event

export interface StoredEmail {
  readonly id: string
  readonly orgId: string
  /** The conversation it joins (src/mail/Threading.ts). */
  readonly threadId: string
  readonly recipient: Recipient
  /** quarantined: held back by a quarantine filter or the attachment policy (stored, not delivered). */
  readonly status: "accepted" | "rejected" | "quarantined"
  readonly trust: Trust
}

/**
 * Work stored atomically with each accepted email (its delivery, the payments email rail's queue
 * row): a data-modifying statement (INSERT … RETURNING) embedded in the statement that stores the
 * email. The email's id is known before the statement runs.
 */
export type EmailStoredHook = (email: StoredEmail, message: InboundMessage) => Effect.Effect<Option.Option<Statement.Fragment>>

/**
 * The hooks every stored email goes through, provided once by the composition root (src/Server.ts).
 * A required service, not a default: a composition that stores mail without them would accept mail
 * and never deliver it, so leaving them out must not typecheck.
 */
export class EmailStoredHooks extends Context.Tag("mailroom/EmailStoredHooks")<EmailStoredHooks, {
  readonly hooks: ReadonlyArray<EmailStoredHook>
}>() {}

/**
 * Largest piece of a raw message sent in one statement. node-postgres copies every parameter into
 * the Bind message it builds, so one 30 MB parameter means a second 30 MB buffer next to the
 * message; larger messages are stored as a first piece and appended piece by piece in the same
 * transaction.
 */
const RAW_PIECE_BYTES = 8 * 1024 * 1024

/** How long quarantined mail waits for a release before it is deleted. */
export const QUARANTINE_MS = 30 * 24 * 3600 * 1000

/** Held back for the recipient's organization: a quarantine filter matches, or its attachment policy says so. */
export const isQuarantined = (r: Recipient, message: InboundMessage) =>
  (message.policyQuarantine ?? []).includes(r.orgId) ||
  quarantineMatch(r.filters, message.parsed.from?.address ?? message.envelopeFrom ?? "", message.signals) !== undefined

export const isRejected = (spam: SpamVerdict, threshold: number | null) => threshold !== null && spam.score > threshold

/** Writers, i.e. batch statements in flight at once (PostgreSQL also shares WAL flushes between them). */
const WRITERS = 2
/** Most SMTP transactions in one statement. */
const MAX_BATCH = 64
/** Bigger messages are written on their own, so a batch statement stays a few megabytes at most. */
const BATCH_MESSAGE_BYTES = 256 * 1024

interface Copy {
  readonly email: StoredEmail
  readonly attached: ReadonlyArray<Statement.Fragment>
}

interface Transaction {
  readonly message: InboundMessage
  readonly copies: ReadonlyArray<Copy>
  /** Threads the message links together, merged by the statement that stores it. */
  readonly merges: ReadonlyArray<Statement.Fragment>
}

/** SQLSTATE classes of errors caused by a statement's data: data exception, integrity, program limit. */
const isDataError = (e: SqlError.SqlError) => /^(22|23|54)[0-9A-Z]{3}$/.test(sqlState(e) ?? "")

/** Raised by `storage_charge` (migrations/0025) when the bytes stored would pass an organization's quota. */
const QUOTA_SQLSTATE = "MRQ01"
const isQuotaError = (e: SqlError.SqlError) => sqlState(e) === QUOTA_SQLSTATE

/** The transaction would take an organization past its storage quota: nothing was stored. */
export class StorageQuotaExceeded extends Data.TaggedError("StorageQuotaExceeded")<{ readonly message: string }> {}

/**
 * One copy per mailbox and destination (`copyKey`): an address given again, in another case or
 * with another `+tag`, that ends at the same place is stored and delivered once.
 */
export const distinctRecipients = (recipients: ReadonlyArray<Recipient>): ReadonlyArray<Recipient> => {
  const seen = new Set<string>()
  return recipients.filter((r) => {
    const key = copyKey(r)
    if (seen.has(key)) return false
    seen.add(key)
    return true
  })
}

export class InboundStore extends Effect.Service<InboundStore>()("mailroom/InboundStore", {
  scoped: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const threading = yield* Threading
    const arrivals = yield* ArrivalLookups
    const indexing = (yield* AppConfig).searchIndexing

    /** One statement storing every copy of the given transactions (and what is attached to them). */
    const write = (transactions: ReadonlyArray<Transaction>) => {
      const emails: Array<Record<string, unknown>> = []
      const contents: Array<Record<string, unknown>> = []
      const documents: Array<Record<string, unknown>> = []
      const attached: Array<Statement.Fragment> = []
      // Authenticated senders of accepted mail become "known" to the organization (the first-send
      // gate lets a reply-only account write to them): only a From that DMARC (or, without a DMARC
      // record, aligned DKIM or SPF) proves, so a forged From never opens the gate. One row per
      // pair, so the insert never meets itself.
      const known = new Map<string, { org_id: string; address: string }>()
      for (const { copies, merges, message } of transactions) {
        attached.push(...merges)
        const p = message.parsed
        for (const { attached: extra, email } of copies) {
          const r = email.recipient
          emails.push({
            id: email.id,
            org_id: r.orgId,
            thread_id: email.threadId,
            domain_id: r.domainId,
            recipient: r.address,
            envelope_from: message.envelopeFrom,
            from_address: p.from?.address ?? null,
            from_name: p.from?.name ?? null,
            to_addresses: JSON.stringify(p.to),
            cc_addresses: JSON.stringify(p.cc),
            subject: p.subject,
            message_id: p.messageId,
            in_reply_to: p.inReplyTo,
            references: JSON.stringify(p.references),
            sent_at: p.date,
            headers: JSON.stringify(p.headers),
            auto_submitted: isAutoSubmitted(p.headers),
            attachments: JSON.stringify(p.attachments),
            size_bytes: message.raw.length,
            spam_score: message.spam.score,
            auth: JSON.stringify(message.auth),
            trust: JSON.stringify(email.trust),
            quarantine_expires_at: email.status === "quarantined" ? new Date(Date.now() + QUARANTINE_MS) : null,
            event_type: eventOf(r, message),
            status: email.status,
            rejection_reason: email.status === "rejected"
              ? `spam score ${message.spam.score} above threshold ${r.spamThreshold} (${message.spam.rules.join(", ")})`
              : null,
            parse_error: message.parseError,
            client_address: message.clientAddress,
            helo: message.helo
          })
          const sender = message.knownFrom ?? undefined
          if (email.status === "accepted" && sender !== undefined && sender.includes("@")) {
            known.set(`${r.orgId} ${sender}`, { org_id: r.orgId, address: sender })
          }
          const extracted = replyTextOf(p)
          contents.push({
            email_id: email.id,
            raw: message.raw.subarray(0, RAW_PIECE_BYTES),
            text_body: p.text,
            html_body: p.html,
            extracted_text: extracted
          })
          // Spam-rejected mail is stored but never searched.
          if (indexing && email.status === "accepted") {
            documents.push(documentRow({
              id: email.id,
              orgId: r.orgId,
              kind: "received",
              emailId: email.id,
              fromAddress: p.from?.address ?? null,
              fromName: p.from?.name ?? null,
              recipients: [...p.to, ...p.cc, r.address],
              subject: p.subject,
              text: p.text,
              html: p.html,
              extractedText: extracted
            }))
          }
          attached.push(...extra)
        }
      }
      // Data-modifying CTEs run to completion whether or not the main query reads them; the ids
      // are chosen here, so no part needs another's output.
      const more = attached.map((f, i) => sql`, ${sql.literal(`attached_${i}`)} AS (${f})`)
      if (documents.length > 0) {
        // Each document is pending in the embedding backlog from the same statement (search/Backlog.ts).
        more.push(sql`, stored_documents AS (INSERT INTO search_documents ${sql.insert(documents)} RETURNING id)`)
        more.push(sql`, queued_documents AS (INSERT INTO search_backlog (id) SELECT id FROM stored_documents)`)
      }
      if (known.size > 0) {
        more.push(sql`, known_senders AS (INSERT INTO known_addresses ${sql.insert([...known.values()])} ON CONFLICT DO NOTHING)`)
      }
      return sql`
        WITH stored_emails AS (INSERT INTO emails ${sql.insert(emails)}),
        stored_contents AS (INSERT INTO email_contents ${sql.insert(contents)})${sql.join("", false)(more)}
        SELECT 1`
    }

    const writeOne = (t: Transaction) => Effect.exit(Effect.asVoid(write([t])))

    const grouped = yield* makeBatcher({
      workers: WRITERS,
      maxBatch: MAX_BATCH,
      run: (batch: ReadonlyArray<Transaction>) =>
        Effect.gen(function*() {
          const exit = yield* Effect.exit(Effect.asVoid(write(batch)))
          // A data error or one organization's full quota fails the whole statement: each
          // transaction is then tried on its own, so only the one at fault is refused.
          const ownFault = Exit.isFailure(exit) &&
            Option.exists(Cause.failureOption(exit.cause), (e) => isDataError(e) || isQuotaError(e))
          if (!ownFault || batch.length === 1) return batch.map(() => exit)
          return yield* Effect.forEach(batch, writeOne, { concurrency: WRITERS })
        })
    })

    /** A large message on its own: the first piece with the row, the rest appended, one transaction. */
    const writeLarge = (t: Transaction) => {
      const raw = t.message.raw
      if (raw.length <= RAW_PIECE_BYTES) return write([t])
      return Effect.gen(function*() {
        yield* write([t])
        for (const { email } of t.copies) {
          for (let at = RAW_PIECE_BYTES; at < raw.length; at += RAW_PIECE_BYTES) {
            yield* sql`UPDATE email_contents SET raw = raw || ${raw.subarray(at, at + RAW_PIECE_BYTES)} WHERE email_id = ${email.id}`
          }
        }
      }).pipe(sql.withTransaction)
    }

    const commit = (transaction: Transaction): Effect.Effect<void, SqlError.SqlError> =>
      transaction.message.raw.length > BATCH_MESSAGE_BYTES ? writeLarge(transaction) : grouped(transaction)

    const store = (message: InboundMessage, recipients: ReadonlyArray<Recipient>) =>
      Effect.gen(function*() {
        const { hooks } = yield* EmailStoredHooks
        const distinct = distinctRecipients(recipients)
        // One thread per organization the message reaches (its copies there share it).
        const p = message.parsed
        const orgs = [...new Set(distinct.map((r) => r.orgId))]
        // The threads and the sender's facts: one statement, shared with the messages arriving at once.
        const { sender: facts, threads } = yield* arrivals.of({
          threads: orgs.map((orgId) => ({ orgId, messageId: p.messageId, inReplyTo: p.inReplyTo, references: p.references })),
          sender: { orgIds: orgs, from: p.from?.address ?? null, authenticated: message.authenticatedFrom }
        })
        const threadOf = new Map(orgs.map((o, i) => [o, threads[i]!]))
        // Received mail (not a wake command, not rejected) ends the watches of the threads it joins.
        const replied = new Set(distinct.filter((r) =>
          eventOf(r, message) === "email.received" && r.wake === null && !isRejected(message.spam, r.spamThreshold) &&
          !isQuarantined(r, message)
        ).map((r) => r.orgId))
        const trustOf = (orgId: string): Trust => ({
          sender_authenticated: message.authenticatedFrom !== null,
          sender_known: facts.known.has(orgId),
          registry_verified: facts.registry,
          auto_submitted: isAutoSubmitted(p.headers),
          signals: message.signals
        })
        const merges = orgs.flatMap((o) => threading.mergeStatements(o, threadOf.get(o)!, replied.has(o)))
        const copies: Array<Copy> = []
        for (const r of distinct) {
          const rejected = isRejected(message.spam, r.spamThreshold)
          // A wake address takes commands whatever they look like: its allowlist decides.
          const quarantined = !rejected && r.wake === null && isQuarantined(r, message)
          const email: StoredEmail = {
            id: randomUUID(),
            orgId: r.orgId,
            threadId: threadOf.get(r.orgId)!.threadId,
            recipient: r,
            status: rejected ? "rejected" : quarantined ? "quarantined" : "accepted",
            trust: trustOf(r.orgId)
          }
          // Rejected and quarantined mail gets no delivery, event or other attached work.
          const attached = rejected || quarantined
            ? []
            : (yield* Effect.forEach(hooks, (hook) => hook(email, message))).flatMap((o) => Option.toArray(o))
          copies.push({ email, attached })
        }
        yield* commit({ message, copies, merges }).pipe(
          Effect.catchIf(isQuotaError, (e) => Effect.fail(new StorageQuotaExceeded({ message: e.message })))
        )
        return copies.map((c) => c.email)
      }).pipe(Effect.withSpan("InboundStore.store"))

    return { store } as const
  }),
  dependencies: [ArrivalLookups.Default]
}) {}
