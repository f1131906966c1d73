/**
 * SQL of Sending. Every sent email is written by `recordSentEmail` (one statement: the row and its
 * content), so whatever else must happen when a sent email comes into being (threading) hooks in
 * there. A row's outcome is written by `finish`, fenced by the lease token of whoever sent it.
 */
import { SqlClient, type Statement } from "@effect/sql"
import { Effect, Option } from "effect"
import type { Position } from "../contract/Paging.js"
import { extractReplyText } from "../mail/ReplyText.js"
import { type OrgScope, scoped } from "../platform/InboxLimit.js"
import { pageWithTotal } from "../platform/Listing.js"
import type { SentEmail, SentEmailDetail, SentStatus } from "./Api.js"

export interface StoredAttachment {
  readonly filename: string
  readonly content_type: string
  readonly content_base64: string
}

export interface SentRow {
  readonly id: string
  readonly org_id: string
  readonly status: SentStatus
  readonly kind: "send" | "reply" | "forward"
  readonly source_email_id: string | null
  readonly from_header: string
  readonly from_address: string
  readonly to_addresses: ReadonlyArray<string>
  readonly cc_addresses: ReadonlyArray<string>
  readonly bcc_addresses: ReadonlyArray<string>
  readonly reply_to: string | null
  readonly subject: string
  readonly message_id: string
  readonly thread_id: string | null
  /** Set by the database (migrations/0150) from the from address. */
  readonly inbox_id?: string | null
  readonly in_reply_to: string | null
  readonly references: ReadonlyArray<string>
  readonly send_at: Date | null
  readonly sent_at: Date | null
  readonly due_at: Date | null
  readonly attempt_count: number
  readonly lease_token: string | null
  readonly lease_until: Date | null
  readonly quota_at: Date | null
  readonly error_code: string | null
  readonly error_message: string | null
  readonly relay_response: string | null
  readonly discard_content: boolean
  readonly content_discarded: boolean
  /** Sent by an automation (a function's MAILROOM binding): it counts on the loop guard's budgets. */
  readonly automated: boolean
  readonly attachments: ReadonlyArray<{ readonly filename: string; readonly content_type: string; readonly size_bytes: number }>
  readonly created_at: Date
  /** The latest bounce or complaint (src/bounces), null before one. */
  readonly bounce: {
    readonly type: "hard" | "soft" | "complaint"
    readonly status: string | null
    readonly diagnostic: string | null
    readonly received_at: string
    readonly recipient: string | null
  } | null
}

export interface ContentRow {
  readonly text_body: string | null
  readonly html_body: string | null
  /** The reply text (src/mail/ReplyText.ts), computed when the row is written; absent on a new row's content. */
  readonly extracted_text?: string | null
  readonly headers: Record<string, string>
  readonly attachments: ReadonlyArray<StoredAttachment>
}

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

export const toSentEmail = (r: SentRow): SentEmail => ({
  id: r.id,
  status: r.status,
  from: r.from_header,
  to: r.to_addresses,
  cc: r.cc_addresses,
  bcc: r.bcc_addresses,
  reply_to: r.reply_to,
  subject: r.subject,
  message_id: r.message_id,
  thread_id: r.thread_id,
  inbox_id: r.inbox_id ?? null,
  in_reply_to: r.in_reply_to,
  send_at: r.send_at,
  sent_at: r.sent_at,
  created_at: r.created_at,
  error: r.error_code === null ? null : { code: r.error_code, message: r.error_message ?? "" },
  relay_response: r.relay_response,
  content_discarded: r.content_discarded,
  bounce: r.bounce === null || r.bounce === undefined ? null : { ...r.bounce, received_at: new Date(r.bounce.received_at) }
})

export const toSentEmailDetail = (r: SentRow, c: Option.Option<ContentRow>): SentEmailDetail => ({
  ...toSentEmail(r),
  text: Option.match(c, { onNone: () => null, onSome: (x) => x.text_body }),
  html: Option.match(c, { onNone: () => null, onSome: (x) => x.html_body }),
  extracted_text: Option.match(c, {
    onNone: () => null,
    onSome: (x) => x.extracted_text ?? (x.text_body !== null || x.html_body !== null ? extractReplyText(x.text_body, x.html_body) : null)
  }),
  attachments: r.attachments
})

/** Attachment metadata kept on the row (it outlives discarded content). */
export const attachmentMeta = (list: ReadonlyArray<StoredAttachment>) =>
  list.map((a) => ({ filename: a.filename, content_type: a.content_type, size_bytes: Buffer.from(a.content_base64, "base64").length }))

export class SendingRepo extends Effect.Service<SendingRepo>()("mailroom/SendingRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    /** The one write of a new sent email (row + content). */
    const recordSentEmail = (m: NewSentEmail) =>
      sql<SentRow>`
        WITH content AS (
          INSERT INTO sent_email_contents (sent_email_id, text_body, html_body, extracted_text, headers, attachments)
          VALUES (${m.id}, ${m.content.text_body}, ${m.content.html_body}, ${extractReplyText(m.content.text_body, m.content.html_body)},
                  ${JSON.stringify(m.content.headers)}::jsonb,
                  ${JSON.stringify(m.content.attachments)}::jsonb)
        )${sql.join("", false)(m.merges.map((f, i) => sql`, ${sql.literal(`merge_${i}`)} AS (${f})`))}
        INSERT INTO sent_emails (id, org_id, thread_id, status, kind, source_email_id, from_header, from_address, to_addresses,
          cc_addresses, bcc_addresses, reply_to, subject, message_id, in_reply_to, "references", send_at, due_at,
          lease_token, lease_until, quota_at, discard_content, automated, attachments)
        VALUES (${m.id}, ${m.orgId}, ${m.threadId}, ${m.sendAt === null ? "sending" : "scheduled"}, ${m.kind}, ${m.sourceEmailId}, ${m.fromHeader}, ${m.fromAddress},
          ${JSON.stringify(m.to)}::jsonb, ${JSON.stringify(m.cc)}::jsonb, ${JSON.stringify(m.bcc)}::jsonb, ${m.replyTo},
          ${m.subject}, ${m.messageId}, ${m.inReplyTo}, ${JSON.stringify(m.references)}::jsonb, ${m.sendAt}, ${m.dueAt},
          ${m.lease?.token ?? null}, ${m.lease?.until ?? null}, ${m.quotaAt}, ${m.discardContent}, ${m.automated},
          ${JSON.stringify(attachmentMeta(m.content.attachments))}::jsonb)
        RETURNING *`.pipe(Effect.map((rows) => rows[0]!), Effect.orDie)

    const find = (scope: OrgScope, id: string) =>
      sql<SentRow>`SELECT * FROM sent_emails WHERE id = ${id} AND ${scoped(sql, scope)}`.pipe(
        Effect.map((rows) => Option.fromNullable(rows[0])),
        Effect.orDie
      )

    const content = (id: string) =>
      sql<ContentRow>`SELECT text_body, html_body, extracted_text, headers, attachments FROM sent_email_contents WHERE sent_email_id = ${id}`.pipe(
        Effect.map((rows) => Option.fromNullable(rows[0])),
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
      return pageWithTotal<SentRow>(
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
      ).pipe(Effect.orDie)
    }

    /** Writes a send's outcome if `token` still holds the row; the row as it now is, or none when the lease was lost. */
    const finish = (id: string, token: string, o: Outcome) =>
      sql<SentRow>`
        UPDATE sent_emails SET status = ${o.status}, sent_at = ${o.status === "sent" ? o.at : null},
          relay_response = ${o.relayResponse}, error_code = ${o.error?.code ?? null}, error_message = ${o.error?.message ?? null},
          error_details = ${o.error === null ? null : JSON.stringify(o.error.details ?? null)}::jsonb,
          attempt_count = attempt_count + 1, lease_token = NULL, lease_until = NULL, due_at = NULL,
          content_discarded = (discard_content AND ${o.status === "sent"}), updated_at = now()
        WHERE id = ${id} AND lease_token = ${token} RETURNING *`.pipe(
        Effect.tap((rows) =>
          rows[0] !== undefined && rows[0].content_discarded
            ? sql`UPDATE sent_email_contents SET text_body = NULL, html_body = NULL, extracted_text = NULL, attachments = '[]'::jsonb
                  WHERE sent_email_id = ${id}`
            : Effect.void
        ),
        Effect.map((rows) => Option.fromNullable(rows[0])),
        Effect.orDie
      )

    /** A transient failure of a scheduled send: tried again at `dueAt`. */
    const retryLater = (id: string, token: string, dueAt: Date, error: { code: string; message: string }) =>
      sql`UPDATE sent_emails SET due_at = ${dueAt}, attempt_count = attempt_count + 1, lease_token = NULL, lease_until = NULL,
            error_code = ${error.code}, error_message = ${error.message}, quota_at = NULL, updated_at = now()
          WHERE id = ${id} AND lease_token = ${token}`.pipe(Effect.asVoid, Effect.orDie)

    /** Takes due scheduled sends (and immediate ones whose process died: `sending`) whose lease is free (SKIP LOCKED: processes never take the same row). */
    const claimDue = (now: Date, token: string, leaseUntil: Date, batch: number) =>
      sql<SentRow>`
        UPDATE sent_emails s SET lease_token = ${token}, lease_until = ${leaseUntil}
        WHERE s.id IN (
          SELECT id FROM sent_emails
           WHERE status IN ('scheduled', 'sending') AND due_at <= ${now} AND (lease_until IS NULL OR lease_until < ${now})
           ORDER BY due_at LIMIT ${batch} FOR UPDATE SKIP LOCKED)
        RETURNING s.*`.pipe(Effect.orDie)

    /** The earliest due time of a scheduled send (the timers sleep until then). */
    const nextDue = sql<{ due: Date | null }>`SELECT min(GREATEST(due_at, coalesce(lease_until, due_at))) AS due
      FROM sent_emails WHERE status IN ('scheduled', 'sending')`.pipe(
      Effect.map((rows) => rows[0]?.due ?? null),
      Effect.orDie
    )

    /** Changes a scheduled send no one is sending right now; none otherwise. */
    const reschedule = (scope: OrgScope, id: string, sendAt: Date, now: Date) =>
      sql<SentRow>`UPDATE sent_emails SET send_at = ${sendAt}, due_at = ${sendAt}, attempt_count = 0, updated_at = now()
        WHERE id = ${id} AND ${scoped(sql, scope)} AND status = 'scheduled' AND (lease_until IS NULL OR lease_until < ${now})
        RETURNING *`.pipe(Effect.map((rows) => Option.fromNullable(rows[0])), Effect.orDie)

    const cancel = (scope: OrgScope, id: string, now: Date) =>
      sql<SentRow>`UPDATE sent_emails SET status = 'canceled', due_at = NULL, updated_at = now()
        WHERE id = ${id} AND ${scoped(sql, scope)} AND status = 'scheduled' AND (lease_until IS NULL OR lease_until < ${now})
        RETURNING *`.pipe(Effect.map((rows) => Option.fromNullable(rows[0])), Effect.orDie)

    /** Sends counted in the last hour and the last 24 hours, and when the oldest of each leaves its window. */
    const usage = (orgId: string, now: Date) =>
      sql<{ hour: number; day: number; oldest_hour: Date | null; oldest_day: Date | null }>`
        SELECT count(*) FILTER (WHERE quota_at > ${new Date(now.getTime() - 3600_000)})::int AS hour,
               count(*)::int AS day,
               min(quota_at) FILTER (WHERE quota_at > ${new Date(now.getTime() - 3600_000)}) AS oldest_hour,
               min(quota_at) AS oldest_day
          FROM sent_emails WHERE org_id = ${orgId} AND quota_at > ${new Date(now.getTime() - 86_400_000)}`.pipe(
        Effect.map((rows) => rows[0]!),
        Effect.orDie
      )

    const scheduledCount = (orgId: string) =>
      sql<{ n: number }>`SELECT count(*)::int AS n FROM sent_emails WHERE org_id = ${orgId} AND status = 'scheduled'`.pipe(
        Effect.map((rows) => rows[0]?.n ?? 0),
        Effect.orDie
      )

    /** Serializes the quota decisions of one organization until the surrounding transaction ends. */
    const lockQuota = (orgId: string) =>
      sql`SELECT pg_advisory_xact_lock(hashtext(${`send-quota:${orgId}`}))`.pipe(Effect.asVoid, Effect.orDie)

    /** Counts a leased scheduled send into the quota as it is sent (fenced by the lease). */
    const takeQuota = (id: string, token: string, at: Date) =>
      sql`UPDATE sent_emails SET quota_at = ${at} WHERE id = ${id} AND lease_token = ${token}`.pipe(Effect.asVoid, Effect.orDie)

    /** Which of `addresses` have sent the organization accepted mail. */
    const knownAmong = (orgId: string, addresses: ReadonlyArray<string>) =>
      addresses.length === 0 ? Effect.succeed(new Set<string>()) : sql<{ address: string }>`
        SELECT address FROM known_addresses WHERE org_id = ${orgId} AND address IN ${sql.in(addresses)}`.pipe(
        Effect.map((rows) => new Set(rows.map((r) => r.address))),
        Effect.orDie
      )

    /** Automated sends to the thread since `since`, and when the oldest of them was made. */
    const automatedInThread = (threadId: string, since: Date) =>
      sql<{ n: number; oldest: Date | null }>`
        SELECT count(*)::int AS n, min(created_at) AS oldest FROM sent_emails
        WHERE thread_id = ${threadId} AND automated AND status <> 'canceled' AND created_at > ${since}`.pipe(
        Effect.map((rows) => rows[0] ?? { n: 0, oldest: null }),
        Effect.orDie
      )

    /**
     * The recipients of each automated send to the thread since its last message from a person: mail
     * received in it not marked automatic, or a send made with a person's credential.
     */
    const automatedSinceLastPerson = (orgId: string, threadId: string) =>
      sql<{ to_addresses: ReadonlyArray<string>; cc_addresses: ReadonlyArray<string>; bcc_addresses: ReadonlyArray<string> }>`
        SELECT to_addresses, cc_addresses, bcc_addresses FROM sent_emails
        WHERE thread_id = ${threadId} AND automated AND status <> 'canceled'
          AND created_at > greatest(
            coalesce((SELECT max(received_at) FROM emails WHERE org_id = ${orgId} AND thread_id = ${threadId}
                        AND NOT auto_submitted AND status = 'accepted'), '-infinity'::timestamptz),
            coalesce((SELECT max(created_at) FROM sent_emails WHERE thread_id = ${threadId} AND NOT automated
                        AND status <> 'canceled'), '-infinity'::timestamptz))
        ORDER BY created_at DESC LIMIT 1000`.pipe(Effect.orDie)

    return {
      automatedInThread,
      automatedSinceLastPerson,
      recordSentEmail,
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
      lockQuota,
      takeQuota,
      knownAmong
    } as const
  })
}) {}
