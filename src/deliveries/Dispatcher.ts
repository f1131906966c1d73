/**
 * Delivery workers. Every process runs one claimer fiber and up to `concurrency` attempt fibers:
 * the claimer takes as many due rows as there are free slots, each attempt runs in its own fiber
 * (a slow endpoint never holds up others), and an idle claimer sleeps until NOTIFY wakes it
 * (PostgreSQL) or a short poll (embedded PGlite, which has one connection and no LISTEN).
 *
 * Once an attempt's request may have been sent, its row is never released for another attempt
 * unless that attempt is recorded: recording is retried for as long as the lease holds, and if it
 * still cannot be written the row stays leased (a second request then goes out only after the lease).
 */
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { Cause, Clock, Data, Duration, Effect, Layer, Option, Schedule, Stream } from "effect"
import { WebhookSecrets } from "../account/WebhookSecret.js"
import { checkUrl } from "../net/Ssrf.js"
import { Dns } from "../net/Dns.js"
import { AppConfig } from "../platform/Config.js"
import { DatabaseKind } from "../platform/Database.js"
import { randomToken } from "../platform/Secrets.js"
import { postJson } from "../webhooks/Sender.js"
import { signatureHeaders } from "../webhooks/Signing.js"
import {
  type AttemptRecord,
  type ClaimedRow,
  type Completion,
  DeliveryQueue,
  type DeliveryRow,
  leaseMillis,
  NOTIFY_CHANNEL,
  RECORD_TIMEOUT
} from "./Queue.js"

export const CONFIRMATION_HEADER = "mailroom-confirmed"
export const MAX_DISPATCH_ERRORS = 5
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
}

export class DeliveryAttempts extends Effect.Service<DeliveryAttempts>()("mailroom/DeliveryAttempts", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const config = yield* AppConfig
    const secrets = yield* WebhookSecrets
    const dns = yield* Dns
    const timeoutMs = Duration.toMillis(config.deliveryTimeout)

    const failure = (errorCode: string, error: string, final: boolean, durationMs = 0): AttemptResult => ({
      ok: false, confirmed: false, statusCode: null, errorCode, error, durationMs, responseExcerpt: null, final
    })

    /** Signs the stored payload afresh and POSTs it to the endpoint's checked address. */
    const http = (row: DeliveryRow, endpoint: AttemptEndpoint, secretOrNull: string | null, attempt: number) =>
      Effect.gen(function*() {
        const target = yield* checkUrl(endpoint.url ?? "", { allowPrivate: config.webhookAllowPrivateUrls }).pipe(
          Effect.provideService(Dns, dns),
          Effect.either
        )
        if (target._tag === "Left") {
          return failure("address_rejected", `endpoint URL refused: ${target.left.reason}`, false)
        }
        const secret = secretOrNull !== null ? Option.some(secretOrNull) : yield* secrets.get(row.org_id)
        if (Option.isNone(secret)) return failure("organization_deleted", "the organization no longer exists", true)
        const t = Math.floor((yield* Clock.currentTimeMillis) / 1000)
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

    /** One attempt for a delivery whose endpoint is known; the destination kind is chosen here. */
    const attempt = (
      row: DeliveryRow,
      endpoint: AttemptEndpoint,
      secret: string | null,
      attemptNumber: number
    ): Effect.Effect<AttemptResult> =>
      endpoint.kind === "http"
        ? http(row, endpoint, secret, attemptNumber)
        : Effect.succeed(failure("function_unavailable", "hosted functions are not available on this deployment", true))

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
  const endpoint: AttemptEndpoint = { kind: row.ctx_kind, url: row.ctx_url }
  return { _tag: "Go", endpoint, secret: row.ctx_secret, discardOnConfirm: row.ctx_discard_on_confirm === true } as const
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

/** Runs one claimed delivery to completion of this round: attempt, record, schedule or finish. */
export const processDelivery = (row: ClaimedRow, worker: string, options: { readonly retries: boolean }) =>
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
    const result = yield* attempts.attempt(row, check.endpoint, check.secret, number)
    const record: AttemptRecord = {
      attempt: number,
      startedAt,
      durationMs: result.durationMs,
      statusCode: result.statusCode,
      errorCode: result.errorCode,
      error: result.error,
      responseExcerpt: result.responseExcerpt
    }
    const delays = config.deliveryRetryDelays
    let completion: Completion
    if (result.ok) completion = { _tag: "Done", status: result.confirmed ? "header_confirmed" : "delivered" }
    else if (!options.retries || result.final || number > delays.length) completion = { _tag: "Done", status: "failed" }
    else {
      const now = yield* Clock.currentTimeMillis
      completion = { _tag: "Retry", at: new Date(now + Duration.toMillis(delays[number - 1]!)) }
    }
    // The attempt already happened: if the database is briefly unreachable, keep trying to record it
    // while the lease still holds rather than leave the row to be sent a second time.
    if (result.confirmed && check.discardOnConfirm) {
      // The result and the content discard it triggers commit together.
      const sql = yield* SqlClient.SqlClient
      yield* recordWhileLeased(row, Effect.gen(function*() {
        if (yield* queue.completeNow(row, record, completion, worker)) yield* attempts.discardContent(row)
      }).pipe(sql.withTransaction))
    } else {
      // The first try joins the group commit; retries write alone.
      let tries = 0
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

/** The worker pool of this process, interrupted with the service's scope. */
export const DispatcherLive = (options: DispatcherOptions = { concurrency: 64, pollMs: 250 }) =>
  Layer.scopedDiscard(Effect.gen(function*() {
    const queue = yield* DeliveryQueue
    const config = yield* AppConfig
    const kind = yield* DatabaseKind
    const worker = `w_${randomToken(8)}`
    const leaseMs = leaseMillis(config.deliveryTimeout)
    const slots = yield* Effect.makeSemaphore(options.concurrency)
    const wake = yield* Effect.makeLatch(false)
    let free = options.concurrency
    let expiredCheckedAt = 0
    const context = yield* Effect.context<DeliveryQueue | DeliveryAttempts | AppConfig | SqlClient.SqlClient>()

    const runOne = (row: ClaimedRow) =>
      processDelivery(row, worker, { retries: true }).pipe(
        // A row still pending (a retry is scheduled) may be due before the idle claimer's next look.
        Effect.tap((status) => (status === "pending" ? wake.open : Effect.void)),
        Effect.catchTag("RecordingFailed", (e) =>
          // Not released: the request may have been sent, so the row waits for its lease to end.
          Effect.logWarning("delivery attempt could not be recorded; the row stays leased", e.message).pipe(
            Effect.annotateLogs("delivery_id", row.id)
          )),
        Effect.catchAllCause((cause) =>
          Effect.zipRight(
            Effect.logWarning("delivery dispatch failed", cause).pipe(Effect.annotateLogs("delivery_id", row.id)),
            queue.dispatchFailed(row, String(cause).slice(0, 500), MAX_DISPATCH_ERRORS).pipe(Effect.ignore, Effect.zipRight(wake.open))
          )
        ),
        Effect.provide(context),
        Effect.ensuring(Effect.sync(() => {
          free++
        }).pipe(Effect.zipRight(slots.release(1))))
      )

    const round = Effect.gen(function*() {
      // Closed before the claim, so a NOTIFY that arrives while it runs is not lost.
      yield* wake.close
      yield* slots.take(1).pipe(Effect.zipRight(slots.release(1)))
      if (free < options.concurrency / 4) yield* Effect.sleep(CLAIM_LINGER)
      const now = yield* Clock.currentTimeMillis
      const expiredFirst = now - expiredCheckedAt >= EXPIRED_CHECK_MS
      if (expiredFirst) expiredCheckedAt = now
      const limit = Math.max(1, Math.min(free, MAX_CLAIM))
      const rows = yield* queue.claim(worker, limit, leaseMs, expiredFirst)
      for (const row of rows) {
        yield* slots.take(1)
        free--
        yield* Effect.forkDaemon(runOne(row))
      }
      if (rows.length === 0) {
        const dueIn = yield* queue.nextDueIn
        const wait = Math.min(dueIn ?? options.pollMs * 4, kind.embedded ? options.pollMs : 1000)
        yield* wake.await.pipe(Effect.timeout(Duration.millis(Math.max(10, wait))), Effect.ignore)
      } else if (rows.length < limit) {
        // Fewer due rows than asked for: the backlog is empty for now. Claiming again at once would
        // cost an empty claim and a due-time query per delivery at low rates; a new delivery's NOTIFY
        // (or a retry scheduled here, which opens the latch) wakes the claimer instead.
        yield* wake.await.pipe(Effect.timeout(Duration.millis(kind.embedded ? options.pollMs : 1000)), Effect.ignore)
      }
    })

    yield* round.pipe(
      Effect.catchAllCause((cause) => Effect.logWarning("delivery claim failed; retrying", cause).pipe(Effect.zipRight(Effect.sleep("1 second")))),
      Effect.forever,
      Effect.forkScoped
    )

    // On PostgreSQL, NOTIFY from the enqueuing transaction wakes the claimer at commit.
    if (!kind.embedded) {
      const pg = yield* Effect.serviceOption(PgClient.PgClient)
      if (Option.isSome(pg)) {
        yield* pg.value.listen(NOTIFY_CHANNEL).pipe(
          Stream.runForEach(() => wake.open),
          Effect.retry(Schedule.spaced("1 second")),
          Effect.catchAllCause((cause) => Effect.logWarning("delivery LISTEN stopped", cause)),
          Effect.forkScoped
        )
      }
    }
  }))
