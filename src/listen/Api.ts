/**
 * Contract of `mailroom listen`: a listen session receives a copy of every delivery of its
 * organization created while it is active, with the exact signed body and fresh signature headers,
 * so the CLI can forward it to a local URL and the handler verifies it as it would in production.
 */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { allErrors, DateTimeString, IdempotencyHeaders, IdPath, Ok, strict } from "../contract/Envelope.js"
import { Wire } from "../contract/Errors.js"
import { Authentication } from "../contract/Security.js"

/** A session stops receiving copies this long after its last poll. */
export const LISTEN_SESSION_TTL_SECONDS = 120
export const LISTEN_MAX_WAIT_SECONDS = 30
export const LISTEN_MAX_ACTIVE_SESSIONS = 10
/** Requests of one organization that may wait for events at once (per process). */
export const LISTEN_MAX_WAITS_PER_ORG = 10

export const ListenSession = Schema.Struct({
  id: Schema.UUID,
  device_name: Schema.NullOr(Schema.String),
  created_at: DateTimeString,
  expires_at: DateTimeString.annotations({ description: "moved forward by every poll" })
}).annotations({ identifier: "ListenSession" })
export type ListenSession = typeof ListenSession.Type

export const CreateListenSession = strict(Schema.Struct({
  device_name: Schema.optionalWith(Schema.String.pipe(Schema.minLength(1), Schema.maxLength(80)), { exact: true })
})).annotations({ identifier: "CreateListenSession" })

export const ListenEvent = Schema.Struct({
  delivery_id: Schema.UUID,
  event_id: Schema.String,
  event_type: Schema.String,
  email_id: Schema.NullOr(Schema.UUID),
  replay_of: Schema.NullOr(Schema.UUID),
  payload: Schema.String.annotations({ description: "the exact JSON body the endpoint receives; forward it byte for byte" }),
  headers: Schema.Record({ key: Schema.String, value: Schema.String }).annotations({
    description: "Mailroom-Signature (signed now with the webhook secret), Legacy-Signature and the mailroom-* headers"
  })
}).annotations({ identifier: "ListenEvent" })
export type ListenEvent = typeof ListenEvent.Type

export const ListenEventsParams = allErrors(Schema.Struct({
  wait: Schema.optionalWith(
    Schema.NumberFromString.pipe(Schema.int(), Schema.between(0, LISTEN_MAX_WAIT_SECONDS)).annotations({
      message: () => `must be an integer from 0 to ${LISTEN_MAX_WAIT_SECONDS}`
    }),
    { exact: true }
  ).annotations({ description: `seconds to wait for an event when none is queued (0-${LISTEN_MAX_WAIT_SECONDS}, default 25)` })
}))

export class ListenApi extends HttpApiGroup.make("listen")
  .add(
    HttpApiEndpoint.post("createSession", "/listen/sessions")
      .setPayload(CreateListenSession)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Ok(ListenSession, "ListenSession"), { status: 201 })
      .addError(Wire.Conflict)
      .annotate(OpenApi.Summary, `Start a listen session (at most ${LISTEN_MAX_ACTIVE_SESSIONS} active per organization)`)
  )
  .add(
    HttpApiEndpoint.get("events", "/listen/sessions/:id/events")
      .setPath(IdPath)
      .setUrlParams(ListenEventsParams)
      .addSuccess(Ok(Schema.Array(ListenEvent), "ListenEvents"))
      .addError(Wire.NotFound)
      .addError(Wire.RateLimitExceeded)
      .annotate(
        OpenApi.Summary,
        "Long-poll: the deliveries created since the last poll (each returned once); keeps the session alive. " +
          "A waiting poll returns as soon as a delivery arrives; at most 10 polls of an organization may wait at once " +
          "(429 rate_limit_exceeded beyond)"
      )
  )
  .add(
    HttpApiEndpoint.del("deleteSession", "/listen/sessions/:id")
      .setPath(IdPath)
      .addSuccess(Ok(ListenSession, "ListenSession"))
      .addError(Wire.NotFound)
      .annotate(OpenApi.Summary, "End a listen session")
  )
  .middleware(Authentication)
  .annotate(OpenApi.Description, "Local forwarding of deliveries for `mailroom listen`")
{}
