/**
 * SQL of Sending. Every sent email is written by `recordSentEmail` (one statement: the row and its
 * content), so whatever else must happen when a sent email comes into being (threading) hooks in
 * there. A row's outcome is written by `finish`, fenced by the lease token of whoever sent it.
 * The rows and how the API shows them are in SentRows.ts.
 */
import { SqlClient, type Statement } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import type { Position } from "../contract/Paging.js"
import { extractReplyText } from "../mail/ReplyText.js"
import { type OrgScope, scoped } from "../platform/InboxLimit.js"
import { pageWithTotal } from "../platform/Listing.js"
import { allRows, Count, firstRow, JsonColumn, NullableTimestamp, pageRows } from "../platform/Rows.js"
import { attachmentMeta, ContentRow, SentRow } from "./SentRows.js"

const Counted = Schema.Struct({ n: Count })

/** A window's usage: sends counted in the last hour and day, and the oldest of each. */
const Usage = Schema.Struct({ hour: Count, day: Count, oldest_hour: NullableTimestamp, oldest_day: NullableTimestamp })
export type Usage = typeof Usage.Type
/** The same as `row_to_json` hands it over (timestamps as ISO text). */
const UsageJson = Schema.Struct({
  hour: Schema.Number,
  day: Schema.Number,
  oldest_hour: Schema.NullOr(Schema.DateFromString),
  oldest_day: Schema.NullOr(Schema.DateFromString)
})
const Recipients = SentRow.pipe(Schema.pick("to_addresses", "cc_addresses", "bcc_addresses"))

/** A new sent email: everything the row and its content hold when it is created. */
export interface NewSentEmail {
  readonly id: string
  readonly orgId: string
  readonly kind: "send" | "reply" | "forward"
  readonly sourceEmailId: string | null
  readonly fromHeader: string
  readonly fromAddress: string
  readonly to: ReadonlyArray<string>
  readonly cc: ReadonlyArray<string>
  readonly bcc: ReadonlyArray<string>
  readonly replyTo: string | null
  readonly subject: string
  readonly messageId: string
  readonly inReplyTo: string | null
  readonly references: ReadonlyArray<string>
  readonly sendAt: Date | null
  readonly dueAt: Date
  /** Immediate sends hold the row while the request relays it. */
  readonly lease: { readonly token: string; readonly until: Date } | null
  readonly quotaAt: Date | null
  readonly discardContent: boolean
  readonly automated: boolean
  readonly content: ContentRow
  /** The conversation it joins (src/mail/Threading.ts) and the threads it merges, applied with it. */
  readonly threadId: string
  readonly merges: ReadonlyArray<Statement.Fragment>
}

export interface Outcome {
  readonly status: "sent" | "failed"
  readonly at: Date
  readonly relayResponse: string | null
  readonly error: { readonly code: string; readonly message: string; readonly details: unknown } | null
}


/** Rows of "sent email insert with usage": the row written, or (a window was full) none but the usage. */
const SentEmailInsertWithUsageRow = Schema.Union(
  Schema.Struct({ ...SentRow.fields, quota_usage: JsonColumn(UsageJson) }),
  Schema.Struct({ id: Schema.Null, quota_usage: JsonColumn(UsageJson) })
)

/** A quota decided in the statement that records a send: the plan's windows at `at`. */
export interface QuotaRoom {
  readonly at: Date
  readonly perHour: number
  readonly perDay: number
}

/** Rows of "next due send". */
const NextDueSendRow = Schema.Struct({ due: NullableTimestamp })

/** Rows of "automated sends in thread". */
const AutomatedSendsInThreadRow = Schema.Struct({ n: Count, oldest: NullableTimestamp })

export class SendingRepo extends Effect.Service<SendingRepo>()("mailroom/SendingRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    /** Sends counted in the last hour and the last 24 hours, and when the oldest of each leaves its window. */
    const usageQuery = (orgId: string, now: Date) =>
      sql`
        SELECT count(*) FILTER (WHERE quota_at > ${new Date(now.getTime() - 3600_000)})::int AS hour,
               count(*)::int AS day,
               min(quota_at) FILTER (WHERE quota_at > ${new Date(now.getTime() - 3600_000)}) AS oldest_hour,
               min(quota_at) AS oldest_day
          FROM sent_emails WHERE org_id = ${orgId} AND quota_at > ${new Date(now.getTime() - 86_400_000)}`

    /**
     * The one write of a new sent email (row + content). With `quota`, the same statement first takes
     * the organization's quota lock and counts its usage (`send_usage_locked`, migrations/0200), and
     * writes the row only when both windows have room: one autocommit round trip decides the quota
     * and records the send, and the answer carries the usage as it was before this row (`usage`).
     * The values are cast: an INSERT fed by a SELECT does not type its parameters from the columns.
     */
    const writeSentEmail = (m: NewSentEmail, quota: QuotaRoom | undefined) => {
      const from = quota === undefined ? sql`` : sql`FROM allowed`
      return sql`
        WITH ${
        quota === undefined ? sql`` : sql`quota_usage AS MATERIALIZED (SELECT * FROM send_usage_locked(${m.orgId}::uuid, ${quota.at}::timestamptz)),
          allowed AS MATERIALIZED (SELECT 1 FROM quota_usage WHERE hour < ${quota.perHour}::int AND day < ${quota.perDay}::int),`
      } content AS (
          INSERT INTO sent_email_contents (sent_email_id, text_body, html_body, extracted_text, headers, attachments)
          SELECT ${m.id}::uuid, ${m.content.text_body}::text, ${m.content.html_body}::text,
                 ${extractReplyText(m.content.text_body, m.content.html_body)}::text,
                 ${JSON.stringify(m.content.headers)}::jsonb, ${JSON.stringify(m.content.attachments)}::jsonb ${from}
        )${sql.join("", false)(m.merges.map((f, i) => sql`, ${sql.literal(`merge_${i}`)} AS (${f})`))},
        inserted AS (
          INSERT INTO sent_emails (id, org_id, thread_id, status, kind, source_email_id, from_header, from_address, to_addresses,
            cc_addresses, bcc_addresses, reply_to, subject, message_id, in_reply_to, "references", send_at, due_at,
            lease_token, lease_until, quota_at, discard_content, automated, attachments)
          SELECT ${m.id}::uuid, ${m.orgId}::uuid, ${m.threadId}::uuid, ${m.sendAt === null ? "sending" : "scheduled"}::text, ${m.kind}::text,
            ${m.sourceEmailId}::uuid, ${m.fromHeader}::text, ${m.fromAddress}::text,
            ${JSON.stringify(m.to)}::jsonb, ${JSON.stringify(m.cc)}::jsonb, ${JSON.stringify(m.bcc)}::jsonb, ${m.replyTo}::text,
            ${m.subject}::text, ${m.messageId}::text, ${m.inReplyTo}::text, ${JSON.stringify(m.references)}::jsonb,
            ${m.sendAt}::timestamptz, ${m.dueAt}::timestamptz, ${m.lease?.token ?? null}::text, ${m.lease?.until ?? null}::timestamptz,
            ${m.quotaAt}::timestamptz, ${m.discardContent}::boolean, ${m.automated}::boolean,
            ${JSON.stringify(attachmentMeta(m.content.attachments))}::jsonb ${from}
          RETURNING *)
        ${
        quota === undefined
          ? sql`SELECT * FROM inserted`
          : sql`SELECT (SELECT row_to_json(u) FROM quota_usage u) AS quota_usage, i.* FROM (SELECT 1) AS one LEFT JOIN inserted i ON true`
      }`
    }

    const recordSentEmail = (m: NewSentEmail) =>
      writeSentEmail(m, undefined).pipe(allRows(SentRow, "sent email insert"), Effect.map((rows) => rows[0]!), Effect.orDie)

    /**
     * `recordSentEmail` when the organization's quota has room (see `writeSentEmail`): the row, or
     * none when a window is full, and the usage before it either way. A caller inside a transaction
     * (one that also merges threads) fails it on a full window, so nothing of the send stays.
     */
    const recordCounted = (m: NewSentEmail, quota: QuotaRoom) =>
      writeSentEmail(m, quota).pipe(
        allRows(SentEmailInsertWithUsageRow, "sent email insert with usage"),
        Effect.map((rows) => {
          const r = rows[0]!
          if (r.id === null) return { row: Option.none<SentRow>(), usage: r.quota_usage }
          const { quota_usage, ...row } = r
          return { row: Option.some(row as SentRow), usage: quota_usage }
        }),
        Effect.orDie
      )

    const find = (scope: OrgScope, id: string) =>
      sql`SELECT * FROM sent_emails WHERE id = ${id} AND ${scoped(sql, scope)}`.pipe(
        firstRow(SentRow, "sent email find"),
        Effect.orDie
      )

    const content = (id: string) =>
      sql`SELECT text_body, html_body, extracted_text, headers, attachments FROM sent_email_contents WHERE sent_email_id = ${id}`.pipe(
        firstRow(ContentRow, "sent email content"),
        Effect.orDie
      )

    const list = (
      scope: OrgScope,
      limit: number,
      after: Position | undefined,
      f: { readonly status?: string | undefined; readonly to?: string | undefined; readonly dateFrom?: Date | undefined; readonly dateTo?: Date | undefined
        readonly inboxId?: string | undefined }
    ) => {
      const to = f.to?.trim().toLowerCase()
      return pageWithTotal<{ readonly id: string }>(
        sql,
        "sent_emails",
        sql.and([
          scoped(sql, scope),
          ...(f.status !== undefined ? [sql`status = ${f.status}`] : []),
          ...(to !== undefined
            ? [sql`EXISTS (SELECT 1 FROM jsonb_array_elements_text(to_addresses || cc_addresses || bcc_addresses) x
                 WHERE lower(x) = ${to} OR right(lower(x), ${to.length + 2}) = ${`<${to}>`})`]
            : []),
          ...(f.dateFrom !== undefined ? [sql`created_at >= ${f.dateFrom}`] : []),
          ...(f.dateTo !== undefined ? [sql`created_at <= ${f.dateTo}`] : []),
          ...(f.inboxId !== undefined ? [sql`inbox_id = ${f.inboxId}`] : [])
        ]),
        limit,
        after
      ).pipe(pageRows(SentRow, "sent email page"), Effect.orDie)
    }

    /**
     * Writes a send's outcome if `token` still holds the row; the row as it now is, or none when the
     * lease was lost. `along`: CTEs written in the same statement, which see the updated row as the
     * CTE `finished` (an event reporting the outcome: it exists exactly when the outcome does).
     */
    const finish = (id: string, token: string, o: Outcome, along: ReadonlyArray<Statement.Fragment> = []) =>
      sql`
        WITH finished AS (
          UPDATE sent_emails SET status = ${o.status}, sent_at = ${o.status === "sent" ? o.at : null},
            relay_response = ${o.relayResponse}, error_code = ${o.error?.code ?? null}, error_message = ${o.error?.message ?? null},
            error_details = ${o.error === null ? null : JSON.stringify(o.error.details ?? null)}::jsonb,
            attempt_count = attempt_count + 1, lease_token = NULL, lease_until = NULL, due_at = NULL,
            content_discarded = (discard_content AND ${o.status === "sent"}), updated_at = now()
          WHERE id = ${id} AND lease_token = ${token} RETURNING *)${sql.join("", false)(along.map((f) => sql`, ${f}`))}
        SELECT * FROM finished`.pipe(
        firstRow(SentRow, "sent email finish"),
        Effect.tap((row) =>
          Option.isSome(row) && row.value.content_discarded
            ? sql`UPDATE sent_email_contents SET text_body = NULL, html_body = NULL, extracted_text = NULL, attachments = '[]'::jsonb
                  WHERE sent_email_id = ${id}`
            : Effect.void
        ),
        Effect.orDie
      )

    /** A transient failure of a scheduled send: tried again at `dueAt`. */
    const retryLater = (id: string, token: string, dueAt: Date, error: { code: string; message: string }) =>
      sql`UPDATE sent_emails SET due_at = ${dueAt}, attempt_count = attempt_count + 1, lease_token = NULL, lease_until = NULL,
            error_code = ${error.code}, error_message = ${error.message}, quota_at = NULL, updated_at = now()
          WHERE id = ${id} AND lease_token = ${token}`.pipe(Effect.asVoid, Effect.orDie)

    /** Takes due scheduled sends (and immediate ones whose process died: `sending`) whose lease is free (SKIP LOCKED: processes never take the same row). */
    const claimDue = (now: Date, token: string, leaseUntil: Date, batch: number) =>
      sql`
        UPDATE sent_emails s SET lease_token = ${token}, lease_until = ${leaseUntil}
        WHERE s.id IN (
          SELECT id FROM sent_emails
           WHERE status IN ('scheduled', 'sending') AND due_at <= ${now} AND (lease_until IS NULL OR lease_until < ${now})
           ORDER BY due_at LIMIT ${batch} FOR UPDATE SKIP LOCKED)
        RETURNING s.*`.pipe(allRows(SentRow, "sent email claim"), Effect.orDie)

    /** The earliest due time of a scheduled send (the timers sleep until then). */
    const nextDue = sql`SELECT min(GREATEST(due_at, coalesce(lease_until, due_at))) AS due
      FROM sent_emails WHERE status IN ('scheduled', 'sending')`.pipe(
      firstRow(NextDueSendRow, "next due send"),
      Effect.map((row) => Option.isSome(row) ? row.value.due : null),
      Effect.orDie
    )

    /** Changes a scheduled send no one is sending right now; none otherwise. */
    const reschedule = (scope: OrgScope, id: string, sendAt: Date, now: Date) =>
      sql`UPDATE sent_emails SET send_at = ${sendAt}, due_at = ${sendAt}, attempt_count = 0, updated_at = now()
        WHERE id = ${id} AND ${scoped(sql, scope)} AND status = 'scheduled' AND (lease_until IS NULL OR lease_until < ${now})
        RETURNING *`.pipe(firstRow(SentRow, "sent email reschedule"), Effect.orDie)

    const cancel = (scope: OrgScope, id: string, now: Date) =>
      sql`UPDATE sent_emails SET status = 'canceled', due_at = NULL, updated_at = now()
        WHERE id = ${id} AND ${scoped(sql, scope)} AND status = 'scheduled' AND (lease_until IS NULL OR lease_until < ${now})
        RETURNING *`.pipe(firstRow(SentRow, "sent email cancel"), Effect.orDie)

    /** Sends counted in the last hour and the last 24 hours, and when the oldest of each leaves its window. */
    const usage = (orgId: string, now: Date) =>
      usageQuery(orgId, now).pipe(
        allRows(Usage, "send usage"),
        Effect.map((rows) => rows[0]!),
        Effect.orDie
      )

    const scheduledCount = (orgId: string) =>
      sql`SELECT count(*)::int AS n FROM sent_emails WHERE org_id = ${orgId} AND status = 'scheduled'`.pipe(
        allRows(Counted, "scheduled send count"),
        Effect.map((rows) => rows[0]?.n ?? 0),
        Effect.orDie
      )

    /**
     * The usage under the organization's quota lock, held until the surrounding transaction ends
     * (`send_usage_locked`): for a caller that decides more under the same lock (the loop guard).
     */
    const usageLocked = (orgId: string, at: Date) =>
      sql`SELECT * FROM send_usage_locked(${orgId}::uuid, ${at}::timestamptz)`.pipe(
        allRows(Usage, "send usage locked"),
        Effect.map((rows) => rows[0]!),
        Effect.orDie
      )

    /**
     * Counts a leased scheduled send into the quota as it is sent (fenced by the lease) when both
     * windows have room, in one autocommit statement under the quota lock; the usage before it.
     */
    const takeQuota = (orgId: string, id: string, token: string, quota: QuotaRoom) =>
      sql`
        WITH quota_usage AS MATERIALIZED (SELECT * FROM send_usage_locked(${orgId}::uuid, ${quota.at}::timestamptz)),
        -- A data-modifying WITH runs whether or not the SELECT reads it.
        taken AS (
          UPDATE sent_emails SET quota_at = ${quota.at} WHERE id = ${id} AND lease_token = ${token}
            AND EXISTS (SELECT 1 FROM quota_usage WHERE hour < ${quota.perHour}::int AND day < ${quota.perDay}::int))
        SELECT * FROM quota_usage`.pipe(
        allRows(Usage, "send quota take"),
        Effect.map((rows) => rows[0]!),
        Effect.orDie
      )

    /** Automated sends to the thread since `since`, and when the oldest of them was made. */
    const automatedInThread = (threadId: string, since: Date) =>
      sql`
        SELECT count(*)::int AS n, min(created_at) AS oldest FROM sent_emails
        WHERE thread_id = ${threadId} AND automated AND status <> 'canceled' AND created_at > ${since}`.pipe(
        allRows(AutomatedSendsInThreadRow, "automated sends in thread"),
        Effect.map((rows) => rows[0] ?? { n: 0, oldest: null }),
        Effect.orDie
      )

    /**
     * The recipients of each automated send to the thread since its last message from a person: mail
     * received in it not marked automatic, or a send made with a person's credential.
     */
    const automatedSinceLastPerson = (orgId: string, threadId: string) =>
      sql`
        SELECT to_addresses, cc_addresses, bcc_addresses FROM sent_emails
        WHERE thread_id = ${threadId} AND automated AND status <> 'canceled'
          AND created_at > greatest(
            coalesce((SELECT max(received_at) FROM emails WHERE org_id = ${orgId} AND thread_id = ${threadId}
                        AND NOT auto_submitted AND status = 'accepted'), '-infinity'::timestamptz),
            coalesce((SELECT max(created_at) FROM sent_emails WHERE thread_id = ${threadId} AND NOT automated
                        AND status <> 'canceled'), '-infinity'::timestamptz))
        ORDER BY created_at DESC LIMIT 1000`.pipe(allRows(Recipients, "automated recipients"), Effect.orDie)

    return {
      automatedInThread,
      automatedSinceLastPerson,
      recordSentEmail,
      recordCounted,
      find,
      content,
      list,
      finish,
      retryLater,
      claimDue,
      nextDue,
      reschedule,
      cancel,
      usage,
      scheduledCount,
      usageLocked,
      takeQuota
    } as const
  })
}) {}
