/**
 * Events that are not about one received email (`payment.failed`, `payment.settled`, …) through the
 * same delivery path as mail: one delivery per subscribed endpoint, the payload built once with a
 * stable event id, signed afresh on every attempt, retried on the delivery schedule and listed by
 * the deliveries operations (with `email_id` null).
 *
 * Which endpoints: an endpoint that names the event type in `rules.event_types` receives it
 * wherever it sits (a per-domain endpoint or a route target included); the organization-wide
 * fallback endpoint (no domain, not a route target) with `event_types` omitted receives every event
 * type. Other endpoints are mail destinations of a domain or an address, and a non-mail event
 * reaches them only when they ask for it. Disabled and deleted endpoints receive nothing. Filters and
 * the sender and size rules apply to mail only.
 */
import { SqlClient, type Statement } from "@effect/sql"
import { Effect, Either, Schema } from "effect"
import { schemaOf } from "../webhooks/Events.js"
import { newEventId } from "../webhooks/Payload.js"
import { EventLog } from "./Log.js"
import { allRows } from "../platform/Rows.js"
import { DeliveryQueue } from "../deliveries/Queue.js"

export interface OrgEvent {
  readonly orgId: string
  readonly eventType: string
  /** The event's own fields (beside `id`, `event`, `created_at`). */
  readonly data: Readonly<Record<string, unknown>>
  readonly createdAt: Date
}

/**
 * The body encoded with its type's published schema (src/webhooks/Events.ts). A body that does not
 * fit is logged and sent as it is: the event is never lost over its documentation.
 */
const encoded = (body: { readonly event: string } & Record<string, unknown>) => {
  const schema = schemaOf(body.event)
  if (schema === undefined) return Effect.as(Effect.logError(`event type ${body.event} has no published schema`), body)
  return Either.match(Schema.encodeUnknownEither(schema)(body), {
    onLeft: (e) => Effect.as(Effect.logError(`event ${body.event} does not fit its published schema`, e), body),
    onRight: (value) => Effect.succeed(value)
  })
}

const SubscribedEndpoint = Schema.Struct({ id: Schema.String })

export class OrgEvents extends Effect.Service<OrgEvents>()("mailroom/OrgEvents", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const queue = yield* DeliveryQueue
    const log = yield* EventLog

    /**
     * Enqueues the event for each subscribed endpoint, on the caller's connection (so inside its
     * transaction when it has one: the event exists exactly when what it reports was committed).
     * Answers the event id and the number of deliveries.
     */
    /** The endpoints subscribed to the event (see the module's comment), as a condition on `endpoints`. */
    const subscribed = (event: OrgEvent) =>
      sql`org_id = ${event.orgId} AND deactivated_at IS NULL AND enabled
            AND (
              (jsonb_typeof(rules -> 'event_types') = 'array' AND rules -> 'event_types' ? ${event.eventType})
              OR (NOT (rules ? 'event_types') AND domain_id IS NULL AND NOT is_route_target)
            )`

    const payloadOf = (event: OrgEvent, eventId: string) =>
      Effect.map(
        encoded({ id: eventId, event: event.eventType, created_at: event.createdAt.toISOString(), ...event.data }),
        (body) => JSON.stringify(body)
      )

    const emit = (event: OrgEvent) =>
      Effect.gen(function*() {
        const endpoints = yield* sql`
          SELECT id FROM endpoints WHERE ${subscribed(event)}
          ORDER BY created_at, id`.pipe(allRows(SubscribedEndpoint, "subscribed endpoints"))
        const eventId = newEventId()
        const payload = yield* payloadOf(event, eventId)
        // Without a subscribed endpoint the event still reaches the organization's event log.
        if (endpoints.length === 0) {
          yield* log.appendStatement({ orgId: event.orgId, eventId, eventType: event.eventType, payload })
          return { eventId, deliveries: 0 }
        }
        for (const endpoint of endpoints) {
          yield* queue.enqueueStatement({
            orgId: event.orgId,
            emailId: null,
            endpointId: endpoint.id,
            eventId,
            eventType: event.eventType,
            payload,
            sender: "",
            recipient: "",
            subject: ""
          })
        }
        return { eventId, deliveries: endpoints.length }
      }).pipe(Effect.orDie)

    /**
     * `emit` as data-modifying CTEs (named `event_*`) to embed in the statement that writes what the
     * event reports: it is emitted exactly when the CTE named `guard` of that statement yields a
     * row, in the same round trip and the same transaction.
     */
    const emitWithin = (event: OrgEvent, guard: string) =>
      Effect.suspend(() => {
        const eventId = newEventId()
        return Effect.map(payloadOf(event, eventId), (payload) => ({ eventId, payload }))
      }).pipe(Effect.map(({ eventId, payload }): ReadonlyArray<Statement.Fragment> => {
        const happened = sql`EXISTS (SELECT 1 FROM ${sql.literal(guard)})`
        const entry = { orgId: event.orgId, eventId, eventType: event.eventType, payload }
        return [
          sql`event_endpoints AS (SELECT id, created_at FROM endpoints WHERE ${subscribed(event)} AND ${happened})`,
          // Without a subscribed endpoint the event still reaches the organization's event log.
          sql`event_logged AS (${log.appendWhen(entry, sql`${happened} AND NOT EXISTS (SELECT 1 FROM event_endpoints)`)})`,
          sql`event_queued AS (${queue.enqueueEach({ ...entry, emailId: null, sender: "", recipient: "", subject: "" }, "event_endpoints")})`
        ]
      }))

    return { emit, emitWithin } as const
  }),
  dependencies: [EventLog.Default]
}) {}
