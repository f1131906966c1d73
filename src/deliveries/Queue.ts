/**
 * The delivery queue in PostgreSQL. A claim is one UPDATE over `FOR UPDATE SKIP LOCKED` rows that
 * moves `next_attempt_at` to the lease's end and stamps a claim token: concurrent workers (in any
 * process) never take the same row, and a crashed worker's row simply becomes due again when its
 * lease runs out. Completion is fenced by the claim token, so a worker whose lease expired cannot
 * overwrite the result of the worker that took the row over.
 *
 * Per delivery the queue costs about one commit: a claim takes a batch of rows together with
 * everything their attempts need (endpoint, signing secret, precheck facts) in one statement, and
 * the results of attempts that finish close together are recorded by one statement (group commit).
 */
import { type SqlError, SqlClient } from "@effect/sql"
import type { Fragment } from "@effect/sql/Statement"
import { Cause, Clock, Duration, Effect, Exit, Option } from "effect"
import { makeBatcher } from "../platform/Batching.js"
import { backoff, retryAt } from "../platform/RetryPolicy.js"
import { randomToken } from "../platform/Secrets.js"

/**
 * When the dispatcher itself fails on a delivery (not the endpoint: a defect, the database): about
 * 2 s, 4 s, 8 s, 16 s apart, then the delivery is dead-lettered (`queue_dead_letter`).
 */
export const DISPATCH_RETRY = backoff({ base: "2 seconds", max: "5 minutes", retries: 4 })

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

/**
 * What an attempt needs besides the row, read in the statement that claims (or inserts) it: the
 * endpoint (`ctx_found` false when it, or its organization, no longer exists), the organization's
 * signing secret and discard setting, and whether the email's content is gone or another delivery
 * of this email to this endpoint already succeeded.
 */
export interface DeliveryContext {
  readonly ctx_found: boolean
  readonly ctx_kind: "http" | "function" | null
  readonly ctx_url: string | null
  readonly ctx_function_id: string | null
  readonly ctx_enabled: boolean | null
  readonly ctx_deactivated: boolean | null
  readonly ctx_secret: string | null
  readonly ctx_previous_secret: string | null
  readonly ctx_previous_expires_at: Date | null
  readonly ctx_discard_on_confirm: boolean | null
  readonly ctx_discarded: boolean
  readonly ctx_superseded: boolean
}

export type ClaimedRow = DeliveryRow & DeliveryContext

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

/** Completions written by one statement at most, and statements of completions in flight at once. */
const COMPLETE_BATCH = 128
const COMPLETE_WRITERS = 2
/** One recording statement may not hang on a dead connection for longer than this. */
export const RECORD_TIMEOUT = Duration.seconds(5)

interface CompletionInput {
  readonly id: string
  readonly token: string | null
  readonly status: DeliveryStatus
  readonly next_at: Date
  readonly inc: number
  readonly duration_ms: number
  readonly last_error: string | null
  readonly last_error_code: string | null
  readonly last_status_code: number | null
  readonly updated_at: Date
  readonly recorded: boolean
  readonly attempt: number
  readonly started_at: Date
  readonly attempt_ms: number
  readonly status_code: number | null
  readonly error_code: string | null
  readonly error: string | null
  readonly excerpt: string | null
  readonly worker: string
}

type RecordError = SqlError.SqlError | Cause.TimeoutException

/**
 * PostgreSQL text cannot hold NUL (an endpoint's answer may), and JSON input cannot hold a lone
 * surrogate (a cut excerpt may end in half a pair): both become U+FFFD, as UTF-8 encoding would do.
 */
const text = (s: string | null) =>
  s === null ? null : s.replace(/\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g, "\uFFFD")

export class DeliveryQueue extends Effect.Service<DeliveryQueue>()("mailroom/DeliveryQueue", {
  scoped: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    /** The rows of `source` (a CTE or subquery of deliveries) with their DeliveryContext. */
    const withContext = (source: Fragment) => sql`
      SELECT c.*, (e.id IS NOT NULL AND o.id IS NOT NULL) AS ctx_found, e.kind AS ctx_kind, e.url AS ctx_url,
        e.function_id AS ctx_function_id,
        e.enabled AS ctx_enabled, e.deactivated_at IS NOT NULL AS ctx_deactivated, o.webhook_secret AS ctx_secret,
        o.webhook_secret_previous AS ctx_previous_secret, o.webhook_secret_previous_expires_at AS ctx_previous_expires_at,
        o.discard_content_on_webhook_confirmed AS ctx_discard_on_confirm,
        EXISTS (SELECT 1 FROM emails m WHERE m.id = c.email_id AND m.content_discarded_at IS NOT NULL) AS ctx_discarded,
        EXISTS (SELECT 1 FROM deliveries s WHERE s.email_id = c.email_id AND s.endpoint_id = c.endpoint_id
                  AND s.id <> c.id AND s.status IN ('delivered', 'header_confirmed')) AS ctx_superseded
      FROM ${source} c
      LEFT JOIN endpoints e ON e.id = c.endpoint_id AND e.org_id = c.org_id
      LEFT JOIN organizations o ON o.id = e.org_id`

    /**
     * The INSERT of one delivery as a statement that may also be embedded, as a data-modifying CTE,
     * in the statement storing its email (one round trip for both). NOTIFY is delivered to listeners
     * at commit, so workers wake without polling. (Its payload must not be empty: the client library
     * drops empty notifications.)
     */
    const enqueueStatement = (d: NewDelivery) =>
      sql<{ id: string }>`
        INSERT INTO deliveries (org_id, email_id, endpoint_id, event_id, event_type, payload, replay_of,
          email_sender, email_recipient, email_subject)
        VALUES (${d.orgId}, ${d.emailId}, ${d.endpointId}, ${d.eventId}, ${d.eventType}, ${d.payload},
          ${d.replayOf ?? null}, ${d.sender}, ${d.recipient}, ${d.subject})
        RETURNING id, pg_notify(${NOTIFY_CHANNEL}, 'due')`


    /**
     * `enqueueStatement` for each endpoint a CTE of the surrounding statement yields (its columns
     * `id` and `created_at`, enqueued in that order), as the body of a data-modifying CTE.
     */
    const enqueueEach = (d: Omit<NewDelivery, "endpointId" | "replayOf">, endpoints: string) =>
      sql`
        INSERT INTO deliveries (org_id, email_id, endpoint_id, event_id, event_type, payload, replay_of,
          email_sender, email_recipient, email_subject)
        SELECT ${d.orgId}::uuid, ${d.emailId}::uuid, e.id, ${d.eventId}::text, ${d.eventType}::text, ${d.payload}::text, NULL,
          ${d.sender}::text, ${d.recipient}::text, ${d.subject}::text
        FROM ${sql.literal(endpoints)} e ORDER BY e.created_at, e.id
        RETURNING id, pg_notify(${NOTIFY_CHANNEL}, 'due')`

    /** Inserts a delivery already claimed by the caller (a replay attempted in the request). */
    const insertClaimed = (d: NewDelivery, worker: string, leaseMs: number) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const token = `${worker}:${randomToken(12)}`
        const rows = yield* sql<ClaimedRow>`
          WITH inserted AS (
            INSERT INTO deliveries (org_id, email_id, endpoint_id, event_id, event_type, payload, replay_of,
              email_sender, email_recipient, email_subject, lease_owner, next_attempt_at)
            VALUES (${d.orgId}, ${d.emailId}, ${d.endpointId}, ${d.eventId}, ${d.eventType}, ${d.payload},
              ${d.replayOf ?? null}, ${d.sender}, ${d.recipient}, ${d.subject}, ${token}, ${new Date(now + leaseMs)})
            RETURNING *)
          ${withContext(sql.literal("inserted"))}`
        return rows[0]!
      }).pipe(Effect.orDie)

    /**
     * Takes up to `limit` due deliveries for `leaseMs`; returns them with their claim token. Rows
     * whose lease ran out (their worker died) come first: their due time is the lease's end, so in
     * plain due order they would wait behind the whole backlog queued before the crash. Each row
     * comes with its DeliveryContext, read in the same statement. With `expiredFirst` false that
     * first look is skipped (expired rows are then taken in due order): without VACUUM, the index it
     * reads collects the dead entries of every finished lease, so a busy claimer looks only now and then.
     */
    const claim = (worker: string, limit: number, leaseMs: number, expiredFirst = true) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const token = `${worker}:${randomToken(12)}`
        const rows = yield* sql<ClaimedRow>`
          WITH expired AS (
            SELECT id, next_attempt_at FROM deliveries
            WHERE ${expiredFirst} AND status = 'pending' AND lease_owner IS NOT NULL AND next_attempt_at <= ${new Date(now)}
            ORDER BY next_attempt_at LIMIT ${limit} FOR UPDATE SKIP LOCKED),
          due AS (
            SELECT id, next_attempt_at FROM deliveries
            WHERE status = 'pending' AND next_attempt_at <= ${new Date(now)} AND id NOT IN (SELECT id FROM expired)
            ORDER BY next_attempt_at LIMIT ${limit} FOR UPDATE SKIP LOCKED),
          chosen AS (
            SELECT id FROM (SELECT id, 0 AS pass, next_attempt_at FROM expired
                            UNION ALL SELECT id, 1 AS pass, next_attempt_at FROM due) c
            ORDER BY pass, next_attempt_at LIMIT ${limit}),
          claimed AS (
            UPDATE deliveries d SET lease_owner = ${token}, next_attempt_at = ${new Date(now + leaseMs)}
            FROM chosen WHERE d.id = chosen.id
            RETURNING d.*)
          ${withContext(sql.literal("claimed"))}`
        return rows
      }).pipe(Effect.withSpan("DeliveryQueue.claim"))

    /**
     * Writes completions (each: one attempt, if any, and the delivery's new state) in one statement,
     * each only if its worker still holds the lease; returns the ids it wrote.
     */
    const write = (inputs: ReadonlyArray<CompletionInput>) =>
      sql<{ id: string }>`
        WITH input AS (
          SELECT * FROM jsonb_to_recordset(${JSON.stringify(inputs)}::jsonb) AS t(
            id uuid, token text, status text, next_at timestamptz, inc int, duration_ms int, last_error text,
            last_error_code text, last_status_code int, updated_at timestamptz, recorded boolean, attempt int,
            started_at timestamptz, attempt_ms int, status_code int, error_code text, error text, excerpt text,
            worker text)),
        updated AS (
          UPDATE deliveries d SET status = i.status, next_attempt_at = i.next_at, lease_owner = NULL,
            attempt_count = d.attempt_count + i.inc, duration_ms = i.duration_ms, last_error = i.last_error,
            last_error_code = i.last_error_code, last_status_code = i.last_status_code, updated_at = i.updated_at
          FROM input i WHERE d.id = i.id AND d.lease_owner = i.token
          RETURNING d.id),
        recorded AS (
          INSERT INTO delivery_attempts (delivery_id, attempt, started_at, duration_ms, status_code, error_code,
            error, response_excerpt, worker)
          SELECT i.id, i.attempt, i.started_at, i.attempt_ms, i.status_code, i.error_code, i.error, i.excerpt, i.worker
          FROM input i JOIN updated u ON u.id = i.id WHERE i.recorded
          RETURNING delivery_id)
        SELECT id FROM updated`.pipe(
        Effect.timeoutFail({ duration: RECORD_TIMEOUT, onTimeout: () => new Cause.TimeoutException("recording timed out") }),
        Effect.map((rows) => new Set(rows.map((r) => r.id)))
      )

    // Group commit: attempts that finish while a write is in flight are written together by the
    // next one. When a batch fails, each of its completions fails; callers retry with `completeNow`
    // (a statement of their own), so one bad row could never keep failing the others.
    const grouped = yield* makeBatcher<CompletionInput, boolean, RecordError>({
      workers: COMPLETE_WRITERS,
      maxBatch: COMPLETE_BATCH,
      run: (inputs) =>
        Effect.exit(write(inputs)).pipe(Effect.map((exit) =>
          inputs.map((i) => Exit.isSuccess(exit) ? Exit.succeed(exit.value.has(i.id)) : Exit.failCause(exit.cause))
        ))
    })

    const completionInput = (
      row: DeliveryRow,
      attempt: AttemptRecord | null,
      completion: Completion,
      worker: string,
      now: Date,
      skipped?: { readonly code: string; readonly error: string }
    ): CompletionInput => ({
      id: row.id,
      token: row.lease_owner,
      status: completion._tag === "Done" ? completion.status : "pending",
      next_at: completion._tag === "Retry" ? completion.at : now,
      inc: attempt === null ? 0 : 1,
      duration_ms: attempt?.durationMs ?? row.duration_ms,
      last_error: text(attempt === null ? skipped?.error ?? row.last_error : attempt.error),
      last_error_code: attempt === null ? skipped?.code ?? row.last_error_code : attempt.errorCode,
      last_status_code: attempt === null ? row.last_status_code : attempt.statusCode,
      updated_at: now,
      recorded: attempt !== null,
      attempt: attempt?.attempt ?? 0,
      started_at: attempt?.startedAt ?? now,
      attempt_ms: attempt?.durationMs ?? 0,
      status_code: attempt?.statusCode ?? null,
      error_code: attempt?.errorCode ?? null,
      error: text(attempt?.error ?? null),
      excerpt: text(attempt?.responseExcerpt ?? null),
      worker
    })

    /**
     * Records one attempt and the delivery's new state, if this worker still holds the lease; false
     * when another worker took the row over. Written together with other completions of the moment.
     */
    const complete = (
      row: DeliveryRow,
      attempt: AttemptRecord | null,
      completion: Completion,
      worker: string,
      skipped?: { readonly code: string; readonly error: string }
    ): Effect.Effect<boolean, RecordError> =>
      Effect.gen(function*() {
        const now = new Date(yield* Clock.currentTimeMillis)
        return yield* grouped(completionInput(row, attempt, completion, worker, now, skipped))
      }).pipe(Effect.withSpan("DeliveryQueue.complete"))

    /**
     * Like `complete`, in a statement of its own (on the caller's connection, so inside its
     * transaction if it has one).
     */
    const completeNow = (row: DeliveryRow, attempt: AttemptRecord | null, completion: Completion, worker: string) =>
      Effect.gen(function*() {
        const now = new Date(yield* Clock.currentTimeMillis)
        const ids = yield* write([completionInput(row, attempt, completion, worker, now)])
        return ids.has(row.id)
      })

    /** A failure of the dispatcher itself (not of the endpoint): backed off by `DISPATCH_RETRY`, dead-lettered when it ends. */
    const dispatchFailed = (row: DeliveryRow, message: string) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const errors = row.dispatch_errors + 1
        const next = yield* retryAt(DISPATCH_RETRY, errors, now)
        const dead = Option.isNone(next)
        yield* sql`UPDATE deliveries SET dispatch_errors = ${errors}, lease_owner = NULL,
                     status = ${dead ? "failed" : "pending"},
                     next_attempt_at = ${Option.getOrElse(next, () => new Date(now))},
                     last_error = ${dead ? `dispatch could not complete after ${errors} attempts: ${message}` : row.last_error},
                     last_error_code = ${dead ? "queue_dead_letter" : row.last_error_code},
                     updated_at = ${new Date(now)}
                   WHERE id = ${row.id} AND lease_owner = ${row.lease_owner}`
      })

    /**
     * Holds a claimed delivery for longer (a function attempt may run for the functions' wall clock,
     * well past the HTTP timeout the claim was sized for); fenced by the claim token. Answers the
     * row with its new lease end, or none when the claim was lost.
     */
    const extendLease = <R extends DeliveryRow>(row: R, leaseMs: number) =>
      Effect.gen(function*() {
        const at = new Date((yield* Clock.currentTimeMillis) + leaseMs)
        const rows = yield* sql<{ id: string }>`UPDATE deliveries SET next_attempt_at = ${at}
          WHERE id = ${row.id} AND lease_owner = ${row.lease_owner} AND status = 'pending' RETURNING id`
        return rows.length === 0 ? Option.none<R>() : Option.some<R>({ ...row, next_attempt_at: at })
      })

    /** Milliseconds until the next pending delivery is due (for idle workers), or null. */
    const nextDueIn = Effect.gen(function*() {
      const now = yield* Clock.currentTimeMillis
      const rows = yield* sql<{ at: Date | null }>`SELECT min(next_attempt_at) AS at FROM deliveries WHERE status = 'pending'`
      const at = rows[0]?.at
      return at ? Math.max(0, at.getTime() - now) : null
    })

    return { enqueueStatement, enqueueEach, insertClaimed, claim, complete, completeNow, dispatchFailed, extendLease, nextDueIn } as const
  })
}) {}
