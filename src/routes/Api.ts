/** Contract of the Routes area: recipient address patterns bound to one endpoint each. */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { DateTimeString, IdempotencyHeaders, IdPath, Ok, OkList, strict } from "../contract/Envelope.js"
import { Wire } from "../contract/Errors.js"
import { ListQuery } from "../contract/Paging.js"
import { Authentication } from "../contract/Security.js"
import { parseRoutePattern } from "./Patterns.js"

export const Route = Schema.Struct({
  id: Schema.UUID,
  pattern: Schema.String,
  domain_id: Schema.NullOr(Schema.UUID).annotations({ description: "null for the managed inbox" }),
  inbox_id: Schema.NullOr(Schema.UUID).annotations({
    description: "the inbox (GET /inboxes) whose address or +tag forms the pattern matches; null for a domain route"
  }),
  endpoint_id: Schema.UUID,
  created_at: DateTimeString,
  updated_at: DateTimeString
}).annotations({ identifier: "Route" })
export type Route = typeof Route.Type

export const RoutePatternString = Schema.String.pipe(
  Schema.maxLength(320),
  Schema.filter((s) =>
    parseRoutePattern(s) !== undefined ||
    "must be a recipient address or a pattern with * in the local part (support@acme.com, *@acme.com, *+tag@acme.com)"
  )
).annotations({ description: "recipient address or pattern on a verified domain or the managed inbox; lowercased" })

const target = {
  endpoint_id: Schema.optionalWith(Schema.UUID, { exact: true }).annotations({ description: "an active endpoint" }),
  function_id: Schema.optionalWith(Schema.UUID, { exact: true }).annotations({
    description: "a function: its endpoint is reused, or a route-target endpoint is created"
  })
}

export const CreateRoute = strict(Schema.Struct({ pattern: RoutePatternString, ...target })).annotations({
  identifier: "CreateRoute",
  description: "exactly one of endpoint_id and function_id"
})
export type CreateRoute = typeof CreateRoute.Type

export const UpdateRoute = strict(Schema.Struct({
  pattern: Schema.optionalWith(RoutePatternString, { exact: true }),
  ...target
})).pipe(
  Schema.filter((b) => Object.keys(b).length > 0 || "at least one property is required"),
  Schema.annotations({ identifier: "UpdateRoute" })
)
export type UpdateRoute = typeof UpdateRoute.Type

export class RoutesApi extends HttpApiGroup.make("routes")
  .add(
    HttpApiEndpoint.post("create", "/routes")
      .setPayload(CreateRoute)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Ok(Route, "Route"), { status: 201 })
      .addError(Wire.NotFound)
      .addError(Wire.Forbidden)
      .addError(Wire.Conflict)
      .annotate(OpenApi.Summary, "Bind a recipient pattern to an endpoint or a function")
  )
  .add(
    HttpApiEndpoint.get("list", "/routes")
      .setUrlParams(ListQuery)
      .addSuccess(OkList(Route, "Route"))
      .annotate(OpenApi.Summary, "Routes, newest first")
  )
  .add(
    HttpApiEndpoint.patch("update", "/routes/:id")
      .setPath(IdPath)
      .setPayload(UpdateRoute)
      .addSuccess(Ok(Route, "Route"))
      .addError(Wire.NotFound)
      .addError(Wire.Forbidden)
      .addError(Wire.Conflict)
      .annotate(OpenApi.Summary, "Change a route's pattern or target")
  )
  .add(
    HttpApiEndpoint.del("remove", "/routes/:id")
      .setPath(IdPath)
      .addSuccess(Ok(Route, "Route"))
      .addError(Wire.NotFound)
      .annotate(OpenApi.Summary, "Delete a route")
  )
  .middleware(Authentication)
  .annotate(
    OpenApi.Description,
    "Recipient routes: an explicit route (exact before wildcard, most specific wildcard first) wins over the " +
      "domain's default endpoint, which wins over the organization fallback"
  )
{}
