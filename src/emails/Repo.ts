/** SQL of the Emails area. */
import { SqlClient, type Statement } from "@effect/sql"
import { Effect, Option } from "effect"
import type { Position } from "../contract/Paging.js"
import type { ParsedAttachment } from "../mail/Parse.js"
import { type OrgScope, orgOf, scoped } from "../platform/InboxLimit.js"
import { deletionEndsWatches } from "../wake/Repo.js"
import { type EmailListParams, WAKE_EVENT_TYPE } from "./Api.js"
import type { Trust } from "../mail/Trust.js"

export interface EmailRow {
  id: string
  org_id: string
  thread_id: string
  domain_id: string | null
  inbox_id: string | null
  recipient: string
  envelope_from: string | null
  from_address: string | null
  from_name: string | null
  to_addresses: Array<string>
  cc_addresses: Array<string>
  subject: string | null
  message_id: string | null
  in_reply_to: string | null
  references: Array<string>
  sent_at: Date | null
  headers: Record<string, string>
  attachments: Array<ParsedAttachment>
  size_bytes: number
  spam_score: string | null
  auth: { spf: string; dkim: string; dmarc: string }
  auto_submitted: boolean
  event_type: string
  status: "accepted" | "rejected" | "quarantined"
  trust: Trust | null
  rejection_reason: string | null
  content_discarded_at: Date | null
  labels: Array<string>
  read: boolean
  received_at: Date
}

/** An email with its content columns (`GET /emails/{id}`). */
export type EmailWithContent = EmailRow & {
  text_body: string | null
  html_body: string | null
  extracted_text: string | null
}

/** What a list shows of an email (`toSummary`): no headers, references or bodies. */
export type SummaryRow = Omit<EmailRow, "headers" | "references" | "in_reply_to" | "org_id">

const SUMMARY_COLUMNS = `id, thread_id, domain_id, inbox_id, recipient, envelope_from, from_address, from_name, to_addresses, cc_addresses,
  subject, message_id, sent_at, attachments, size_bytes, spam_score, auth, trust, auto_submitted, event_type, status, rejection_reason,
  content_discarded_at, labels, read, received_at`

export interface EmailListQuery {
  readonly limit: number
  readonly after: Option.Option<{ readonly createdAt: Date; readonly id: string }>
  readonly recipient?: string
  readonly sender?: string
  readonly eventType?: string
  readonly status?: string
  readonly dateFrom?: Date
  readonly dateTo?: Date
  /** List wake firings (event type `wake.command`) too; without it they are left out. */
  readonly includeWake?: boolean
  readonly inboxId?: string
  readonly label?: string
  readonly unread?: boolean
}

/** The list query a request's parameters ask for (the real list's and the demo's alike). */
export const emailListQuery = (p: typeof EmailListParams.Type, limit: number, after: Position | undefined): EmailListQuery => ({
  limit,
  after: Option.fromNullable(after),
  ...(p.recipient !== undefined ? { recipient: p.recipient } : {}),
  ...(p.sender !== undefined ? { sender: p.sender } : {}),
  ...(p.event_type !== undefined ? { eventType: p.event_type } : {}),
  ...(p.status !== undefined ? { status: p.status } : {}),
  ...(p.date_from !== undefined ? { dateFrom: p.date_from } : {}),
  ...(p.date_to !== undefined ? { dateTo: p.date_to } : {}),
  ...(p.label !== undefined ? { label: p.label } : {}),
  ...(p.unread !== undefined ? { unread: p.unread } : {}),
  includeWake: p.include === "wake",
  ...(p.inbox_id !== undefined ? { inboxId: p.inbox_id } : {})
})

export class EmailsRepo extends Effect.Service<EmailsRepo>()("mailroom/EmailsRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    /** The list's filter rules, over the columns of a summary (unqualified: any `listOver` source). */
    const filters = (q: EmailListQuery) => {
      const conds = [sql`true`]
      if (q.recipient !== undefined) conds.push(sql`recipient = ${q.recipient.toLowerCase()}`)
      if (q.sender !== undefined) conds.push(sql`(from_address = ${q.sender.toLowerCase()} OR envelope_from = ${q.sender.toLowerCase()})`)
      if (q.eventType !== undefined) conds.push(sql`event_type = ${q.eventType}`)
      else if (q.includeWake !== true) conds.push(sql`event_type <> ${WAKE_EVENT_TYPE}`)
      if (q.status !== undefined) conds.push(sql`status = ${q.status}`)
      if (q.dateFrom !== undefined) conds.push(sql`received_at >= ${q.dateFrom}`)
      if (q.dateTo !== undefined) conds.push(sql`received_at <= ${q.dateTo}`)
      if (q.inboxId !== undefined) conds.push(sql`inbox_id = ${q.inboxId}`)
      if (q.label !== undefined) conds.push(sql`labels @> ${JSON.stringify([q.label])}::jsonb`)
      if (q.unread !== undefined) conds.push(q.unread ? sql`NOT read` : sql`read`)
      return conds
    }

    /**
     * A page of the summaries `source` holds (a parenthesised SELECT of the summary columns: the
     * organization's stored mail, or the demo's rows given inline by `inlineEmails`), filtered,
     * newest first, and the total.
     */
    const listOver = (source: Statement.Fragment, q: EmailListQuery) =>
      Effect.gen(function*() {
        const conds = filters(q)
        const page = Option.match(q.after, {
          onNone: () => conds,
          onSome: (c) => [...conds, sql`(received_at, id) < (${c.createdAt}, ${c.id})`]
        })
        // One round trip and one snapshot for the page and its total (the total's row comes back
        // alone when the page is empty), and only the columns a summary shows: headers can be tens
        // of KB per email, and parsing them for a list that never shows them cost more than the page.
        // The source is a plain subquery, so the planner folds it into each scan (indexes still apply).
        const rows = yield* sql<SummaryRow & { readonly page_total: number }>`
          WITH page AS (
            SELECT ${sql.literal(SUMMARY_COLUMNS)} FROM ${source} AS src WHERE ${sql.and(page)}
            ORDER BY received_at DESC, id DESC LIMIT ${q.limit + 1})
          SELECT t.page_total, page.* FROM (SELECT count(*)::int AS page_total FROM ${source} AS src WHERE ${sql.and(conds)}) t
            LEFT JOIN page ON true
          ORDER BY page.received_at DESC, page.id DESC`
        const listed = rows.filter((r) => r.id !== null)
        return { rows: listed.slice(0, q.limit), more: listed.length > q.limit, total: rows[0]?.page_total ?? 0 }
      }).pipe(Effect.orDie)

    const list = (scope: OrgScope, q: EmailListQuery) =>
      listOver(sql`(SELECT ${sql.literal(SUMMARY_COLUMNS)} FROM emails WHERE ${scoped(sql, scope)})`, q)

    /** Summary rows held in memory (the demo's) as a `listOver` source; nothing is stored. */
    const inlineEmails = (rows: ReadonlyArray<SummaryRow>): Statement.Fragment =>
      sql`(SELECT ${sql.literal(SUMMARY_COLUMNS)}
             FROM jsonb_to_recordset(${JSON.stringify(rows)}::jsonb) AS x(id uuid, thread_id uuid, domain_id uuid,
                  inbox_id uuid, recipient text, envelope_from text, from_address text, from_name text,
                  to_addresses jsonb, cc_addresses jsonb, subject text, message_id text, sent_at timestamptz,
                  attachments jsonb, size_bytes integer, spam_score numeric, auth jsonb, trust jsonb,
                  auto_submitted boolean, event_type text, status text, rejection_reason text,
                  content_discarded_at timestamptz, labels jsonb, read boolean, received_at timestamptz))`

    const find = (scope: OrgScope, id: string) =>
      sql<EmailWithContent>`
        SELECT e.*, c.text_body, c.html_body, c.extracted_text FROM emails e LEFT JOIN email_contents c ON c.email_id = e.id
        WHERE e.id = ${id} AND ${scoped(sql, scope, "e")}`.pipe(Effect.map((r) => Option.fromNullable(r[0])), Effect.orDie)

    /** Sets the labels (sorted, without duplicates) and/or the read state; none when the email is not the organization's. */
    const update = (scope: OrgScope, id: string, change: { readonly labels?: ReadonlyArray<string>; readonly read?: boolean }) => {
      const labels = change.labels === undefined ? null : JSON.stringify([...new Set(change.labels)].sort())
      return sql<{ id: string }>`
        UPDATE emails SET labels = coalesce(${labels}::jsonb, labels), read = coalesce(${change.read ?? null}::boolean, read)
        WHERE id = ${id} AND ${scoped(sql, scope)} RETURNING id`.pipe(
        Effect.flatMap((rows) => (rows.length === 0 ? Effect.succeedNone : find(scope, id))),
        Effect.orDie
      )
    }

    /** Deletes the email; when it was its thread's last message, the thread's watches end with it. */
    const remove = (scope: OrgScope, id: string) =>
      Effect.gen(function*() {
        const rows = yield* sql<EmailRow>`DELETE FROM emails WHERE id = ${id} AND ${scoped(sql, scope)} RETURNING *`
        const row = rows[0]
        if (row !== undefined) yield* deletionEndsWatches(sql, orgOf(scope), row.thread_id)
        return Option.fromNullable(row)
      }).pipe(sql.withTransaction, Effect.orDie)

    /** The raw bytes and owner of an email (owner checked by the caller: token or bearer). */
    const raw = (id: string) =>
      sql<{ org_id: string; inbox_id: string | null; raw: Uint8Array | null; discarded: boolean }>`
        SELECT e.org_id, e.inbox_id, c.raw, e.content_discarded_at IS NOT NULL AS discarded
        FROM emails e LEFT JOIN email_contents c ON c.email_id = e.id WHERE e.id = ${id}`.pipe(
        Effect.map((r) => Option.fromNullable(r[0])),
        Effect.orDie
      )

    return { list, listOver, inlineEmails, find, update, remove, raw } as const
  })
}) {}
