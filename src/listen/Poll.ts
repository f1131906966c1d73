/**
 * One poll of a listen session: the session is touched (kept alive, or 404 when it is not the
 * organization's), its queued copies taken; with none queued the poll waits up to `wait` seconds
 * for a wakeup (at most LISTEN_MAX_WAITS_PER_ORG waiting per organization, 429 beyond), and what it
 * takes is signed afresh with the organization's webhook secret, as a delivery of it would be.
 */
import { Clock, Effect, Option } from "effect"
import { WebhookSecrets } from "../account/WebhookSecret.js"
import { NotFound, RateLimitExceeded } from "../contract/Errors.js"
import { signatureHeaders } from "../webhooks/Signing.js"
import { LISTEN_SESSION_TTL_SECONDS, type ListenEvent } from "./Api.js"
import { ListenSessions } from "./Sessions.js"
import { LISTEN_MAX_WAITS_PER_ORG, ListenWakeups } from "./Wakeups.js"

export const DEFAULT_WAIT_SECONDS = 25

export class ListenPoll extends Effect.Service<ListenPoll>()("mailroom/ListenPoll", {
  effect: Effect.gen(function*() {
    const sessions = yield* ListenSessions
    const secrets = yield* WebhookSecrets
    const wakeups = yield* ListenWakeups
    const notFound = new NotFound({ message: "listen session not found" })

    const events = (orgId: string, sessionId: string, wait = DEFAULT_WAIT_SECONDS) =>
      Effect.gen(function*() {
        const until = new Date((yield* Clock.currentTimeMillis) + LISTEN_SESSION_TTL_SECONDS * 1000)
        yield* Effect.flatten(sessions.touch(orgId, sessionId, until)).pipe(Effect.mapError(() => notFound))
        const take = sessions.take(sessionId)
        let rows = yield* take
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
            return yield* wakeups.poll(orgId, sessionId, deadline, take)
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
      })

    return { events } as const
  })
}) {}
