/**
 * Delivery workers. Every process runs one claimer fiber and up to `concurrency` attempt fibers:
 * the claimer takes as many due rows as there are free slots, each attempt runs in its own fiber
 * (a slow endpoint never holds up others), and an idle claimer sleeps until NOTIFY wakes it
 * (PostgreSQL) or a short poll (embedded PGlite, which has one connection and no LISTEN).
 *
 * Once an attempt's request may have been sent, its row is never released for another attempt
 * unless that attempt is recorded: recording is retried for as long as the lease holds, and if it
 * still cannot be written the row stays leased (a second request then goes out only after the lease).
 *
 * Stopping drains: the claimer stops, attempts in flight get most of the shutdown time to finish
 * and be recorded; one still running after that is stopped, and recorded as an attempt cut short
 * by the shutdown (due again at once) if its request may have gone out, else its lease is released.
 */
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { Cause, Clock, Data, Duration, Effect, Layer, Option, Schedule, Stream } from "effect"
import { type StoredSecrets, WebhookSecrets } from "../account/WebhookSecret.js"
import { FunctionInvoker } from "../functions/Invoker.js"
import { checkUrl } from "../net/Ssrf.js"
import { Dns } from "../net/Dns.js"
import { AppConfig } from "../platform/Config.js"
import { DatabaseKind } from "../platform/Database.js"
import { runJobs } from "../platform/JobRunner.js"
import { fixedDelays, retryAt } from "../platform/RetryPolicy.js"
import { randomToken } from "../platform/Secrets.js"
import { postJson } from "../webhooks/Sender.js"
import { signatureHeaders } from "../webhooks/Signing.js"
import {
  type AttemptRecord,
  type ClaimedRow,
  type Completion,
  DeliveryQueue,
  type DeliveryRow,
  LEASE_MARGIN_MS,
  leaseMillis,
  NOTIFY_CHANNEL,
  RECORD_TIMEOUT
} from "./Queue.js"

export const CONFIRMATION_HEADER = "mailroom-confirmed"
const RESPONSE_EXCERPT_BYTES = 2048
/** Claims at most this many rows at once. */
const MAX_CLAIM = 64
/**
 * Under load, the claimer waits this long for more slots to free up when fewer than a quarter are
 * free, so that one claim (one commit) serves several deliveries.
 */
const CLAIM_LINGER = Duration.millis(3)

/** How often a claim looks for expired leases first (see DeliveryQueue.claim). */
const EXPIRED_CHECK_MS = 1000

/** The endpoint fields an attempt uses. */
export interface AttemptEndpoint {
  readonly kind: "http" | "function"
  readonly url: string | null
  readonly functionId: string | null
}

/** An attempt was made (its request may have reached the endpoint) but could not be recorded. */
export class RecordingFailed extends Data.TaggedError("RecordingFailed")<{ readonly message: string }> {}

/** The outcome of one attempt against a destination. */
export interface AttemptResult {
  readonly ok: boolean
  readonly confirmed: boolean
  readonly statusCode: number | null
  readonly errorCode: string | null
  readonly error: string | null
  readonly durationMs: number
  readonly responseExcerpt: string | null
  /** No further attempts (HTTP 410, or a destination that can never accept it). */
  readonly final: boolean
  /** Nothing was attempted: the claim on the delivery was lost while it waited (another worker has it). */
  readonly claimLost?: boolean
}

export class DeliveryAttempts extends Effect.Service<DeliveryAttempts>()("mailroom/DeliveryAttempts", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const config = yield* AppConfig
    const secrets = yield* WebhookSecrets
    const dns = yield* Dns
    const functions = yield* FunctionInvoker
    const queue = yield* DeliveryQueue
    const timeoutMs = Duration.toMillis(config.deliveryTimeout)
    // A function attempt may wait for a slot and then run for the whole wall clock.
    const functionLeaseMs = Duration.toMillis(config.functionTimeout) + LEASE_MARGIN_MS

    const failure = (errorCode: string, error: string, final: boolean, durationMs = 0): AttemptResult => ({
      ok: false, confirmed: false, statusCode: null, errorCode, error, durationMs, responseExcerpt: null, final
    })

    /** Signs the stored payload afresh and POSTs it to the endpoint's checked address. */
    const http = (row: DeliveryRow, endpoint: AttemptEndpoint, stored: StoredSecrets | null, attempt: number, onSend: () => void) =>
      Effect.gen(function*() {
        const target = yield* checkUrl(endpoint.url ?? "", { allowPrivate: config.webhookAllowPrivateUrls }).pipe(
          Effect.provideService(Dns, dns),
          Effect.either
        )
        if (target._tag === "Left") {
          return failure("address_rejected", `endpoint URL refused: ${target.left.reason}`, false)
        }
        const secret = yield* secrets.signingFrom(row.org_id, stored)
        if (Option.isNone(secret)) return failure("organization_deleted", "the organization no longer exists", true)
        const t = Math.floor((yield* Clock.currentTimeMillis) / 1000)
        onSend()
        const result = yield* postJson({
          target: target.right,
          body: row.payload,
          headers: {
            ...signatureHeaders(secret.value, row.payload, t),
            "user-agent": "Mailroom-Webhooks/1.0",
            "mailroom-event-id": row.event_id,
            "mailroom-event-type": row.event_type,
            "mailroom-delivery-id": row.id,
            "mailroom-attempt": String(attempt)
          },
          timeoutMs,
          maxResponseBytes: 64 * 1024
        })
        const excerpt = result.responseBody.slice(0, RESPONSE_EXCERPT_BYTES)
        if (result.statusCode === null) {
          return { ...failure(result.errorCode ?? "connection_error", result.error ?? "no response", false, result.durationMs) }
        }
        const ok = result.statusCode >= 200 && result.statusCode < 300
        const confirmation = result.responseHeaders[CONFIRMATION_HEADER]
        return {
          ok,
          confirmed: ok && confirmation !== undefined && confirmation.trim() !== "",
          statusCode: result.statusCode,
          errorCode: ok ? null : `http_${result.statusCode}`,
          error: ok ? null : `endpoint answered HTTP ${result.statusCode}${excerpt ? `: ${excerpt.slice(0, 200)}` : ""}`,
          durationMs: result.durationMs,
          responseExcerpt: excerpt,
          final: result.statusCode === 410
        } satisfies AttemptResult
      })

    /**
     * Runs the endpoint's function on the stored payload, signed like a webhook. The claim is
     * extended on entering the runtime's queue and again when the process starts (fenced by the
     * claim token), so a long wait or a 10-minute run is never taken over by another worker.
     */
    const fn = (row: DeliveryRow, endpoint: AttemptEndpoint, stored: StoredSecrets | null, attempt: number, onSend: () => void) =>
      Effect.gen(function*() {
        if (endpoint.functionId === null) return failure("endpoint_deleted", "the endpoint has no function", true)
        const secret = yield* secrets.signingFrom(row.org_id, stored)
        if (Option.isNone(secret)) return failure("organization_deleted", "the organization no longer exists", true)
        const hold = queue.extendLease(row, functionLeaseMs).pipe(Effect.map(Option.isSome), Effect.orElseSucceed(() => false))
        if (!(yield* hold)) return { ...failure("claim_lost", "the delivery's claim was lost", false), claimLost: true }
        const heldAt = yield* Clock.currentTimeMillis
        // A slot found within half the margin leaves the lease covering the whole wall clock: no second write.
        const holdAgain = Effect.flatMap(Clock.currentTimeMillis, (now) =>
          now - heldAt < LEASE_MARGIN_MS / 2 ? Effect.succeed(true) : hold)
        const ran = yield* functions.deliver(row.org_id, endpoint.functionId, {
          payload: row.payload,
          eventId: row.event_id,
          event: row.event_type,
          deliveryId: row.id,
          signingSecrets: secret.value,
          attempt,
          onStart: Effect.tap(holdAgain, (go) => Effect.sync(() => go && onSend()))
        })
        if (ran._tag === "missing") return failure("endpoint_deleted", "the function was deleted", true)
        if (ran._tag === "cancelled") return { ...failure("claim_lost", "the delivery's claim was lost", false), claimLost: true }
        const o = ran.outcome
        const excerpt = o.responseBody.slice(0, RESPONSE_EXCERPT_BYTES)
        return {
          ok: o.outcome === "ok",
          confirmed: o.confirmed,
          statusCode: o.statusCode,
          errorCode: o.outcome === "ok" ? null : o.status,
          error: o.error,
          durationMs: o.durationMs,
          responseExcerpt: o.outcome === "ok" || o.outcome === "http" ? excerpt : null,
          final: o.statusCode === 410
        } satisfies AttemptResult
      })

    /**
     * One attempt for a delivery whose endpoint is known; the destination kind is chosen here.
     * `onSend` is called just before the request may leave (interrupted later, it may have arrived).
     */
    const attempt = (
      row: DeliveryRow,
      endpoint: AttemptEndpoint,
      secret: StoredSecrets | null,
      attemptNumber: number,
      onSend: () => void = () => {}
    ): Effect.Effect<AttemptResult> =>
      endpoint.kind === "http"
        ? http(row, endpoint, secret, attemptNumber, onSend)
        : fn(row, endpoint, secret, attemptNumber, onSend)

    /** After a confirmed delivery of an account that asked for it, drop the stored content. */
    const discardContent = (row: DeliveryRow) =>
      row.email_id === null ? Effect.void : sql`
        WITH marked AS (
          UPDATE emails SET content_discarded_at = now()
          WHERE id = ${row.email_id} AND content_discarded_at IS NULL
          RETURNING id)
        DELETE FROM email_contents WHERE email_id IN (SELECT id FROM marked)`.pipe(Effect.asVoid)

    return { attempt, discardContent } as const
  })
}) {}

/** What to do with a claimed row before any HTTP: deleted endpoint, superseded, discarded content. */
const precheck = (row: ClaimedRow) => {
  if (!row.ctx_found || row.ctx_deactivated === true || row.ctx_kind === null) {
    return { _tag: "Skip", code: "endpoint_deleted", error: "the endpoint was deleted" } as const
  }
  if (row.email_id !== null) {
    if (row.ctx_superseded && row.replay_of === null) {
      return { _tag: "Skip", code: "superseded", error: "another delivery to this endpoint already succeeded for this email" } as const
    }
    if (row.ctx_discarded) {
      return { _tag: "Skip", code: "content_discarded", error: "the email's stored content was discarded before delivery" } as const
    }
  }
  if (row.ctx_enabled !== true && row.replay_of === null) {
    return { _tag: "Skip", code: "endpoint_disabled", error: "the endpoint is disabled" } as const
  }
  const endpoint: AttemptEndpoint = { kind: row.ctx_kind, url: row.ctx_url, functionId: row.ctx_function_id }
  const secret: StoredSecrets = {
    current: row.ctx_secret,
    previous: row.ctx_previous_secret,
    previousExpiresAt: row.ctx_previous_expires_at
  }
  return { _tag: "Go", endpoint, secret, discardOnConfirm: row.ctx_discard_on_confirm === true } as const
}

/**
 * Retries recording until shortly before the lease ends (fenced by the claim token, so a late write
 * cannot clobber a takeover); each try is bounded, so a hung connection cannot use up the lease.
 */
const recordWhileLeased = <A, E, R>(row: DeliveryRow, record: Effect.Effect<A, E, R>): Effect.Effect<A, RecordingFailed, R> =>
  Effect.gen(function*() {
    const now = yield* Clock.currentTimeMillis
    const left = row.next_attempt_at.getTime() - now - Duration.toMillis(RECORD_TIMEOUT) - 1000
    return yield* record.pipe(
      Effect.retry(Schedule.spaced("250 millis").pipe(Schedule.upTo(Duration.millis(Math.max(0, left))))),
      // Defects too: whatever went wrong, the row must not be released as if nothing was sent.
      Effect.catchAllCause((cause) =>
        Cause.isInterruptedOnly(cause) ? Effect.interrupt : Effect.fail(new RecordingFailed({ message: Cause.pretty(cause) }))
      )
    )
  })

/** An attempt interrupted by the service stopping after its request may have left. */
const SHUTDOWN_ERROR = "the service stopped during the attempt; the endpoint may have received it"

/**
 * Runs one claimed delivery to completion of this round: attempt, record, schedule or finish.
 * `stop` (the service draining past its bound) cuts the attempt short: before its request may have
 * left, the lease is released (due again at once, no attempt counted); after, the attempt is
 * recorded as `shutdown` and due again at once. Recording itself is never cut short by it.
 */
export const processDelivery = (
  row: ClaimedRow,
  worker: string,
  options: { readonly retries: boolean; readonly stop?: Effect.Effect<void> }
) =>
  Effect.gen(function*() {
    const queue = yield* DeliveryQueue
    const attempts = yield* DeliveryAttempts
    const config = yield* AppConfig
    const check = precheck(row)
    const startedAt = new Date(yield* Clock.currentTimeMillis)
    if (check._tag === "Skip") {
      // Not an HTTP attempt: attempt_count stays, the reason is recorded on the delivery.
      yield* queue.complete(row, null, { _tag: "Done", status: "failed" }, worker, { code: check.code, error: check.error })
      return "failed" as const
    }
    const number = row.attempt_count + 1
    let sent = false
    const attempt = attempts.attempt(row, check.endpoint, check.secret, number, () => {
      sent = true
    })
    const outcome = options.stop === undefined
      ? yield* Effect.map(attempt, Option.some)
      : yield* Effect.race(Effect.map(attempt, Option.some), Effect.as(options.stop, Option.none<AttemptResult>()))
    if (Option.isNone(outcome) && !sent) {
      // Nothing left this process: hand the row back for the next worker, no attempt counted.
      const now = yield* Clock.currentTimeMillis
      yield* queue.completeNow(row, null, { _tag: "Retry", at: new Date(now) }, worker)
      return "released" as const
    }
    // Another worker holds the delivery now: it records the attempt, not this one.
    if (Option.isSome(outcome) && outcome.value.claimLost === true) return "pending" as const
    const stopped = Option.isNone(outcome)
    const result: AttemptResult = Option.getOrElse(outcome, () => ({
      ok: false,
      confirmed: false,
      statusCode: null,
      errorCode: "shutdown",
      error: SHUTDOWN_ERROR,
      durationMs: Date.now() - startedAt.getTime(),
      responseExcerpt: null,
      final: false
    }))
    const record: AttemptRecord = {
      attempt: number,
      startedAt,
      durationMs: result.durationMs,
      statusCode: result.statusCode,
      errorCode: result.errorCode,
      error: result.error,
      responseExcerpt: result.responseExcerpt
    }
    const now = yield* Clock.currentTimeMillis
    // The retry policy (DELIVERY_RETRY_DELAYS) stepped to this attempt: the next due time, or none (failed).
    const next = result.ok || !options.retries || result.final
      ? Option.none<Date>()
      : yield* retryAt(fixedDelays(config.deliveryRetryDelays), number, now)
    let completion: Completion
    if (result.ok) completion = { _tag: "Done", status: result.confirmed ? "header_confirmed" : "delivered" }
    else if (Option.isNone(next)) completion = { _tag: "Done", status: "failed" }
    // Cut short by the shutdown: due again at once (the attempt still counts).
    else completion = { _tag: "Retry", at: stopped ? new Date(now) : next.value }
    // The attempt already happened: if the database is briefly unreachable, keep trying to record it
    // while the lease still holds rather than leave the row to be sent a second time.
    if (result.confirmed && check.discardOnConfirm) {
      // The result and the content discard it triggers commit together.
      const sql = yield* SqlClient.SqlClient
      yield* recordWhileLeased(row, Effect.gen(function*() {
        if (yield* queue.completeNow(row, record, completion, worker)) yield* attempts.discardContent(row)
      }).pipe(sql.withTransaction))
    } else {
      // The first try joins the group commit; retries write alone, as does an attempt cut short by
      // the shutdown (the group writers may already be stopping).
      let tries = stopped ? 1 : 0
      yield* recordWhileLeased(
        row,
        Effect.suspend(() => tries++ === 0 ? queue.complete(row, record, completion, worker) : queue.completeNow(row, record, completion, worker))
      )
    }
    return completion._tag === "Done" ? completion.status : "pending" as const
  })

export interface DispatcherOptions {
  readonly concurrency: number
  readonly pollMs: number
}

/** The worker pool of this process: deliveries declared on the job runner, drained with the service's scope. */
export const DispatcherLive = (options: DispatcherOptions = { concurrency: 64, pollMs: 250 }) =>
  Layer.scopedDiscard(Effect.gen(function*() {
    const queue = yield* DeliveryQueue
    const config = yield* AppConfig
    const kind = yield* DatabaseKind
    const worker = `w_${randomToken(8)}`
    const leaseMs = leaseMillis(config.deliveryTimeout)
    let expiredCheckedAt = 0
    const context = yield* Effect.context<DeliveryQueue | DeliveryAttempts | AppConfig | SqlClient.SqlClient>()
    // On PostgreSQL, NOTIFY from the enqueuing transaction wakes the claimer at commit.
    const pg = kind.embedded ? Option.none() : yield* Effect.serviceOption(PgClient.PgClient)
    const wakeups = Option.isNone(pg) ? undefined : pg.value.listen(NOTIFY_CHANNEL).pipe(
      Stream.retry(Schedule.spaced("1 second"))
    )

    yield* runJobs<ClaimedRow, never>({
      name: "delivery",
      concurrency: options.concurrency,
      maxClaim: MAX_CLAIM,
      pollMs: options.pollMs,
      idleMs: kind.embedded ? options.pollMs : 1000,
      linger: CLAIM_LINGER,
      ...(wakeups === undefined ? {} : { wakeups }),
      // Attempts in flight get most of the shutdown time to finish and be recorded (the rest is left
      // for cutting the others short, the listeners and the database).
      drain: Duration.millis(Math.floor(Duration.toMillis(config.shutdownTimeout) * 0.7)),
      claim: (limit) =>
        Effect.gen(function*() {
          const now = yield* Clock.currentTimeMillis
          const expiredFirst = now - expiredCheckedAt >= EXPIRED_CHECK_MS
          if (expiredFirst) expiredCheckedAt = now
          return yield* queue.claim(worker, limit, leaseMs, expiredFirst)
        }),
      nextDueIn: queue.nextDueIn,
      run: (row, job) =>
        processDelivery(row, worker, { retries: true, stop: job.stop }).pipe(
          // A row still pending (a retry is scheduled) may be due before the idle claimer's next look.
          Effect.tap((status) => (status === "pending" ? job.wake : Effect.void)),
          Effect.catchTag("RecordingFailed", (e) =>
            // Not released: the request may have been sent, so the row waits for its lease to end.
            Effect.logWarning("delivery attempt could not be recorded; the row stays leased", e.message).pipe(
              Effect.annotateLogs("delivery_id", row.id)
            )),
          Effect.provide(context)
        ),
      // A failure of the dispatcher itself (not of the endpoint): backed off by its own policy, dead-lettered after it.
      onDefect: (row, cause) => queue.dispatchFailed(row, String(cause).slice(0, 500))
    })
  }))
