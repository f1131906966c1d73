/**
 * Delivery workers. Every process runs one claimer fiber and up to `concurrency` attempt fibers:
 * the claimer takes as many due rows as there are free slots, each attempt runs in its own fiber
 * (a slow endpoint never holds up others), and an idle claimer sleeps until NOTIFY wakes it
 * (PostgreSQL) or a short poll (embedded PGlite, which has one connection and no LISTEN).
 */
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { Clock, Duration, Effect, Layer, Option, Schedule, Stream } from "effect"
import { WebhookSecrets } from "../account/WebhookSecret.js"
import { type EndpointRow, EndpointsRepo } from "../endpoints/Repo.js"
import { checkUrl } from "../net/Ssrf.js"
import { Dns } from "../net/Dns.js"
import { AppConfig } from "../platform/Config.js"
import { DatabaseKind } from "../platform/Database.js"
import { randomToken } from "../platform/Secrets.js"
import { postJson } from "../webhooks/Sender.js"
import { signatureHeaders } from "../webhooks/Signing.js"
import { type AttemptRecord, type Completion, DeliveryQueue, type DeliveryRow, leaseMillis, NOTIFY_CHANNEL } from "./Queue.js"

export const CONFIRMATION_HEADER = "mailroom-confirmed"
export const MAX_DISPATCH_ERRORS = 5
const RESPONSE_EXCERPT_BYTES = 2048
/** Recording an attempt's result: every 500 ms for up to 20 s, well inside the lease margin. */
const RECORD_RETRY = Schedule.spaced("500 millis").pipe(Schedule.intersect(Schedule.recurs(40)))

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
    const http = (row: DeliveryRow, endpoint: EndpointRow, secretOrNull: string | null, attempt: number) =>
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
      endpoint: EndpointRow,
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

type ContextRow = EndpointRow & {
  readonly webhook_secret: string | null
  readonly discard_on_confirm: boolean
  readonly discarded: boolean
  readonly superseded: boolean
}

/**
 * Everything an attempt needs, in one query: the endpoint, the signing secret, the account's discard
 * setting, and whether the email's content is gone or another delivery to this endpoint already
 * succeeded.
 */
const loadContext = (row: DeliveryRow) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<ContextRow>`
      SELECT e.*, o.webhook_secret, o.discard_content_on_webhook_confirmed AS discard_on_confirm,
        EXISTS (SELECT 1 FROM emails m WHERE m.id = ${row.email_id} AND m.content_discarded_at IS NOT NULL) AS discarded,
        EXISTS (SELECT 1 FROM deliveries d WHERE d.email_id = ${row.email_id} AND d.endpoint_id = e.id
                  AND d.id <> ${row.id} AND d.status IN ('delivered', 'header_confirmed')) AS superseded
      FROM endpoints e JOIN organizations o ON o.id = e.org_id
      WHERE e.id = ${row.endpoint_id} AND e.org_id = ${row.org_id}`
  ).pipe(Effect.map((rows) => Option.fromNullable(rows[0])))

/** What to do with a claimed row before any HTTP: deleted endpoint, superseded, discarded content. */
const precheck = (row: DeliveryRow) =>
  Effect.gen(function*() {
    const found = yield* loadContext(row)
    if (Option.isNone(found) || found.value.deactivated_at !== null) {
      return { _tag: "Skip", code: "endpoint_deleted", error: "the endpoint was deleted" } as const
    }
    const ctx = found.value
    if (row.email_id !== null) {
      if (ctx.superseded && row.replay_of === null) {
        return { _tag: "Skip", code: "superseded", error: "another delivery to this endpoint already succeeded for this email" } as const
      }
      if (ctx.discarded) {
        return { _tag: "Skip", code: "content_discarded", error: "the email's stored content was discarded before delivery" } as const
      }
    }
    if (!ctx.enabled && row.replay_of === null) {
      return { _tag: "Skip", code: "endpoint_disabled", error: "the endpoint is disabled" } as const
    }
    return { _tag: "Go", endpoint: ctx, secret: ctx.webhook_secret, discardOnConfirm: ctx.discard_on_confirm } as const
  })

/** Runs one claimed delivery to completion of this round: attempt, record, schedule or finish. */
export const processDelivery = (row: DeliveryRow, worker: string, options: { readonly retries: boolean }) =>
  Effect.gen(function*() {
    const queue = yield* DeliveryQueue
    const attempts = yield* DeliveryAttempts
    const config = yield* AppConfig
    const check = yield* precheck(row)
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
    // while the lease still holds (fenced by the claim token, so a late write cannot clobber a
    // takeover) rather than leave the row to be sent a second time when the lease runs out.
    if (result.confirmed && check.discardOnConfirm) {
      // The result and the content discard it triggers commit together.
      const sql = yield* SqlClient.SqlClient
      yield* Effect.gen(function*() {
        if (yield* queue.complete(row, record, completion, worker)) yield* attempts.discardContent(row)
      }).pipe(sql.withTransaction, Effect.retry(RECORD_RETRY))
    } else {
      yield* queue.complete(row, record, completion, worker).pipe(Effect.retry(RECORD_RETRY))
    }
    return completion._tag === "Done" ? completion.status : "pending" as const
  })

export interface DispatcherOptions {
  readonly concurrency: number
  readonly pollMs: number
}

/** The worker pool of this process, interrupted with the service's scope. */
export const DispatcherLive = (options: DispatcherOptions = { concurrency: 32, pollMs: 250 }) =>
  Layer.scopedDiscard(Effect.gen(function*() {
    const queue = yield* DeliveryQueue
    const config = yield* AppConfig
    const kind = yield* DatabaseKind
    const worker = `w_${randomToken(8)}`
    const leaseMs = leaseMillis(config.deliveryTimeout)
    const slots = yield* Effect.makeSemaphore(options.concurrency)
    const wake = yield* Effect.makeLatch(false)
    let free = options.concurrency
    const context = yield* Effect.context<DeliveryQueue | DeliveryAttempts | AppConfig | SqlClient.SqlClient | EndpointsRepo>()

    const runOne = (row: DeliveryRow) =>
      processDelivery(row, worker, { retries: true }).pipe(
        Effect.catchAllCause((cause) =>
          Effect.zipRight(
            Effect.logWarning("delivery dispatch failed", cause).pipe(Effect.annotateLogs("delivery_id", row.id)),
            queue.dispatchFailed(row, String(cause).slice(0, 500), MAX_DISPATCH_ERRORS).pipe(Effect.ignore)
          )
        ),
        Effect.provide(context),
        Effect.ensuring(Effect.sync(() => {
          free++
        }).pipe(Effect.zipRight(slots.release(1)), Effect.zipRight(wake.open)))
      )

    const round = Effect.gen(function*() {
      yield* slots.take(1).pipe(Effect.zipRight(slots.release(1)))
      const rows = yield* queue.claim(worker, Math.max(1, Math.min(free, 64)), leaseMs)
      for (const row of rows) {
        yield* slots.take(1)
        free--
        yield* Effect.forkDaemon(runOne(row))
      }
      if (rows.length === 0) {
        const dueIn = yield* queue.nextDueIn
        const wait = Math.min(dueIn ?? options.pollMs * 4, kind.embedded ? options.pollMs : 1000)
        yield* wake.close
        yield* wake.await.pipe(Effect.timeout(Duration.millis(Math.max(10, wait))), Effect.ignore)
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
