/** SQL of wakes and of functions' wake allowlists. */
import { SqlClient } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import type { Position } from "../contract/Paging.js"
import { pageWithTotal } from "../platform/Listing.js"
import { allRows, firstRow, NullableTimestamp, pageRows, TextArray, Timestamp } from "../platform/Rows.js"
import { THREADED_TABLES } from "../mail/Threading.js"
import type { ThreadWatch, Wake, WakeAllowlist } from "./Api.js"
import { checkSchedule, type ScheduleKind, scheduleObject } from "./Schedule.js"

export const WakeRow = Schema.Struct({
  id: Schema.String,
  org_id: Schema.String,
  function_id: Schema.String,
  command_type: Schema.String,
  /** JSON text (the column is text, parsed by `payloadOf`). */
  command_payload: Schema.NullOr(Schema.String),
  schedule_kind: Schema.Literal("at", "in", "every", "cron"),
  schedule_value: Schema.String,
  status: Schema.Literal("scheduled", "completed", "canceled"),
  next_run_at: NullableTimestamp,
  last_run_at: NullableTimestamp,
  run_count: Schema.Number,
  lease_token: Schema.NullOr(Schema.String),
  created_at: Timestamp,
  watch_thread_id: Schema.NullOr(Schema.String),
  watch_within: Schema.NullOr(Schema.String),
  cancel_reason: Schema.NullOr(Schema.Literal("canceled", "replied", "thread_deleted")),
  updated_at: Timestamp
})
export type WakeRow = typeof WakeRow.Type

/**
 * A claimed wake: `attempted` when its due firing may have been tried before (the row held a lease,
 * now run out, or a retry time): only such a firing can find its email already stored.
 */
export const ClaimedWakeRow = Schema.Struct({
  ...WakeRow.fields,
  attempted: Schema.Boolean,
  /** The earliest due time still ahead when the claim ran (`nextDue`, read by the same statement). */
  next_due: NullableTimestamp
})
export type ClaimedWakeRow = typeof ClaimedWakeRow.Type

const AllowlistRow = Schema.Struct({ senders: TextArray, updated_at: Timestamp })

/** A thread watch as the API shows it (the row is a wake with `watch_thread_id`). */
export const toWatch = (r: WakeRow): ThreadWatch => {
  const due = checkSchedule({ in: r.watch_within ?? "" }, r.created_at)
  return {
    id: r.id,
    thread_id: r.watch_thread_id!,
    function_id: r.function_id,
    command: { type: r.command_type, payload: payloadOf(r) },
    within: r.watch_within ?? "",
    due_at: "first" in due ? due.first : r.created_at,
    status: r.status === "scheduled" ? "active" : r.status === "completed" ? "fired" : "canceled",
    canceled_reason: r.status === "canceled" ? (r.cancel_reason ?? "canceled") : null,
    created_at: r.created_at
  }
}

export const payloadOf = (r: WakeRow): unknown => (r.command_payload === null ? null : JSON.parse(r.command_payload))

export const toWake = (r: WakeRow): Wake => ({
  id: r.id,
  function_id: r.function_id,
  command: { type: r.command_type, payload: payloadOf(r) },
  schedule: scheduleObject({ kind: r.schedule_kind, value: r.schedule_value }),
  status: r.status,
  next_run_at: r.next_run_at,
  last_run_at: r.last_run_at,
  run_count: r.run_count,
  thread_id: r.watch_thread_id,
  created_at: r.created_at
})

/** How long a firing may take before another process may take the wake over. */
/**
 * The thread's last message was deleted: its active watches end as `thread_deleted`. (A thread is
 * nothing but the messages that share its id.)
 */
export const deletionEndsWatches = (sql: SqlClient.SqlClient, orgId: string, threadId: string) =>
  sql`UPDATE wakes SET status = 'canceled', cancel_reason = 'thread_deleted', next_run_at = NULL, updated_at = now()
       WHERE org_id = ${orgId} AND status = 'scheduled' AND watch_thread_id = ${threadId}
         AND ${sql.and(THREADED_TABLES.map((t) => sql`NOT EXISTS (SELECT 1 FROM ${sql(t)} WHERE org_id = ${orgId} AND thread_id = ${threadId})`))}`

export const LEASE_MS = 60_000

export class WakesRepo extends Effect.Service<WakesRepo>()("mailroom/WakesRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const insert = (w: {
      orgId: string
      functionId: string
      type: string
      payload: string | null
      kind: ScheduleKind
      value: string
      nextRunAt: Date
      watch?: { readonly threadId: string; readonly within: string }
    }) =>
      Effect.map(
        sql`INSERT INTO wakes (org_id, function_id, command_type, command_payload, schedule_kind, schedule_value, next_run_at,
            watch_thread_id, watch_within)
          VALUES (${w.orgId}, ${w.functionId}, ${w.type}, ${w.payload}, ${w.kind}, ${w.value}, ${w.nextRunAt},
            ${w.watch?.threadId ?? null}, ${w.watch?.within ?? null}) RETURNING *`.pipe(allRows(WakeRow, "wake insert")),
        (rows) => rows[0]!
      ).pipe(Effect.orDie)

    const find = (orgId: string, id: string) =>
      sql`SELECT * FROM wakes WHERE id = ${id} AND org_id = ${orgId}`.pipe(firstRow(WakeRow, "wake by id"), Effect.orDie)

    const list = (
      orgId: string,
      limit: number,
      after: Position | undefined,
      filter: { readonly functionId?: string | undefined; readonly status?: string | undefined }
    ) =>
      pageWithTotal<{ readonly id: string }>(
        sql,
        "wakes",
        sql.and([
          sql`org_id = ${orgId}`,
          ...(filter.functionId !== undefined ? [sql`function_id = ${filter.functionId}`] : []),
          ...(filter.status !== undefined ? [sql`status = ${filter.status}`] : [])
        ]),
        limit,
        after
      ).pipe(pageRows(WakeRow, "wake page"), Effect.orDie)

    /** Cancels a scheduled wake; None when the organization has no such wake. */
    const cancel = (orgId: string, id: string, at: Date) =>
      sql`UPDATE wakes SET status = 'canceled', cancel_reason = 'canceled', next_run_at = NULL, updated_at = ${at}
          WHERE id = ${id} AND org_id = ${orgId} AND status = 'scheduled' RETURNING *`.pipe(firstRow(WakeRow, "wake cancel"), Effect.orDie)

    /**
     * Takes up to `limit` due wakes for this process: scheduled, due by `now`, and not held by a
     * firing whose lease still runs. SKIP LOCKED lets several processes claim side by side.
     */
    // A firing that completes clears the lease (`fired`), so a lease still set when the row is
    // claimed again is one that ran out (or a retry time from `release`).
    const claimDue = (now: Date, token: string, limit: number) =>
      sql`UPDATE wakes w SET lease_token = ${token}, lease_expires_at = ${new Date(now.getTime() + LEASE_MS)}
        FROM (
          SELECT id, lease_expires_at IS NOT NULL AS attempted FROM wakes
           WHERE status = 'scheduled' AND next_run_at <= ${now}
             AND (lease_expires_at IS NULL OR lease_expires_at < ${now})
           ORDER BY next_run_at LIMIT ${limit} FOR UPDATE SKIP LOCKED) due
        WHERE w.id = due.id
        RETURNING w.*, due.attempted,
          (SELECT min(next_run_at) FROM wakes WHERE status = 'scheduled' AND next_run_at > ${now}) AS next_due`.pipe(
        allRows(ClaimedWakeRow, "due wakes"),
        Effect.orDie
      )

    /** The earliest due time still ahead of `now` (index range on wakes_due); null when none is. */
    const nextDue = (now: Date) =>
      Effect.map(
        sql<{ at: Date | null }>`SELECT min(next_run_at) AS at FROM wakes WHERE status = 'scheduled' AND next_run_at > ${now}`,
        (rows) => rows[0]?.at ?? null
      ).pipe(Effect.orDie)

    /**
     * Records a scheduled firing and sets the next (or completes the wake), if this process still
     * holds it. The organization's command use marks older than two days go with it: a signature
     * is accepted for a day, so those can no longer be replayed (migrations/0111).
     */
    const fired = (id: string, orgId: string, token: string, firedAt: Date, next: Date | undefined) =>
      sql`WITH old_marks AS (DELETE FROM wake_commands_used WHERE org_id = ${orgId} AND used_at < now() - interval '2 days')
          UPDATE wakes SET run_count = run_count + 1, last_run_at = ${firedAt}, next_run_at = ${next ?? null},
            status = ${next === undefined ? "completed" : "scheduled"}, lease_token = NULL, lease_expires_at = NULL,
            updated_at = ${firedAt}
          WHERE id = ${id} AND lease_token = ${token} AND status = 'scheduled'`.pipe(Effect.orDie, Effect.asVoid)

    /** Lets another pass try again soon (a firing that could not store its email). */
    const release = (id: string, token: string, retryAt: Date) =>
      sql`UPDATE wakes SET lease_token = NULL, lease_expires_at = ${retryAt} WHERE id = ${id} AND lease_token = ${token}`
        .pipe(Effect.orDie, Effect.asVoid)

    /** A wake that can never fire (its function or organization is gone meanwhile). */
    const abandon = (id: string, token: string, at: Date) =>
      sql`UPDATE wakes SET status = 'canceled', next_run_at = NULL, lease_token = NULL, lease_expires_at = NULL, updated_at = ${at}
          WHERE id = ${id} AND lease_token = ${token}`.pipe(Effect.orDie, Effect.asVoid)

    /** A firing asked for through the API: counted, the schedule unchanged. */
    const ranNow = (id: string, firedAt: Date) =>
      Effect.map(
        sql`UPDATE wakes SET run_count = run_count + 1, last_run_at = ${firedAt}, updated_at = ${firedAt}
          WHERE id = ${id} RETURNING *`.pipe(allRows(WakeRow, "wake run now")),
        (rows) => rows[0]!
      ).pipe(Effect.orDie)

    /** Whether the organization has a message (received or sent) in the thread. */
    const threadExists = (orgId: string, threadId: string) =>
      Effect.map(
        sql<{ n: number }>`SELECT (${
          sql.join(" + ", false)(THREADED_TABLES.map((t) =>
            sql`(SELECT count(*) FROM (SELECT 1 FROM ${sql(t)} WHERE org_id = ${orgId} AND thread_id = ${threadId} LIMIT 1) x)`
          ))
        })::int AS n`,
        (rows) => rows[0]!.n > 0
      ).pipe(Effect.orDie)

    /** A thread's watches, newest first: the active ones, or all of them. */
    const watchesOf = (orgId: string, threadId: string, activeOnly: boolean) =>
      sql`SELECT * FROM wakes WHERE org_id = ${orgId} AND watch_thread_id = ${threadId}
        ${activeOnly ? sql`AND status = 'scheduled'` : sql``} ORDER BY created_at DESC, id DESC`.pipe(
        allRows(WakeRow, "thread watches"),
        Effect.orDie
      )

    /**
     * Whether received mail joined the watched thread after the watch began: then it must not fire
     * (checked again at firing time, for a reply stored while the firing was being claimed).
     */
    const silenceBroken = (w: WakeRow) =>
      w.watch_thread_id === null ? Effect.succeed(false) : Effect.map(
        sql<{ n: number }>`SELECT count(*)::int AS n FROM emails
          WHERE org_id = ${w.org_id} AND thread_id = ${w.watch_thread_id} AND status = 'accepted'
            AND event_type = 'email.received' AND received_at > ${w.created_at}`,
        (rows) => rows[0]!.n > 0
      ).pipe(Effect.orDie)

    /** Ends a claimed watch without firing it: a reply came in time. */
    const watchAnswered = (id: string, token: string, at: Date) =>
      sql`UPDATE wakes SET status = 'canceled', cancel_reason = 'replied', next_run_at = NULL, lease_token = NULL,
            lease_expires_at = NULL, updated_at = ${at}
          WHERE id = ${id} AND lease_token = ${token} AND status = 'scheduled'`.pipe(Effect.orDie, Effect.asVoid)

    const allowlist = (functionId: string) =>
      sql`SELECT senders, updated_at FROM function_wake_allowlists WHERE function_id = ${functionId}`.pipe(
        firstRow(AllowlistRow, "wake allowlist"),
        Effect.orDie
      )

    const setAllowlist = (orgId: string, functionId: string, senders: ReadonlyArray<string>, at: Date) =>
      Effect.map(
        sql`
          INSERT INTO function_wake_allowlists (function_id, org_id, senders, updated_at)
          VALUES (${functionId}, ${orgId}, ${JSON.stringify(senders)}::jsonb, ${at})
          ON CONFLICT (function_id) DO UPDATE SET senders = EXCLUDED.senders, updated_at = EXCLUDED.updated_at
          RETURNING senders, updated_at`.pipe(allRows(AllowlistRow, "wake allowlist upsert")),
        (rows) => rows[0]!
      ).pipe(Effect.orDie)

    return { threadExists, watchesOf, silenceBroken, watchAnswered, insert, find, list, cancel, claimDue, nextDue, fired, release, abandon, ranNow, allowlist, setAllowlist } as const
  })
}) {}

export const toAllowlist = (
  functionId: string,
  wakeAddress: string,
  row: Option.Option<{ senders: ReadonlyArray<string>; updated_at: Date }>
): WakeAllowlist => ({
  function_id: functionId,
  wake_address: wakeAddress,
  senders: Option.match(row, { onNone: () => [], onSome: (r) => r.senders }),
  updated_at: Option.match(row, { onNone: () => null, onSome: (r) => r.updated_at })
})
