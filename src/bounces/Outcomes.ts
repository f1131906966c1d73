/**
 * What happens to a sent email after the relay took it, as events and state: `email.sent` and
 * `email.delivery_delayed` from the send path, and `email.bounced`, `email.complained` (and a DSN's
 * `delayed`) from reports received at the send's VERP return path (src/mail/Verp.ts, Reports.ts). A hard
 * bounce or a complaint puts the recipient on the organization's suppression list.
 *
 * Only recipients of the sent email are ever suppressed: a report naming another address (a
 * recipient's server having its say about someone else) changes no one's list.
 */
import { SqlClient } from "@effect/sql"
import { Clock, Effect } from "effect"
import { OrgEvents } from "../events/OrgEvents.js"
import { parseMailbox } from "../mail/Addresses.js"
import type { SentRow } from "../sending/SentRows.js"
import { parseReport, type Report } from "./Reports.js"
import { type BounceRecord, SuppressionsRepo } from "./Repo.js"

export const sentSummary = (r: SentRow) => ({
  id: r.id,
  status: r.status,
  from: r.from_header,
  to: r.to_addresses,
  cc: r.cc_addresses,
  bcc: r.bcc_addresses,
  subject: r.subject,
  message_id: r.message_id,
  thread_id: r.thread_id,
  sent_at: r.sent_at === null ? null : new Date(r.sent_at).toISOString()
})

/** Every recipient address of a sent email, lower case. */
export const recipientsOf = (r: Pick<SentRow, "to_addresses" | "cc_addresses" | "bcc_addresses">) =>
  [...new Set([...r.to_addresses, ...r.cc_addresses, ...r.bcc_addresses].map((s) => {
    const m = parseMailbox(s)
    return (typeof m === "string" ? s : m.address).toLowerCase()
  }))]

export type ReportOutcome =
  | { readonly _tag: "Handled"; readonly events: ReadonlyArray<string> }
  /** Not a report this service reads: keep it as ordinary mail of the organization. */
  | { readonly _tag: "Malformed"; readonly orgId: string; readonly reason: string }
  /** The sent email is gone: nothing to match. */
  | { readonly _tag: "Ignored" }

export class Outcomes extends Effect.Service<Outcomes>()("mailroom/Outcomes", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const repo = yield* SuppressionsRepo
    const orgEvents = yield* OrgEvents
    const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

    const eventOf = (row: SentRow, eventType: string, data: Record<string, unknown>, at: Date) =>
      ({ orgId: row.org_id, eventType, createdAt: at, data: { sent_email: sentSummary(row), recipient: null, ...data } })

    const emit = (row: SentRow, eventType: string, data: Record<string, unknown>, at: Date) => orgEvents.emit(eventOf(row, eventType, data, at))

    /** `email.sent`: the relay took the message. */
    const sent = (row: SentRow, relayResponse: string | null) =>
      Effect.flatMap(now, (at) => emit(row, "email.sent", { relay_response: relayResponse }, at))

    /**
     * `email.sent` as CTEs of the statement that records the send as sent (`OrgEvents.emitWithin`):
     * emitted when its CTE `guard` yields the row. `row` is the sent email as that statement leaves it.
     */
    const sentWithin = (row: SentRow, relayResponse: string | null, guard: string) =>
      Effect.flatMap(now, (at) =>
        orgEvents.emitWithin(eventOf(row, "email.sent", { relay_response: relayResponse }, at), guard))

    /** `email.delivery_delayed` from the relay: a temporary failure, tried again at `retryAt`. */
    const relayDelayed = (row: SentRow, smtpCode: number | null, diagnostic: string, retryAt: Date) =>
      Effect.flatMap(now, (at) =>
        emit(row, "email.delivery_delayed", {
          delay: { source: "relay", status: smtpCode === null ? null : String(smtpCode), diagnostic, retry_at: retryAt.toISOString() }
        }, at))

    /** The recipient a report is about, if it is one of the message's; a report naming none is about the only recipient. */
    const matchRecipient = (row: SentRow, named: string | null) => {
      const all = recipientsOf(row)
      if (named !== null) return all.includes(named) ? named : undefined
      return all.length === 1 ? all[0] : undefined
    }

    const applyReport = (row: SentRow, report: Exclude<Report, { kind: "malformed" }>, at: Date) =>
      Effect.gen(function*() {
        const events: Array<string> = []
        const receivedAt = at.toISOString()
        if (report.kind === "arf") {
          const recipient = matchRecipient(row, report.recipient) ?? null
          const bounce: BounceRecord = { type: "complaint", status: report.feedbackType, diagnostic: report.userAgent, received_at: receivedAt, recipient }
          const updated = yield* repo.markOutcome(row.id, "complained", bounce)
          if (recipient !== null) {
            yield* repo.suppress({ orgId: row.org_id, address: recipient, reason: "complaint", sentEmailId: row.id, status: report.feedbackType, diagnostic: report.userAgent })
          }
          yield* emit(updated._tag === "Some" ? updated.value : row, "email.complained", {
            recipient,
            bounce: { type: "complaint", status: report.feedbackType, diagnostic: report.userAgent, received_at: receivedAt }
          }, at)
          events.push("email.complained")
          return events
        }
        let current = row
        for (const r of report.recipients) {
          const recipient = matchRecipient(row, r.recipient) ?? null
          if (r.action === "delayed") {
            yield* emit(current, "email.delivery_delayed", {
              recipient,
              delay: { source: "dsn", status: r.status, diagnostic: r.diagnostic, retry_at: null }
            }, at)
            events.push("email.delivery_delayed")
            continue
          }
          if (r.action !== "failed") continue
          // Action: failed is permanent (RFC 3464 §2.3.3) unless its status says a temporary (4.x.x) failure.
          const type = r.status?.startsWith("4") ? "soft" as const : "hard" as const
          const bounce: BounceRecord = { type, status: r.status, diagnostic: r.diagnostic, received_at: receivedAt, recipient }
          const updated = yield* repo.markOutcome(row.id, "bounced", bounce)
          if (updated._tag === "Some") current = updated.value
          if (type === "hard" && recipient !== null) {
            yield* repo.suppress({ orgId: row.org_id, address: recipient, reason: "hard_bounce", sentEmailId: row.id, status: r.status, diagnostic: r.diagnostic })
          }
          yield* emit(current, "email.bounced", {
            recipient,
            bounce: { type, status: r.status, diagnostic: r.diagnostic, received_at: receivedAt }
          }, at)
          events.push("email.bounced")
        }
        return events
      })

    /**
     * A message received at the VERP return path of `sentEmailId` (its token verified). A report is
     * applied in one transaction; a message that is not one is the caller's to keep as ordinary mail.
     */
    const report = (sentEmailId: string, raw: Buffer): Effect.Effect<ReportOutcome> =>
      Effect.gen(function*() {
        const found = yield* repo.sentEmail(sentEmailId)
        if (found._tag === "None") return { _tag: "Ignored" } as const
        const row = found.value
        const parsed = yield* Effect.tryPromise(() => parseReport(raw)).pipe(
          Effect.orElseSucceed((): Report => ({ kind: "malformed", reason: "the message cannot be parsed" }))
        )
        if (parsed.kind === "malformed") return { _tag: "Malformed", orgId: row.org_id, reason: parsed.reason } as const
        const at = yield* now
        const events = yield* applyReport(row, parsed, at).pipe(sql.withTransaction, Effect.orDie)
        return { _tag: "Handled", events } as const
      }).pipe(Effect.withSpan("Outcomes.report"))

    return { sent, sentWithin, relayDelayed, report } as const
  }),
  dependencies: [SuppressionsRepo.Default]
}) {}
