/** Handlers of the listen area (see Api.ts, Poll.ts, Wakeups.ts and migrations/0011_listen.sql). */
import { Clock, Effect, Layer, Option } from "effect"
import { MailroomApi } from "../Api.js"
import { WebhookSecrets } from "../account/WebhookSecret.js"
import { Conflict, NotFound } from "../contract/Errors.js"
import { CurrentPrincipal } from "../contract/Security.js"
import * as ApiGroup from "../platform/ApiGroup.js"
import { noStore } from "../platform/HttpHeaders.js"
import { requireWholeOrganization } from "../platform/InboxLimit.js"
import {
  LISTEN_MAX_ACTIVE_SESSIONS,
  LISTEN_SESSION_TTL_SECONDS,
  type ListenSession
} from "./Api.js"
import { ListenPoll } from "./Poll.js"
import { ListenSessions, type SessionRow } from "./Sessions.js"
import { ListenWakeups } from "./Wakeups.js"

const toSession = (r: SessionRow): ListenSession => ({
  id: r.id,
  device_name: r.device_name,
  created_at: r.created_at,
  expires_at: r.expires_at
})

export const ListenHttpLive = ApiGroup.group(MailroomApi, "listen", (handlers) =>
  Effect.gen(function*() {
    const sessions = yield* ListenSessions
    const poll = yield* ListenPoll
    const notFound = new NotFound({ message: "listen session not found" })
    const expiry = Effect.map(Clock.currentTimeMillis, (now) => ({
      now: new Date(now),
      until: new Date(now + LISTEN_SESSION_TTL_SECONDS * 1000)
    }))

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
          return yield* poll.events(principal.orgId, path.id, urlParams.wait)
        }))
      .handle("deleteSession", ({ path }) =>
        Effect.gen(function*() {
          const { orgId } = yield* CurrentPrincipal
          const row = yield* sessions.remove(orgId, path.id)
          if (Option.isNone(row)) return yield* notFound
          return toSession(row.value)
        }))
  })).pipe(
    Layer.provide(ListenPoll.Default),
    Layer.provide(Layer.mergeAll(WebhookSecrets.Default, ListenWakeups.Default, ListenSessions.Default))
  )
