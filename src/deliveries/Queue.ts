/**
 * The delivery queue in PostgreSQL. A claim is one UPDATE over `FOR UPDATE SKIP LOCKED` rows that
 * moves `next_attempt_at` to the lease's end and stamps a claim token: concurrent workers (in any
 * process) never take the same row, and a crashed worker's row simply becomes due again when its
 * lease runs out. Completion is fenced by the claim token, so a worker whose lease expired cannot
 * overwrite the result of the worker that took the row over.
 */
import { SqlClient } from "@effect/sql"
import { Clock, Duration, Effect } from "effect"
import { randomToken } from "../platform/Secrets.js"

export type DeliveryStatus = "pending" | "delivered" | "header_confirmed" | "failed"

export interface DeliveryRow {
  readonly id: string
  readonly org_id: string
  readonly email_id: string | null
  readonly endpoint_id: string
  readonly event_id: string
  readonly event_type: string
  readonly payload: string
  readonly replay_of: string | null
  readonly status: DeliveryStatus
  readonly attempt_count: number
  readonly dispatch_errors: number
  readonly next_attempt_at: Date
  readonly lease_owner: string | null
  readonly duration_ms: number
  readonly last_error: string | null
  readonly last_error_code: string | null
  readonly last_status_code: number | null
  readonly email_sender: string
  readonly email_recipient: string
  readonly email_subject: string
  readonly created_at: Date
  readonly updated_at: Date
}

export interface NewDelivery {
  readonly orgId: string
  readonly emailId: string | null
  readonly endpointId: string
  readonly eventId: string
  readonly eventType: string
  readonly payload: string
  readonly sender: string
  readonly recipient: string
  readonly subject: string
  readonly replayOf?: string
}

export interface AttemptRecord {
  readonly attempt: number
  readonly startedAt: Date
  readonly durationMs: number
  readonly statusCode: number | null
  readonly errorCode: string | null
  readonly error: string | null
  readonly responseExcerpt: string | null
}

/** How a claimed delivery ends this round. */
export type Completion =
  | { readonly _tag: "Done"; readonly status: "delivered" | "header_confirmed" | "failed" }
  | { readonly _tag: "Retry"; readonly at: Date }

export const NOTIFY_CHANNEL = "mailroom_deliveries"

/** Beyond the HTTP timeout, what an attempt may spend on DNS, the endpoint lookup and recording. */
export const LEASE_MARGIN_MS = 30_000

/**
 * How long a claim holds a delivery. It outlives the HTTP timeout by a margin, so a live attempt is
 * never taken over by another worker; a crashed worker's delivery becomes due again after it.
 */
export const leaseMillis = (deliveryTimeout: Duration.Duration) => Duration.toMillis(deliveryTimeout) + LEASE_MARGIN_MS

export class DeliveryQueue extends Effect.Service<DeliveryQueue>()("mailroom/DeliveryQueue", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const enqueue = (d: NewDelivery) =>
      Effect.gen(function*() {
        // NOTIFY is delivered to listeners at commit, so workers wake without polling. (Its payload
        // must not be empty: the client library drops empty notifications.)
        const rows = yield* sql<{ id: string }>`
          WITH inserted AS (
            INSERT INTO deliveries (org_id, email_id, endpoint_id, event_id, event_type, payload, replay_of,
              email_sender, email_recipient, email_subject)
            VALUES (${d.orgId}, ${d.emailId}, ${d.endpointId}, ${d.eventId}, ${d.eventType}, ${d.payload},
              ${d.replayOf ?? null}, ${d.sender}, ${d.recipient}, ${d.subject})
            RETURNING id)
          SELECT id, pg_notify(${NOTIFY_CHANNEL}, 'due') FROM inserted`
        return rows[0]!.id
      }).pipe(Effect.orDie)

    /** Inserts a delivery already claimed by the caller (a replay attempted in the request). */
    const insertClaimed = (d: NewDelivery, worker: string, leaseMs: number) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const token = `${worker}:${randomToken(12)}`
        const rows = yield* sql<DeliveryRow>`
          INSERT INTO deliveries (org_id, email_id, endpoint_id, event_id, event_type, payload, replay_of,
            email_sender, email_recipient, email_subject, lease_owner, next_attempt_at)
          VALUES (${d.orgId}, ${d.emailId}, ${d.endpointId}, ${d.eventId}, ${d.eventType}, ${d.payload},
            ${d.replayOf ?? null}, ${d.sender}, ${d.recipient}, ${d.subject}, ${token}, ${new Date(now + leaseMs)})
          RETURNING *`
        return rows[0]!
      }).pipe(Effect.orDie)

    /**
     * Takes up to `limit` due deliveries for `leaseMs`; returns them with their claim token. Rows
     * whose lease ran out (their worker died) come first: their due time is the lease's end, so in
     * plain due order they would wait behind the whole backlog queued before the crash.
     */
    const claim = (worker: string, limit: number, leaseMs: number) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const token = `${worker}:${randomToken(12)}`
        const rows = yield* sql<DeliveryRow>`
          WITH expired AS (
            SELECT id, next_attempt_at FROM deliveries
            WHERE status = 'pending' AND lease_owner IS NOT NULL AND next_attempt_at <= ${new Date(now)}
            ORDER BY next_attempt_at LIMIT ${limit} FOR UPDATE SKIP LOCKED),
          due AS (
            SELECT id, next_attempt_at FROM deliveries
            WHERE status = 'pending' AND next_attempt_at <= ${new Date(now)} AND id NOT IN (SELECT id FROM expired)
            ORDER BY next_attempt_at LIMIT ${limit} FOR UPDATE SKIP LOCKED),
          chosen AS (
            SELECT id FROM (SELECT id, 0 AS pass, next_attempt_at FROM expired
                            UNION ALL SELECT id, 1 AS pass, next_attempt_at FROM due) c
            ORDER BY pass, next_attempt_at LIMIT ${limit})
          UPDATE deliveries d SET lease_owner = ${token}, next_attempt_at = ${new Date(now + leaseMs)}
          FROM chosen WHERE d.id = chosen.id
          RETURNING d.*`
        return rows
      }).pipe(Effect.withSpan("DeliveryQueue.claim"))

    /**
     * Records one attempt and the delivery's new state in a single statement (one round trip, one
     * commit), if this worker still holds the lease; false when another worker took the row over.
     */
    const complete = (
      row: DeliveryRow,
      attempt: AttemptRecord | null,
      completion: Completion,
      worker: string,
      skipped?: { readonly code: string; readonly error: string }
    ) =>
      Effect.gen(function*() {
        const now = new Date(yield* Clock.currentTimeMillis)
        const status = completion._tag === "Done" ? completion.status : "pending"
        const next = completion._tag === "Retry" ? completion.at : now
        const rows = yield* sql<{ id: string }>`
          WITH updated AS (
            UPDATE deliveries SET status = ${status}, next_attempt_at = ${next}, lease_owner = NULL,
              attempt_count = attempt_count + ${attempt === null ? 0 : 1},
              duration_ms = ${attempt?.durationMs ?? row.duration_ms},
              last_error = ${attempt === null ? skipped?.error ?? row.last_error : attempt.error},
              last_error_code = ${attempt === null ? skipped?.code ?? row.last_error_code : attempt.errorCode},
              last_status_code = ${attempt === null ? row.last_status_code : attempt.statusCode},
              updated_at = ${now}
            WHERE id = ${row.id} AND lease_owner = ${row.lease_owner}
            RETURNING id),
          recorded AS (
            INSERT INTO delivery_attempts (delivery_id, attempt, started_at, duration_ms, status_code, error_code,
              error, response_excerpt, worker)
            SELECT id, ${attempt?.attempt ?? 0}, ${attempt?.startedAt ?? now}, ${attempt?.durationMs ?? 0},
              ${attempt?.statusCode ?? null}, ${attempt?.errorCode ?? null}, ${attempt?.error ?? null},
              ${attempt?.responseExcerpt ?? null}, ${worker}
            FROM updated WHERE ${attempt !== null}
            RETURNING delivery_id)
          SELECT id FROM updated`
        return rows.length > 0
      }).pipe(Effect.withSpan("DeliveryQueue.complete"))

    /** A failure of the dispatcher itself (not of the endpoint): back off, dead-letter after `max`. */
    const dispatchFailed = (row: DeliveryRow, message: string, max: number) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const errors = row.dispatch_errors + 1
        const dead = errors >= max
        yield* sql`UPDATE deliveries SET dispatch_errors = ${errors}, lease_owner = NULL,
                     status = ${dead ? "failed" : "pending"},
                     next_attempt_at = ${new Date(now + Math.min(300_000, 1000 * 2 ** errors))},
                     last_error = ${dead ? `dispatch could not complete after ${errors} attempts: ${message}` : row.last_error},
                     last_error_code = ${dead ? "queue_dead_letter" : row.last_error_code},
                     updated_at = ${new Date(now)}
                   WHERE id = ${row.id} AND lease_owner = ${row.lease_owner}`
      })

    /** Milliseconds until the next pending delivery is due (for idle workers), or null. */
    const nextDueIn = Effect.gen(function*() {
      const now = yield* Clock.currentTimeMillis
      const rows = yield* sql<{ at: Date | null }>`SELECT min(next_attempt_at) AS at FROM deliveries WHERE status = 'pending'`
      const at = rows[0]?.at
      return at ? Math.max(0, at.getTime() - now) : null
    })

    return { enqueue, insertClaimed, claim, complete, dispatchFailed, nextDueIn } as const
  })
}) {}
