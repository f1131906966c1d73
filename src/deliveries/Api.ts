/** Contract of the Webhook deliveries area (SPEC.md "Webhook deliveries"). */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { allErrors, DateTimeString, IdempotencyHeaders, IdPath, Ok, OkList, Uuid } from "../contract/Envelope.js"
import { Wire } from "../contract/Errors.js"
import { Authentication } from "../contract/Security.js"

export const DeliveryStatus = Schema.Literal("pending", "delivered", "header_confirmed", "failed")

export const WebhookDelivery = Schema.Struct({
  id: Schema.String,
  email_id: Schema.NullOr(Uuid).annotations({ description: "inbound email (null once the email was deleted)" }),
  endpoint_id: Uuid,
  endpoint_url: Schema.String.annotations({ description: "for function endpoints `function://<function_id>`" }),
  status: DeliveryStatus,
  attempt_count: Schema.Int,
  duration_ms: Schema.Int,
  last_error: Schema.String.annotations({ description: "human-readable failure text; empty when none" }),
  last_error_code: Schema.String.annotations({
    description: "http_<status>, timeout, connection_error, content_discarded, superseded, queue_dead_letter, …; empty when none"
  }),
  created_at: DateTimeString,
  updated_at: DateTimeString,
  email: Schema.Struct({ sender: Schema.String, recipient: Schema.String, subject: Schema.String }),
  event_id: Schema.String.annotations({ description: "the payload's id: stable across retries and replays" }),
  event_type: Schema.String,
  next_attempt_at: Schema.NullOr(DateTimeString).annotations({ description: "when pending: the next attempt" }),
  replay_of: Schema.NullOr(Schema.String)
}).annotations({ identifier: "WebhookDelivery" })
export type WebhookDelivery = typeof WebhookDelivery.Type

export const ReplayResult = Schema.Struct({
  delivered: Schema.Int,
  failed: Schema.Int,
  delivery_id: Schema.String.annotations({ description: "the delivery recording the replay attempt" })
}).annotations({ identifier: "ReplayResult" })

export const DeliveryListParams = allErrors(Schema.Struct({
  limit: Schema.optionalWith(Schema.NumberFromString.pipe(Schema.int(), Schema.between(1, 100)), { exact: true }),
  cursor: Schema.optionalWith(Schema.String.pipe(Schema.maxLength(512)), { exact: true }),
  email_id: Schema.optionalWith(Uuid, { exact: true }),
  status: Schema.optionalWith(DeliveryStatus, { exact: true }),
  date_from: Schema.optionalWith(Schema.Date, { exact: true }),
  date_to: Schema.optionalWith(Schema.Date, { exact: true })
}))

export class DeliveriesApi extends HttpApiGroup.make("deliveries")
  .add(
    HttpApiEndpoint.get("list", "/webhooks/deliveries")
      .setUrlParams(DeliveryListParams)
      .addSuccess(OkList(WebhookDelivery, "WebhookDelivery"))
      .annotate(OpenApi.Summary, "Delivery attempts, newest first (meta.total, meta.cursor)")
  )
  .add(
    HttpApiEndpoint.get("get", "/webhooks/deliveries/:id")
      .setPath(IdPath)
      .addSuccess(Ok(WebhookDelivery, "WebhookDelivery"))
      .addError(Wire.NotFound)
      .annotate(OpenApi.Summary, "One delivery")
  )
  .add(
    HttpApiEndpoint.post("replay", "/webhooks/deliveries/:id/replay")
      .setPath(IdPath)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Ok(ReplayResult, "ReplayResult"))
      .addError(Wire.NotFound)
      .addError(Wire.Conflict)
      .addError(Wire.RateLimitExceeded)
      .annotate(
        OpenApi.Summary,
        "Re-send the stored payload (same event id, fresh signature) to the original endpoint; 409 when it was deleted"
      )
  )
  .middleware(Authentication)
  .annotate(OpenApi.Description, "Listing and replay of webhook deliveries")
{}
