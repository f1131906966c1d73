/**
 * Replaying a delivery: a new delivery of the same email event to the same endpoint, claimed and
 * attempted at once (no retries), so the caller sees its outcome. Only email deliveries replay, and
 * only to an endpoint that still exists; an organization replays at most REPLAY_LIMIT per minute.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Option } from "effect"
import { Conflict, NotFound } from "../contract/Errors.js"
import { EndpointsRepo } from "../endpoints/Repo.js"
import { AppConfig } from "../platform/Config.js"
import { RateLimiter } from "../platform/RateLimiter.js"
import { DeliveryAttempts, processDelivery } from "./Dispatcher.js"
import { DeliveryQueue, leaseMillis } from "./Queue.js"
import { DeliveriesRepo } from "./Repo.js"

/** Replay is limited to 30 per minute per organization. */
export const REPLAY_LIMIT = { limit: 30, windowSeconds: 60 } as const

export class DeliveryReplay extends Effect.Service<DeliveryReplay>()("mailroom/DeliveryReplay", {
  effect: Effect.gen(function*() {
    const repo = yield* DeliveriesRepo
    const queue = yield* DeliveryQueue
    const endpoints = yield* EndpointsRepo
    const limiter = yield* RateLimiter
    const config = yield* AppConfig
    const context = yield* Effect.context<DeliveryQueue | DeliveryAttempts | AppConfig | SqlClient.SqlClient>()

    const replay = (orgId: string, id: string) =>
      Effect.gen(function*() {
        const found = yield* repo.find(orgId, id)
        if (Option.isNone(found)) return yield* new NotFound({ message: "delivery not found" })
        const original = found.value
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
      })

    return { replay } as const
  })
}) {}
