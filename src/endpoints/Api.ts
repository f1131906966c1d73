/** Contract of the Endpoints area. */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { DateTimeString, IdempotencyHeaders, IdPath, Ok, OkList, strict } from "../contract/Envelope.js"
import { Wire } from "../contract/Errors.js"
import { ListQuery } from "../contract/Paging.js"
import { Authentication } from "../contract/Security.js"
import { isEmailAddress } from "../mail/SenderPatterns.js"

export const EmailAddress = Schema.String.pipe(
  Schema.maxLength(254),
  Schema.filter((s) => isEmailAddress(s.trim()) || "must be an email address")
).annotations({ description: "an email address" })

export const Rules = strict(Schema.Struct({
  max_size_bytes: Schema.optionalWith(Schema.Int.pipe(Schema.nonNegative()), { exact: true }).annotations({
    description: "maximum total email size (approximate); larger messages are not delivered here"
  }),
  exclude_attachments: Schema.optionalWith(Schema.Boolean, { exact: true }),
  attachment_limit_mb: Schema.optionalWith(Schema.Number.pipe(Schema.nonNegative()), { exact: true }),
  sender_whitelist: Schema.optionalWith(Schema.Array(EmailAddress).pipe(Schema.maxItems(1000)), { exact: true }),
  sender_blacklist: Schema.optionalWith(Schema.Array(EmailAddress).pipe(Schema.maxItems(1000)), { exact: true }),
  event_types: Schema.optionalWith(
    Schema.Array(Schema.String.pipe(Schema.minLength(1), Schema.maxLength(100))).pipe(
      Schema.minItems(1, { message: () => "must list 1 to 50 event types (omit it for all types)" }),
      Schema.maxItems(50, { message: () => "must list 1 to 50 event types" })
    ),
    { exact: true }
  ).annotations({ description: "1 to 50 exact event type names; omitted means all types" })
})).annotations({ identifier: "EndpointRules", description: "all present rules are ANDed; {} means no filtering" })
export type Rules = typeof Rules.Type

export const EndpointKind = Schema.Literal("http", "function")

export const Endpoint = Schema.Struct({
  id: Schema.UUID,
  kind: EndpointKind,
  url: Schema.NullOr(Schema.String),
  function_id: Schema.NullOr(Schema.UUID),
  enabled: Schema.Boolean,
  domain_id: Schema.NullOr(Schema.UUID),
  rules: Rules,
  is_route_target: Schema.Boolean,
  created_at: DateTimeString,
  updated_at: DateTimeString
}).annotations({ identifier: "Endpoint" })
export type Endpoint = typeof Endpoint.Type

export const Url = Schema.String.pipe(Schema.minLength(1), Schema.maxLength(2048)).annotations({
  description: "https URL of a publicly reachable host"
})

export const CreateEndpoint = strict(Schema.Struct({
  kind: Schema.optionalWith(EndpointKind, { exact: true }).annotations({ description: "default http" }),
  url: Schema.optionalWith(Url, { exact: true }).annotations({ description: "http kind only (required there)" }),
  function_id: Schema.optionalWith(Schema.UUID, { exact: true }).annotations({
    description: "function kind only (required there)"
  }),
  enabled: Schema.optionalWith(Schema.Boolean, { exact: true }).annotations({ description: "default true" }),
  domain_id: Schema.optionalWith(Schema.NullOr(Schema.UUID), { exact: true }).annotations({
    description: "one of the organization's domains (paid plans); null or omitted: organization-wide fallback"
  }),
  rules: Schema.optionalWith(Rules, { exact: true }),
  is_route_target: Schema.optionalWith(Schema.Boolean, { exact: true }).annotations({
    description: "reachable only through routes; uses no default-destination slot"
  })
})).annotations({ identifier: "CreateEndpoint" })
export type CreateEndpoint = typeof CreateEndpoint.Type

export const UpdateEndpoint = strict(Schema.Struct({
  url: Schema.optionalWith(Url, { exact: true }),
  enabled: Schema.optionalWith(Schema.Boolean, { exact: true }),
  domain_id: Schema.optionalWith(Schema.NullOr(Schema.UUID), { exact: true }),
  rules: Schema.optionalWith(Rules, { exact: true }).annotations({ description: "replaces the rules" })
})).pipe(
  Schema.filter((b) => Object.keys(b).length > 0 || "at least one property is required"),
  Schema.annotations({ identifier: "UpdateEndpoint" })
)
export type UpdateEndpoint = typeof UpdateEndpoint.Type

export const TestResult = Schema.Struct({
  status_code: Schema.NullOr(Schema.Int).annotations({ description: "null when no HTTP response arrived" }),
  response_body: Schema.String.annotations({ description: "the first 2 KiB of the response body" }),
  signature: Schema.String.annotations({ description: "the Mailroom-Signature header value sent" }),
  duration_ms: Schema.Int,
  delivered: Schema.Boolean.annotations({ description: "true on a 2xx response" }),
  error: Schema.NullOr(Schema.String).annotations({ description: "why no response arrived (timeout, connection)" })
}).annotations({ identifier: "EndpointTestResult" })
export type TestResult = typeof TestResult.Type

export class EndpointsApi extends HttpApiGroup.make("endpoints")
  .add(
    HttpApiEndpoint.post("create", "/endpoints")
      .setPayload(CreateEndpoint)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Ok(Endpoint, "Endpoint"), { status: 201 })
      .addError(Wire.NotFound)
      .addError(Wire.Forbidden)
      .addError(Wire.Conflict)
      .annotate(
        OpenApi.Summary,
        "Create a delivery endpoint (a function's existing endpoint is returned with 200 instead)"
      )
  )
  .add(
    HttpApiEndpoint.get("list", "/endpoints")
      .setUrlParams(ListQuery)
      .addSuccess(OkList(Endpoint, "Endpoint"))
      .annotate(OpenApi.Summary, "Active endpoints, newest first")
  )
  .add(
    HttpApiEndpoint.patch("update", "/endpoints/:id")
      .setPath(IdPath)
      .setPayload(UpdateEndpoint)
      .addSuccess(Ok(Endpoint, "Endpoint"))
      .addError(Wire.NotFound)
      .addError(Wire.Forbidden)
      .addError(Wire.Conflict)
      .annotate(OpenApi.Summary, "Change url, enabled, domain_id or rules")
  )
  .add(
    HttpApiEndpoint.del("remove", "/endpoints/:id")
      .setPath(IdPath)
      .addSuccess(Ok(Endpoint, "Endpoint"))
      .addError(Wire.NotFound)
      .annotate(OpenApi.Summary, "Deactivate an endpoint: it stops receiving mail and frees its slot; its routes are removed")
  )
  .add(
    HttpApiEndpoint.post("test", "/endpoints/:id/test")
      .setPath(IdPath)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Ok(TestResult, "EndpointTestResult"))
      .addError(Wire.NotFound)
      .addError(Wire.RateLimitExceeded)
      .annotate(
        OpenApi.Summary,
        "Send a signed synthetic email.received to an http endpoint (4/min, 30/h per organization)"
      )
  )
  .middleware(Authentication)
  .annotate(OpenApi.Description, "Delivery destinations for inbound mail: webhook URLs and hosted functions")
{}
