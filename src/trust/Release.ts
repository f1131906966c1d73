/**
 * Releasing quarantined mail: the stored message is read again and handed to the same work that
 * new mail gets when it is stored (its delivery or event-log row, the payment rail's hook), in one
 * transaction with the status change, so a release delivers exactly once.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Layer, Option, Schedule, Schema } from "effect"
import { Conflict, NotFound } from "../contract/Errors.js"
import { EmailRow } from "../emails/Repo.js"
import { parseEmail } from "../mail/Parse.js"
import { type Recipient, Recipients, UNKNOWN_ORG } from "../inbound/Recipients.js"
import type { EventType } from "../inbound/Classify.js"
import { EmailStoredHooks, type InboundMessage, type StoredEmail } from "../inbound/Store.js"
import { UNKNOWN_TRUST } from "../mail/Trust.js"
import { AppConfig } from "../platform/Config.js"
import { documentRow } from "../mail/SearchDocument.js"
import { decodeFirst } from "../platform/Rows.js"

/** The stored email being released, with what the inbound work needs again. */
const ReleasedRow = Schema.Struct({
  ...EmailRow.fields,
  raw: Schema.NullOr(Schema.Uint8ArrayFromSelf),
  client_address: Schema.NullOr(Schema.String),
  helo: Schema.NullOr(Schema.String)
})

export class QuarantineRelease extends Effect.Service<QuarantineRelease>()("mailroom/QuarantineRelease", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const recipients = yield* Recipients
    const { hooks } = yield* EmailStoredHooks
    const indexing = (yield* AppConfig).searchIndexing

    const release = (orgId: string, id: string) =>
      Effect.gen(function*() {
        const stored = yield* sql`
          SELECT e.*, c.raw FROM emails e LEFT JOIN email_contents c ON c.email_id = e.id
           WHERE e.id = ${id} AND e.org_id = ${orgId}`.pipe(Effect.flatMap(decodeFirst(ReleasedRow, "quarantine release")))
        if (Option.isNone(stored)) return yield* new NotFound({ message: "email not found" })
        const row = stored.value
        if (row.status !== "quarantined") {
          return yield* new Conflict({ message: `email ${id} is ${row.status}, not quarantined: only quarantined mail can be released` })
        }
        const raw = Buffer.from(row.raw ?? new Uint8Array())
        const parsed = yield* Effect.promise(() => parseEmail(raw))
        // Routed as it would be now; an address no longer served still gets its event-log entry.
        const found = yield* recipients.lookup(row.recipient)
        const served: Recipient = Option.getOrElse(found, () => ({
          address: row.recipient,
          orgId,
          domainId: row.domain_id,
          spamThreshold: null,
          filters: [],
          resolution: { orgId, domainId: row.domain_id, via: "none" as const, routeId: null, endpoint: Option.none() },
          wake: null,
          inboxId: null,
          org: UNKNOWN_ORG
        }))
        // The inbox it reached when it arrived (kept, or null once that inbox was deleted).
        const recipient: Recipient = { ...served, inboxId: row.inbox_id }
        const trust = row.trust ?? UNKNOWN_TRUST
        const message: InboundMessage = {
          raw,
          envelopeFrom: row.envelope_from,
          clientAddress: row.client_address,
          helo: row.helo,
          parsed,
          parseError: null,
          auth: row.auth as InboundMessage["auth"],
          authenticatedFrom: trust.sender_authenticated ? parsed.from?.address ?? null : null,
          knownFrom: null,
          spam: { score: row.spam_score === null ? 0 : Number(row.spam_score), rules: [] },
          event: row.event_type as EventType,
          command: null,
          signals: trust.signals
        }
        const email: StoredEmail = { id: row.id, orgId, threadId: row.thread_id, recipient, status: "accepted", trust }
        const work = (yield* Effect.forEach(hooks, (hook) => hook(email, message))).flatMap((o) => Option.toArray(o))
        yield* Effect.gen(function*() {
          const updated = yield* sql`UPDATE emails SET status = 'accepted', quarantine_expires_at = NULL
            WHERE id = ${id} AND org_id = ${orgId} AND status = 'quarantined' RETURNING id`
          if (updated.length === 0) return yield* new Conflict({ message: `email ${id} was released already` })
          for (const fragment of work) yield* sql`WITH released AS (${fragment}) SELECT 1`
          // What accepted mail gets as it is stored: searchable, and an authenticated sender known.
          if (indexing) {
            yield* sql`WITH doc AS (INSERT INTO search_documents ${sql.insert(documentRow({
              id: row.id,
              orgId,
              kind: "received",
              emailId: row.id,
              fromAddress: parsed.from?.address ?? null,
              fromName: parsed.from?.name ?? null,
              recipients: [...parsed.to, ...parsed.cc, row.recipient],
              subject: parsed.subject,
              text: parsed.text,
              html: parsed.html
            }))} ON CONFLICT DO NOTHING RETURNING id)
              INSERT INTO search_backlog (id) SELECT id FROM doc`
          }
          const from = message.authenticatedFrom
          if (from !== null && from.includes("@")) {
            yield* sql`INSERT INTO known_addresses (org_id, address) VALUES (${orgId}, ${from.toLowerCase()}) ON CONFLICT DO NOTHING`
          }
        }).pipe(sql.withTransaction)
      }).pipe(Effect.catchTag("SqlError", Effect.die))

    return { release } as const
  })
}) {}

/** Deletes quarantined mail not released within its 30 days; answers how many. */
export const sweepQuarantine = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const gone = yield* sql`DELETE FROM emails WHERE status = 'quarantined' AND quarantine_expires_at <= now() RETURNING id`
  return gone.length
})

/** The sweep every ten minutes, in every process (idempotent). */
export const QuarantineMaintenanceLive = Layer.scopedDiscard(
  Effect.gen(function*() {
    yield* sweepQuarantine.pipe(
      Effect.catchAllCause((cause) => Effect.logWarning("quarantine sweep failed", cause)),
      Effect.repeat(Schedule.spaced("10 minutes")),
      Effect.delay("40 seconds"),
      Effect.forkScoped
    )
  })
)
