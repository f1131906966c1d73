/**
 * Contract of the live event interfaces: the organization's event stream (Server-Sent Events) and
 * waiting for the next matching email (what the MCP tool `wait_for_email` calls).
 */
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { allErrors, DateTimeFilter, Ok } from "../contract/Envelope.js"
import { Wire } from "../contract/Errors.js"
import { Authentication } from "../contract/Security.js"
import { Email } from "../emails/Api.js"
import { LISTEN_MAX_WAITS_PER_ORG } from "../listen/Api.js"

/** How long events stay resumable. */
export const EVENT_LOG_RETENTION_HOURS = 72
export const KEEP_ALIVE_SECONDS = 15
export const WAIT_MAX_SECONDS = 120
export const WAIT_DEFAULT_SECONDS = 30
const MAX_TYPES = 20
const TYPE = /^[a-z0-9_]+(\.[a-z0-9_]+)+$/

/** `email.received,payment.failed`: comma-separated event types, decoded to a list. */
const EventTypes = Schema.transform(
  Schema.String.pipe(
    Schema.maxLength(1000),
    Schema.filter((s) => {
      const types = s.split(",").map((t) => t.trim()).filter((t) => t !== "")
      if (types.length === 0) return "must name at least one event type"
      if (types.length > MAX_TYPES) return `at most ${MAX_TYPES} event types`
      const bad = types.find((t) => !TYPE.test(t))
      return bad === undefined ? true : `"${bad}" is not an event type (like email.received)`
    })
  ),
  Schema.Array(Schema.String),
  {
    strict: true,
    decode: (s) => [...new Set(s.split(",").map((t) => t.trim()).filter((t) => t !== ""))],
    encode: (types) => types.join(",")
  }
).annotations({ description: "comma-separated event types to receive (all when absent), e.g. `email.received,payment.failed`" })

export const EventStreamParams = allErrors(Schema.Struct({
  types: Schema.optionalWith(EventTypes, { exact: true })
}))

export const EventStreamHeaders = allErrors(Schema.Struct({
  "last-event-id": Schema.optionalWith(
    Schema.String.pipe(Schema.minLength(1), Schema.maxLength(200)).annotations({
      description: `resume after this event id (kept ${EVENT_LOG_RETENTION_HOURS} h); sent by EventSource clients when they reconnect`
    }),
    { exact: true }
  )
}))

export const WaitForEmailParams = allErrors(Schema.Struct({
  from: Schema.optionalWith(
    Schema.String.pipe(Schema.minLength(1), Schema.maxLength(320)).annotations({
      description: "the sender's address (case-insensitive), or `@domain` for any sender of that domain"
    }),
    { exact: true }
  ),
  subject_contains: Schema.optionalWith(
    Schema.String.pipe(Schema.minLength(1), Schema.maxLength(998)).annotations({
      description: "text the subject contains (case-insensitive)"
    }),
    { exact: true }
  ),
  recipient: Schema.optionalWith(
    Schema.String.pipe(Schema.minLength(1), Schema.maxLength(320)).annotations({
      description: "the address the email was received at (case-insensitive)"
    }),
    { exact: true }
  ),
  after: Schema.optionalWith(DateTimeFilter.annotations({
    description: "only an email received after this time (default: when the call began)"
  }), { exact: true }),
  timeout_seconds: Schema.optionalWith(
    Schema.NumberFromString.pipe(Schema.int(), Schema.between(0, WAIT_MAX_SECONDS)).annotations({
      message: () => `must be an integer from 0 to ${WAIT_MAX_SECONDS}`
    }),
    { exact: true }
  ).annotations({ description: `seconds to wait (0-${WAIT_MAX_SECONDS}, default ${WAIT_DEFAULT_SECONDS})` })
}))

export class EventsApi extends HttpApiGroup.make("events")
  .add(
    HttpApiEndpoint.get("stream", "/events")
      .setUrlParams(EventStreamParams)
      .setHeaders(EventStreamHeaders)
      .addSuccess(HttpApiSchema.Text({ contentType: "text/event-stream" }).annotations({
        description: "Server-Sent Events: `id:` the event id, `event:` its type, `data:` the webhook payload " +
          "(see the `webhooks` section), one per organization event; a `: keep-alive` comment every " +
          `${KEEP_ALIVE_SECONDS} s`
      }))
      .addError(Wire.ValidationError)
      .addError(Wire.RateLimitExceeded)
      .annotate(OpenApi.Summary, "Live stream of the organization's events (Server-Sent Events)")
      .annotate(
        OpenApi.Description,
        "Send `Accept: text/event-stream`. Every event of the organization is streamed as it happens, whether or not " +
          "an endpoint receives it (mail stopped by a filter is no event). Reconnect with `Last-Event-ID` to receive " +
          `every event after that one, in order, with no gap and no duplicate, over the last ${EVENT_LOG_RETENTION_HOURS} h; ` +
          "an id not (or no longer) kept is 400 `validation_error`. A stream holds one of the organization's " +
          `${LISTEN_MAX_WAITS_PER_ORG} listen slots (shared with waiting \`listen\` polls and \`/emails/wait\`) until it ` +
          "closes; past them, 429 `rate_limit_exceeded`."
      )
  )
  .add(
    HttpApiEndpoint.get("waitForEmail", "/emails/wait")
      .setUrlParams(WaitForEmailParams)
      .addSuccess(Ok(Schema.NullOr(Email), "WaitedEmail"))
      .addError(Wire.RateLimitExceeded)
      .annotate(OpenApi.Summary, "Wait for the next received email that matches, up to a timeout")
      .annotate(
        OpenApi.Description,
        "Answers the first accepted email received after `after` (default: when the call began) that matches every " +
          "filter given, as soon as it is stored; `data` is null when none arrived within `timeout_seconds`. " +
          `A waiting call holds one of the organization's ${LISTEN_MAX_WAITS_PER_ORG} listen slots; past them, 429 ` +
          "`rate_limit_exceeded`."
      )
  )
  .middleware(Authentication)
  .annotate(OpenApi.Description, "Live events: the organization's event stream and waiting for mail")
{}
