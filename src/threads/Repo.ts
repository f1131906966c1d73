/**
 * SQL of Threads: threads are aggregated from the messages that carry their id. Rows are decoded,
 * so a renamed or retyped column dies naming the statement.
 */
import { SqlClient, type Statement } from "@effect/sql"
import { Effect, Schema } from "effect"
import type { Position } from "../contract/Paging.js"
import { WAKE_EVENT_TYPE } from "../emails/Api.js"
import { type OrgScope, scoped } from "../platform/InboxLimit.js"
import { decodeRows, Enum, JsonColumn, Timestamp } from "../platform/Rows.js"

export const ThreadRow = Schema.Struct({
  id: Schema.String,
  message_count: Schema.Number,
  received_count: Schema.Number,
  sent_count: Schema.Number,
  first_message_at: Timestamp,
  last_message_at: Timestamp
})
export type ThreadRow = typeof ThreadRow.Type

const PageTotal = Schema.Struct({ page_total: Schema.Number })

export const MessageRow = Schema.Struct({
  thread_id: Schema.String,
  direction: Enum("received", "sent"),
  id: Schema.String,
  at: Timestamp,
  from_address: Schema.NullOr(Schema.String),
  to_addresses: JsonColumn(Schema.Array(Schema.String)),
  cc_addresses: JsonColumn(Schema.Array(Schema.String)),
  subject: Schema.NullOr(Schema.String),
  message_id: Schema.NullOr(Schema.String),
  /** The inbox it reached or was sent from (null for a domain address). */
  inbox_id: Schema.optional(Schema.NullOr(Schema.String)),
  /** The start of the text body (null when there is none, or its content was discarded). */
  body: Schema.NullOr(Schema.String),
  /** Received mail's labels and read state (sent mail: none, and read). */
  labels: JsonColumn(Schema.Array(Schema.String)),
  read: Schema.Boolean
})
export type MessageRow = typeof MessageRow.Type

export interface ThreadListQuery {
  readonly limit: number
  readonly after: Position | undefined
  readonly participant?: string | undefined
  readonly dateFrom?: Date | undefined
  readonly dateTo?: Date | undefined
  /** Count wake firings (received mail of event type `wake.command`) as messages; left out otherwise. */
  readonly includeWake?: boolean | undefined
  /** Only threads with a message received at or sent from this inbox. */
  readonly inboxId?: string | undefined
  /** Only threads with a message that carries this label. */
  readonly label?: string | undefined
}

/** Characters of a body read for a snippet (whitespace is collapsed before the cut). */
const BODY_PREFIX = 1000

export class ThreadsRepo extends Effect.Service<ThreadsRepo>()("mailroom/ThreadsRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    /**
     * Every message of the organization that threads show: accepted received mail (spam-rejected
     * mail keeps a thread id so a later reply still links, but is not shown) and sent mail.
     */
    const messages = (scope: OrgScope, withBody: boolean, includeWake = true): Statement.Fragment => {
      const wake = includeWake ? sql`` : sql`AND e.event_type <> ${WAKE_EVENT_TYPE}`
      const body = withBody
        ? sql`CASE WHEN e.content_discarded_at IS NULL THEN left(c.text_body, ${BODY_PREFIX}) END`
        : sql`NULL::text`
      const join = withBody ? sql`LEFT JOIN email_contents c ON c.email_id = e.id` : sql``
      const sentBody = withBody
        ? sql`CASE WHEN NOT s.content_discarded THEN left(coalesce(nullif(sc.text_body, ''), sc.html_body), ${BODY_PREFIX}) END`
        : sql`NULL::text`
      const sentJoin = withBody ? sql`LEFT JOIN sent_email_contents sc ON sc.sent_email_id = s.id` : sql``
      // Sent mail counts once it is sent: a scheduled, failed or canceled send is not part of the conversation.
      return sql`
        SELECT e.thread_id, 'received'::text AS direction, e.id, e.received_at AS at, e.from_address, e.to_addresses,
               e.cc_addresses, e.subject, e.message_id, ${body} AS body, e.inbox_id, e.labels, e.read
          FROM emails e ${join} WHERE ${scoped(sql, scope, "e")} AND e.status = 'accepted' ${wake}
        UNION ALL
        SELECT s.thread_id, 'sent'::text, s.id, coalesce(s.sent_at, s.created_at), s.from_address, s.to_addresses,
               s.cc_addresses, s.subject, s.message_id, ${sentBody}, s.inbox_id, '[]'::jsonb, true
          FROM sent_emails s ${sentJoin} WHERE ${scoped(sql, scope, "s")} AND s.status = 'sent'`
    }

    /**
     * Threads aggregated from the messages `source` selects (the columns of `messages`, or the demo's
     * rows given inline by `inlineMessages`), filtered, last activity first, a page and the total.
     */
    const listOver = (source: Statement.Fragment, q: ThreadListQuery) =>
      Effect.gen(function*() {
        const having: Array<Statement.Fragment> = []
        if (q.participant !== undefined) {
          having.push(sql`bool_or(
          lower(from_address) = ${q.participant.toLowerCase()}
          OR EXISTS (SELECT 1 FROM jsonb_array_elements_text(to_addresses || cc_addresses) a
                      WHERE lower(a) = ${q.participant.toLowerCase()} OR lower(a) LIKE ${`%<${q.participant.toLowerCase()}>`}))`)
        }
        if (q.inboxId !== undefined) having.push(sql`bool_or(inbox_id IS NOT DISTINCT FROM ${q.inboxId}::uuid)`)
        if (q.label !== undefined) having.push(sql`bool_or(labels @> ${JSON.stringify([q.label])}::jsonb)`)
        const conds = [sql`true`]
        if (q.dateFrom !== undefined) conds.push(sql`last_message_at >= ${q.dateFrom}`)
        if (q.dateTo !== undefined) conds.push(sql`last_message_at <= ${q.dateTo}`)
        const page = q.after === undefined
          ? conds
          : [...conds, sql`(last_message_at, id) < (${q.after.createdAt}, ${q.after.id}::uuid)`]
        const rows = yield* sql`
          WITH m AS (${source}),
          t AS (
            SELECT thread_id AS id, count(*)::int AS message_count,
                   count(*) FILTER (WHERE direction = 'received')::int AS received_count,
                   count(*) FILTER (WHERE direction = 'sent')::int AS sent_count,
                   min(at) AS first_message_at, max(at) AS last_message_at
              FROM m GROUP BY thread_id ${having.length === 0 ? sql`` : sql`HAVING ${sql.and(having)}`}),
          f AS (SELECT * FROM t WHERE ${sql.and(conds)}),
          p AS (SELECT * FROM f WHERE ${sql.and(page)} ORDER BY last_message_at DESC, id DESC LIMIT ${q.limit + 1})
          SELECT n.page_total, p.* FROM (SELECT count(*)::int AS page_total FROM f) n LEFT JOIN p ON true
          ORDER BY p.last_message_at DESC, p.id DESC`
        const listed = yield* decodeRows(ThreadRow, "thread list")(rows.filter((r) => r.id !== null))
        const total = yield* decodeRows(PageTotal, "thread list total")(rows.slice(0, 1))
        return { rows: listed, total: total[0]?.page_total ?? 0 }
      }).pipe(Effect.orDie)

    const list = (scope: OrgScope, q: ThreadListQuery) => listOver(messages(scope, false, q.includeWake === true), q)

    /** Message rows held in memory (the demo's) as a `listOver` source; nothing is stored. */
    const inlineMessages = (rows: ReadonlyArray<MessageRow>): Statement.Fragment =>
      sql`SELECT x.thread_id, x.direction, x.id, x.at, x.from_address, x.to_addresses, x.cc_addresses, x.subject,
                 x.message_id, x.body, x.inbox_id, x.labels, x.read
            FROM jsonb_to_recordset(${JSON.stringify(rows)}::jsonb) AS x(thread_id uuid, direction text, id uuid,
                 at timestamptz, from_address text, to_addresses jsonb, cc_addresses jsonb, subject text,
                 message_id text, body text, inbox_id uuid, labels jsonb, read boolean)`

    /** The messages of the given threads, oldest first (wake firings only with `includeWake`, the default). */
    const messagesOf = (scope: OrgScope, threadIds: ReadonlyArray<string>, includeWake = true) =>
      threadIds.length === 0
        ? Effect.succeed<ReadonlyArray<MessageRow>>([])
        : sql`
            SELECT * FROM (${messages(scope, true, includeWake)}) m WHERE m.thread_id IN ${sql.in(threadIds)}
            ORDER BY m.at, m.id`.pipe(Effect.orDie, Effect.flatMap(decodeRows(MessageRow, "thread messages")))

    return { list, listOver, inlineMessages, messagesOf, messages } as const
  })
}) {}
