/** Handlers of the listen area (see Api.ts, Wakeups.ts and migrations/0011_listen.sql). */
import { HttpApiBuilder } from "@effect/platform"
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
import { ListenSessions, type SessionRow } from "./Sessions.js"
import { LISTEN_MAX_WAITS_PER_ORG, ListenWakeups } from "./Wakeups.js"

const DEFAULT_WAIT_SECONDS = 25

const toSession = (r: SessionRow): ListenSession => ({
  id: r.id,
  device_name: r.device_name,
  created_at: r.created_at,
  expires_at: r.expires_at
})

export const ListenHttpLive = HttpApiBuilder.group(MailroomApi, "listen", (handlers) =>
  Effect.gen(function*() {
    const sessions = yield* ListenSessions
    const secrets = yield* WebhookSecrets
    const wakeups = yield* ListenWakeups
    const notFound = new NotFound({ message: "listen session not found" })
    const expiry = Effect.map(Clock.currentTimeMillis, (now) => ({
      now: new Date(now),
      until: new Date(now + LISTEN_SESSION_TTL_SECONDS * 1000)
    }))

    const touch = (orgId: string, id: string) =>
      Effect.flatMap(expiry, ({ until }) => sessions.touch(orgId, id, until))
    const take = sessions.take

    return handlers
      .handle("createSession", ({ payload }) =>
        Effect.gen(function*() {
          // A derived idempotency key must not hand one session to two listeners.
          yield* noStore
          const principal = yield* CurrentPrincipal
          yield* requireWholeOrganization(principal, "a listen session")
          const orgId = principal.orgId
          const { now, until } = yield* expiry
          const created = yield* sessions.create(orgId, payload.device_name ?? null, now, until)
          if (Option.isNone(created)) {
            return yield* new Conflict({
              message: `at most ${LISTEN_MAX_ACTIVE_SESSIONS} listen sessions can be active at once`,
              details: { remediation: "stop another `mailroom listen`, or wait two minutes for an abandoned one to expire" }
            })
          }
          return toSession(created.value)
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
          const row = yield* sessions.remove(orgId, path.id)
          if (Option.isNone(row)) return yield* notFound
          return toSession(row.value)
        }))
  })).pipe(Layer.provide(Layer.mergeAll(WebhookSecrets.Default, ListenWakeups.Default, ListenSessions.Default)))
