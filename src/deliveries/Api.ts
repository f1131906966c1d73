/** Contract of the Webhook deliveries area. */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { allErrors, DateTimeFilter, DateTimeString, IdempotencyHeaders, IdPath, Ok, OkList, strict, Uuid } from "../contract/Envelope.js"
import { Wire } from "../contract/Errors.js"
import { Authentication } from "../contract/Security.js"
import { VERDICTS } from "../webhooks/Diagnosis.js"

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
  date_from: Schema.optionalWith(DateTimeFilter, { exact: true }),
  date_to: Schema.optionalWith(DateTimeFilter, { exact: true })
}))

export const DebugSignatureRequest = strict(Schema.Struct({
  headers: Schema.Record({ key: Schema.String, value: Schema.String }).annotations({
    description: "The headers your endpoint received (names in any case); at least Mailroom-Signature or Legacy-Signature"
  }),
  body: Schema.String.annotations({ description: "The raw request body exactly as received, as a string" })
})).annotations({ identifier: "DebugSignatureRequest" })

export const SignatureVerdict = Schema.Literal(...VERDICTS).annotations({
  description: "valid; missing_header; malformed_header; timestamp_out_of_tolerance (the signature matches but t is " +
    "more than 300 s away); body_reserialized (the JSON equals the delivered payload but its bytes differ); " +
    "body_modified (the content differs from the delivered payload); signed_with_previous_secret (only the secret " +
    "replaced at the last rotation matches); signed_with_unknown_secret (no secret of the account matches)"
})

export const SignatureDiagnosis = Schema.Struct({
  valid: Schema.Boolean.annotations({
    description: "true when a receiver verifying with the current secret accepts this request now"
  }),
  verdict: SignatureVerdict,
  message: Schema.String.annotations({ description: "what failed and what to change" }),
  details: Schema.Struct({
    header: Schema.NullOr(Schema.String).annotations({ description: "the header read (Mailroom-Signature first)" }),
    timestamp: Schema.NullOr(Schema.Int).annotations({ description: "the header's t" }),
    age_seconds: Schema.NullOr(Schema.Int).annotations({ description: "now − t; negative when t is in the future" }),
    tolerance_seconds: Schema.Int,
    signatures: Schema.Int.annotations({ description: "number of well-formed v1 values in the header" }),
    matched_secret: Schema.NullOr(Schema.Literal("current", "previous")),
    event_id: Schema.NullOr(Schema.String).annotations({ description: "the event the body (or Mailroom-Event-Id) names" }),
    delivery_known: Schema.Boolean.annotations({
      description: "the organization has a delivery of that event, so the body was compared with the delivered bytes"
    }),
    first_difference_at: Schema.NullOr(Schema.Int).annotations({
      description: "byte offset where the body first differs from the delivered one"
    }),
    previous_expires_at: Schema.NullOr(DateTimeString).annotations({
      description: "end of the grace period of the secret replaced at the last rotation; null when never rotated"
    }),
    problems: Schema.Array(Schema.String).annotations({ description: "what is wrong with the header, part by part" })
  })
}).annotations({ identifier: "SignatureDiagnosis" })

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
  .add(
    HttpApiEndpoint.post("debugSignature", "/webhooks/debug-signature")
      .setPayload(DebugSignatureRequest)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Ok(SignatureDiagnosis, "SignatureDiagnosis"))
      .addError(Wire.NotFound)
      .annotate(OpenApi.Summary, "Tell why a webhook signature does not verify (200 with a verdict, whatever it is)")
      .annotate(
        OpenApi.Description,
        "Send the headers and the raw body your endpoint received. The answer names the first check that fails, in " +
          "order: header missing or malformed; the signature against the current secret, then the secret replaced " +
          "at the last rotation; when the body's `id` names a delivered event, the body compared with the bytes that " +
          "were signed (re-serialized or modified); the 300 s timestamp tolerance. Every verdict is a 200: this is " +
          "a diagnosis, not a failure."
      )
  )
  .middleware(Authentication)
  .annotate(OpenApi.Description, "Listing and replay of webhook deliveries, and a signature debugger")
{}
