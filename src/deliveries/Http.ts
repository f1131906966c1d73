/** Handlers of the Webhook deliveries area. */
import { HttpApiBuilder } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Layer, Option } from "effect"
import { WebhookSecrets } from "../account/WebhookSecret.js"
import { MailroomApi } from "../Api.js"
import { Conflict, NotFound } from "../contract/Errors.js"
import { decodeCursor, DEFAULT_PAGE_SIZE, pageOf } from "../contract/Paging.js"
import { CurrentPrincipal } from "../contract/Security.js"
import { EndpointsRepo } from "../endpoints/Repo.js"
import { AppConfig } from "../platform/Config.js"
import { RateLimiter } from "../platform/RateLimiter.js"
import { diagnose, eventIdOf } from "../webhooks/Diagnosis.js"
import type { WebhookDelivery } from "./Api.js"
import { totalExpression } from "./Counts.js"
import { DeliveryAttempts, processDelivery } from "./Dispatcher.js"
import { DeliveryQueue, type DeliveryRow, leaseMillis } from "./Queue.js"

/** Replay is limited to 30 per minute per organization. */
export const REPLAY_LIMIT = { limit: 30, windowSeconds: 60 } as const

type Row = DeliveryRow & { endpoint_kind: string; endpoint_url: string | null; function_id: string | null }
/** What a listing shows: no payload, lease or dispatcher columns. */
type ListedRow = Omit<Row, "payload" | "org_id" | "dispatch_errors" | "lease_owner" | "last_status_code">

const toDelivery = (r: ListedRow): WebhookDelivery => ({
  id: r.id,
  email_id: r.email_id,
  endpoint_id: r.endpoint_id,
  endpoint_url: r.endpoint_kind === "function" ? `function://${r.function_id}` : (r.endpoint_url ?? ""),
  status: r.status,
  attempt_count: r.attempt_count,
  duration_ms: r.duration_ms,
  last_error: r.last_error ?? "",
  last_error_code: r.last_error_code ?? "",
  created_at: r.created_at,
  updated_at: r.updated_at,
  email: { sender: r.email_sender, recipient: r.email_recipient, subject: r.email_subject },
  event_id: r.event_id,
  event_type: r.event_type,
  next_attempt_at: r.status === "pending" ? r.next_attempt_at : null,
  replay_of: r.replay_of
})

export const DeliveriesHttpLive = HttpApiBuilder.group(MailroomApi, "deliveries", (handlers) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const queue = yield* DeliveryQueue
    const endpoints = yield* EndpointsRepo
    const limiter = yield* RateLimiter
    const config = yield* AppConfig
    const secrets = yield* WebhookSecrets
    const context = yield* Effect.context<DeliveryQueue | DeliveryAttempts | AppConfig | SqlClient.SqlClient>()
    const select = sql`SELECT d.*, e.kind AS endpoint_kind, e.url AS endpoint_url, e.function_id
                       FROM deliveries d JOIN endpoints e ON e.id = d.endpoint_id`
    const find = (orgId: string, id: string) =>
      sql<Row>`${select} WHERE d.id = ${id} AND d.org_id = ${orgId}`.pipe(
        Effect.map((r) => Option.fromNullable(r[0])),
        Effect.orDie
      )
    const notFound = new NotFound({ message: "delivery not found" })

    return handlers
      .handle("list", ({ urlParams: q }) =>
        Effect.gen(function*() {
          const { orgId } = yield* CurrentPrincipal
          const limit = q.limit ?? DEFAULT_PAGE_SIZE
          const after = yield* decodeCursor(q.cursor)
          const conds = [sql`d.org_id = ${orgId}`]
          if (q.email_id !== undefined) conds.push(sql`d.email_id = ${q.email_id}`)
          if (q.status !== undefined) conds.push(sql`d.status = ${q.status}`)
          if (q.date_from !== undefined) conds.push(sql`d.created_at >= ${q.date_from}`)
          if (q.date_to !== undefined) conds.push(sql`d.created_at <= ${q.date_to}`)
          const page = after === undefined ? conds : [...conds, sql`(d.created_at, d.id) < (${after.createdAt}, ${after.id})`]
          const total = totalExpression(sql, {
            orgId,
            status: q.status,
            emailId: q.email_id,
            dateFrom: q.date_from,
            dateTo: q.date_to
          })
          // One round trip and one snapshot for the page and its total; the total row comes back
          // alone (page columns null) when the page is empty.
          const rows = yield* sql<{ readonly [K in keyof ListedRow]: ListedRow[K] | null } & { total: number }>`
            WITH page AS (
              SELECT d.id, d.email_id, d.endpoint_id, d.event_id, d.event_type, d.replay_of, d.status,
                     d.attempt_count, d.next_attempt_at, d.duration_ms, d.last_error, d.last_error_code,
                     d.email_sender, d.email_recipient, d.email_subject, d.created_at, d.updated_at,
                     e.kind AS endpoint_kind, e.url AS endpoint_url, e.function_id
              FROM deliveries d JOIN endpoints e ON e.id = d.endpoint_id
              WHERE ${sql.and(page)}
              ORDER BY d.created_at DESC, d.id DESC LIMIT ${limit + 1})
            SELECT t.total, page.* FROM (SELECT (${total})::int AS total) t LEFT JOIN page ON true
            ORDER BY page.created_at DESC, page.id DESC`.pipe(Effect.orDie)
          const listed = rows.flatMap((r) => r.id === null ? [] : [r as ListedRow])
          return pageOf(listed, limit, rows[0]?.total ?? 0, toDelivery)
        }))
      .handle("get", ({ path }) =>
        Effect.gen(function*() {
          const { orgId } = yield* CurrentPrincipal
          const row = yield* Effect.flatten(find(orgId, path.id)).pipe(Effect.mapError(() => notFound))
          return toDelivery(row)
        }))
      .handle("replay", ({ path }) =>
        Effect.gen(function*() {
          const { orgId } = yield* CurrentPrincipal
          const original = yield* Effect.flatten(find(orgId, path.id)).pipe(Effect.mapError(() => notFound))
          if (!original.event_type.startsWith("email.")) {
            return yield* new Conflict({ message: "only email deliveries can be replayed" })
          }
          const endpoint = yield* endpoints.findAny(orgId, original.endpoint_id)
          if (Option.isNone(endpoint) || endpoint.value.deactivated_at !== null) {
            return yield* new Conflict({
              message: "the endpoint of this delivery was deleted; replay is rejected",
              details: { endpoint_id: original.endpoint_id }
            })
          }
          yield* limiter.enforce(`replay:org:${orgId}`, REPLAY_LIMIT, "delivery replays")
          const worker = "replay"
          const claimed = yield* queue.insertClaimed({
            orgId,
            emailId: original.email_id,
            endpointId: original.endpoint_id,
            eventId: original.event_id,
            eventType: original.event_type,
            payload: original.payload,
            sender: original.email_sender,
            recipient: original.email_recipient,
            subject: original.email_subject,
            replayOf: original.id
          }, worker, leaseMillis(config.deliveryTimeout))
          const status = yield* processDelivery(claimed, worker, { retries: false }).pipe(Effect.provide(context), Effect.orDie)
          const ok = status === "delivered" || status === "header_confirmed"
          return { delivered: ok ? 1 : 0, failed: ok ? 0 : 1, delivery_id: claimed.id }
        }))
      .handle("debugSignature", ({ payload }) =>
        Effect.gen(function*() {
          const { orgId } = yield* CurrentPrincipal
          const known = yield* Effect.flatten(secrets.known(orgId)).pipe(
            Effect.mapError(() => new NotFound({ message: "account not found" }))
          )
          const headerEventId = Object.entries(payload.headers)
            .find(([k]) => k.trim().toLowerCase() === "mailroom-event-id")?.[1]?.trim()
          const eventId = eventIdOf(payload.body) ?? (headerEventId !== undefined && headerEventId !== "" ? headerEventId : null)
          const delivered = eventId === null ? [] : yield* sql<{ payload: string }>`
            SELECT payload FROM deliveries WHERE org_id = ${orgId} AND event_id = ${eventId}
            ORDER BY created_at LIMIT 1`.pipe(Effect.orDie)
          const now = yield* Clock.currentTimeMillis
          return diagnose({
            headers: payload.headers,
            body: payload.body,
            nowSeconds: Math.floor(now / 1000),
            secrets: {
              current: known.current,
              previous: Option.getOrNull(known.previous)
            },
            eventId,
            delivered: delivered[0]?.payload ?? null
          })
        }))
  })).pipe(Layer.provide(WebhookSecrets.Default))

