/** Handlers of the listen area (see Api.ts, Wakeups.ts and migrations/0011_listen.sql). */
import { HttpApiBuilder } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Layer, Option } from "effect"
import { MailroomApi } from "../Api.js"
import { WebhookSecrets } from "../account/WebhookSecret.js"
import { Conflict, NotFound, RateLimitExceeded } from "../contract/Errors.js"
import { CurrentPrincipal } from "../contract/Security.js"
import { noStore } from "../platform/HttpHeaders.js"
import { requireWholeOrganization } from "../platform/InboxLimit.js"
import { signatureHeaders } from "../webhooks/Signing.js"
import {
  LISTEN_MAX_ACTIVE_SESSIONS,
  LISTEN_SESSION_TTL_SECONDS,
  type ListenEvent,
  type ListenSession
} from "./Api.js"
import { LISTEN_MAX_WAITS_PER_ORG, ListenWakeups } from "./Wakeups.js"

const DEFAULT_WAIT_SECONDS = 25
const BATCH = 50
/** Advisory-lock namespace of session creation (the key is the organization's). */
const SESSION_CAP_LOCK = "mailroom:listen-sessions:"

interface SessionRow {
  readonly id: string
  readonly device_name: string | null
  readonly created_at: Date
  readonly expires_at: Date
}

interface EventRow {
  readonly id: string
  readonly event_id: string
  readonly event_type: string
  readonly email_id: string | null
  readonly replay_of: string | null
  readonly payload: string
}

const toSession = (r: SessionRow): ListenSession => ({
  id: r.id,
  device_name: r.device_name,
  created_at: r.created_at,
  expires_at: r.expires_at
})

export const ListenHttpLive = HttpApiBuilder.group(MailroomApi, "listen", (handlers) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const secrets = yield* WebhookSecrets
    const wakeups = yield* ListenWakeups
    const notFound = new NotFound({ message: "listen session not found" })
    const expiry = Effect.map(Clock.currentTimeMillis, (now) => ({
      now: new Date(now),
      until: new Date(now + LISTEN_SESSION_TTL_SECONDS * 1000)
    }))

    const touch = (orgId: string, id: string) =>
      Effect.gen(function*() {
        const { until } = yield* expiry
        const rows = yield* sql<SessionRow>`
          UPDATE listen_sessions SET expires_at = ${until} WHERE id = ${id} AND org_id = ${orgId} RETURNING *`
        return Option.fromNullable(rows[0])
      }).pipe(Effect.orDie)

    /** Takes (and removes) the session's queued copies, oldest first. */
    const take = (id: string) =>
      sql<EventRow>`
        WITH taken AS (
          DELETE FROM listen_events WHERE id IN (
            SELECT id FROM listen_events WHERE session_id = ${id} ORDER BY id LIMIT ${BATCH} FOR UPDATE SKIP LOCKED)
          RETURNING id AS seq, delivery_id)
        SELECT d.id, d.event_id, d.event_type, d.email_id, d.replay_of, d.payload
        FROM taken t JOIN deliveries d ON d.id = t.delivery_id
        ORDER BY t.seq`.pipe(Effect.orDie)

    return handlers
      .handle("createSession", ({ payload }) =>
        Effect.gen(function*() {
          // A derived idempotency key must not hand one session to two listeners.
          yield* noStore
          const principal = yield* CurrentPrincipal
          yield* requireWholeOrganization(principal, "a listen session")
          const orgId = principal.orgId
          const { now, until } = yield* expiry
          // Count and insert under the organization's lock: concurrent creates see each other's
          // sessions, so the cap holds exactly (each statement after the lock takes a new snapshot).
          const rows = yield* Effect.gen(function*() {
            yield* sql`SELECT pg_advisory_xact_lock(hashtextextended(${SESSION_CAP_LOCK + orgId}, 0))`
            yield* sql`DELETE FROM listen_sessions
                       WHERE org_id = ${orgId} AND expires_at < ${new Date(now.getTime() - 86_400_000)}`
            const active = yield* sql<{ n: number }>`
              SELECT count(*)::int AS n FROM listen_sessions WHERE org_id = ${orgId} AND expires_at > ${now}`
            if ((active[0]?.n ?? 0) >= LISTEN_MAX_ACTIVE_SESSIONS) return undefined
            return yield* sql<SessionRow>`
              INSERT INTO listen_sessions (org_id, device_name, created_at, expires_at)
              VALUES (${orgId}, ${payload.device_name ?? null}, ${now}, ${until}) RETURNING *`
          }).pipe(sql.withTransaction, Effect.orDie)
          if (rows === undefined) {
            return yield* new Conflict({
              message: `at most ${LISTEN_MAX_ACTIVE_SESSIONS} listen sessions can be active at once`,
              details: { remediation: "stop another `mailroom listen`, or wait two minutes for an abandoned one to expire" }
            })
          }
          return toSession(rows[0]!)
        }))
      .handle("events", ({ path, urlParams }) =>
        Effect.gen(function*() {
          const principal = yield* CurrentPrincipal
          yield* requireWholeOrganization(principal, "a listen session")
          const orgId = principal.orgId
          yield* Effect.flatten(touch(orgId, path.id)).pipe(Effect.mapError(() => notFound))
          const wait = urlParams.wait ?? DEFAULT_WAIT_SECONDS
          let rows = yield* take(path.id)
          if (rows.length === 0 && wait > 0) {
            rows = yield* Effect.gen(function*() {
              if (!(yield* wakeups.slot(orgId))) {
                return yield* new RateLimitExceeded({
                  message: `at most ${LISTEN_MAX_WAITS_PER_ORG} listen polls may wait at once per organization; ` +
                    "poll again after one of them returns",
                  details: { limit: LISTEN_MAX_WAITS_PER_ORG, retry_after: 1 }
                })
              }
              const deadline = (yield* Clock.currentTimeMillis) + wait * 1000
              return yield* wakeups.poll(orgId, path.id, deadline, take(path.id))
            }).pipe(Effect.scoped)
          }
          if (rows.length === 0) return []
          const secret = yield* secrets.signing(orgId)
          if (Option.isNone(secret)) return yield* notFound
          const t = Math.floor((yield* Clock.currentTimeMillis) / 1000)
          return rows.map((r): ListenEvent => ({
            delivery_id: r.id,
            event_id: r.event_id,
            event_type: r.event_type,
            email_id: r.email_id,
            replay_of: r.replay_of,
            payload: r.payload,
            headers: {
              ...signatureHeaders(secret.value, r.payload, t),
              "mailroom-event-id": r.event_id,
              "mailroom-event-type": r.event_type,
              "mailroom-delivery-id": r.id,
              // The forwarded copy is sent once.
              "mailroom-attempt": "1"
            }
          }))
        }))
      .handle("deleteSession", ({ path }) =>
        Effect.gen(function*() {
          const { orgId } = yield* CurrentPrincipal
          const rows = yield* sql<SessionRow>`
            DELETE FROM listen_sessions WHERE id = ${path.id} AND org_id = ${orgId} RETURNING *`.pipe(Effect.orDie)
          const row = rows[0]
          if (row === undefined) return yield* notFound
          return toSession(row)
        }))
  })).pipe(Layer.provide(Layer.mergeAll(WebhookSecrets.Default, ListenWakeups.Default)))
