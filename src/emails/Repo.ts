/**
 * SQL of the Emails area. Rows are decoded (one schema per row shape, the types derived from it), so
 * a renamed or retyped column dies naming the statement instead of reaching the API.
 */
import { SqlClient, type Statement } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import type { Position } from "../contract/Paging.js"
import { type OrgScope, orgOf, scoped } from "../platform/InboxLimit.js"
import { decodeFirst, decodeRows, Enum, JsonColumn, NullableTimestamp, Timestamp } from "../platform/Rows.js"
import { deletionEndsWatches } from "../wake/Repo.js"
import { AuthSummary, type EmailListParams, HeaderMap, WAKE_EVENT_TYPE } from "./Api.js"
import { TrustSchema } from "../mail/Trust.js"

/** An attachment as stored (`ParsedAttachment` of src/mail/Parse.ts). */
const StoredAttachment = Schema.Struct({
  filename: Schema.NullOr(Schema.String),
  content_type: Schema.String,
  size_bytes: Schema.Number,
  content_id: Schema.NullOr(Schema.String),
  disposition: Schema.NullOr(Schema.String),
  kind: Schema.optional(Schema.NullOr(Schema.String))
})

const Addresses = JsonColumn(Schema.Array(Schema.String))

/** The columns a summary shows (`SUMMARY_COLUMNS`). */
const summaryFields = {
  id: Schema.String,
  thread_id: Schema.String,
  domain_id: Schema.NullOr(Schema.String),
  inbox_id: Schema.NullOr(Schema.String),
  recipient: Schema.String,
  envelope_from: Schema.NullOr(Schema.String),
  from_address: Schema.NullOr(Schema.String),
  from_name: Schema.NullOr(Schema.String),
  to_addresses: Addresses,
  cc_addresses: Addresses,
  subject: Schema.NullOr(Schema.String),
  message_id: Schema.NullOr(Schema.String),
  sent_at: NullableTimestamp,
  attachments: JsonColumn(Schema.Array(StoredAttachment)),
  size_bytes: Schema.Number,
  // `numeric`: the driver's text, turned into a number by the presenter.
  spam_score: Schema.NullOr(Schema.String),
  auth: JsonColumn(AuthSummary),
  auto_submitted: Schema.Boolean,
  event_type: Schema.String,
  status: Enum("accepted", "rejected", "quarantined"),
  trust: Schema.NullOr(JsonColumn(TrustSchema)),
  rejection_reason: Schema.NullOr(Schema.String),
  content_discarded_at: NullableTimestamp,
  labels: JsonColumn(Schema.Array(Schema.String)),
  read: Schema.Boolean,
  received_at: Timestamp
}

/** What a list shows of an email (`toSummary`): no headers, references or bodies. */
export const SummaryRow = Schema.Struct(summaryFields)
export type SummaryRow = typeof SummaryRow.Type

/** A stored email's row (`SELECT e.*`; columns not named here are dropped). */
export const EmailRow = Schema.Struct({
  ...summaryFields,
  org_id: Schema.String,
  in_reply_to: Schema.NullOr(Schema.String),
  references: Addresses,
  headers: JsonColumn(HeaderMap)
})
export type EmailRow = typeof EmailRow.Type

/** An email with its content columns (`GET /emails/{id}`). */
export const EmailWithContent = Schema.Struct({
  ...EmailRow.fields,
  text_body: Schema.NullOr(Schema.String),
  html_body: Schema.NullOr(Schema.String),
  extracted_text: Schema.NullOr(Schema.String)
})
export type EmailWithContent = typeof EmailWithContent.Type

const SUMMARY_COLUMNS = `id, thread_id, domain_id, inbox_id, recipient, envelope_from, from_address, from_name, to_addresses, cc_addresses,
  subject, message_id, sent_at, attachments, size_bytes, spam_score, auth, trust, auto_submitted, event_type, status, rejection_reason,
  content_discarded_at, labels, read, received_at`

const PageTotal = Schema.Struct({ page_total: Schema.Number })

const RawRow = Schema.Struct({
  org_id: Schema.String,
  inbox_id: Schema.NullOr(Schema.String),
  raw: Schema.NullOr(Schema.Uint8ArrayFromSelf),
  discarded: Schema.Boolean
})

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

    /** The list's filter rules, over the columns of a summary (unqualified, so they apply to every `listOver` source). */
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
        const rows = yield* sql`
          WITH page AS (
            SELECT ${sql.literal(SUMMARY_COLUMNS)} FROM ${source} AS src WHERE ${sql.and(page)}
            ORDER BY received_at DESC, id DESC LIMIT ${q.limit + 1})
          SELECT t.page_total, page.* FROM (SELECT count(*)::int AS page_total FROM ${source} AS src WHERE ${sql.and(conds)}) t
            LEFT JOIN page ON true
          ORDER BY page.received_at DESC, page.id DESC`
        const listed = yield* decodeRows(SummaryRow, "email list")(rows.filter((r) => r.id !== null))
        const total = yield* decodeRows(PageTotal, "email list total")(rows.slice(0, 1))
        return { rows: listed.slice(0, q.limit), more: listed.length > q.limit, total: total[0]?.page_total ?? 0 }
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
      sql`
        SELECT e.*, c.text_body, c.html_body, c.extracted_text FROM emails e LEFT JOIN email_contents c ON c.email_id = e.id
        WHERE e.id = ${id} AND ${scoped(sql, scope, "e")}`.pipe(Effect.orDie, Effect.flatMap(decodeFirst(EmailWithContent, "email find")))

    /** Sets the labels (sorted, without duplicates) and/or the read state; none when the email is not the organization's. */
    const update = (scope: OrgScope, id: string, change: { readonly labels?: ReadonlyArray<string>; readonly read?: boolean }) => {
      const labels = change.labels === undefined ? null : JSON.stringify([...new Set(change.labels)].sort())
      return sql`
        UPDATE emails SET labels = coalesce(${labels}::jsonb, labels), read = coalesce(${change.read ?? null}::boolean, read)
        WHERE id = ${id} AND ${scoped(sql, scope)} RETURNING id`.pipe(
        Effect.flatMap((rows) => (rows.length === 0 ? Effect.succeedNone : find(scope, id))),
        Effect.orDie
      )
    }

    /** Deletes the email; when it was its thread's last message, the thread's watches end with it. */
    const remove = (scope: OrgScope, id: string) =>
      Effect.gen(function*() {
        const row = yield* sql`DELETE FROM emails WHERE id = ${id} AND ${scoped(sql, scope)} RETURNING *`.pipe(
          Effect.flatMap(decodeFirst(EmailRow, "email delete"))
        )
        if (Option.isSome(row)) yield* deletionEndsWatches(sql, orgOf(scope), row.value.thread_id)
        return row
      }).pipe(sql.withTransaction, Effect.orDie)

    /** The raw bytes and owner of an email (owner checked by the caller: token or bearer). */
    const raw = (id: string) =>
      sql`
        SELECT e.org_id, e.inbox_id, c.raw, e.content_discarded_at IS NOT NULL AS discarded
        FROM emails e LEFT JOIN email_contents c ON c.email_id = e.id WHERE e.id = ${id}`.pipe(
        Effect.orDie,
        Effect.flatMap(decodeFirst(RawRow, "email raw"))
      )

    return { list, listOver, inlineEmails, find, update, remove, raw } as const
  })
}) {}
