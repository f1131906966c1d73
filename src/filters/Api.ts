/** Contract of the Filters area. */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { DateTimeString, IdempotencyHeaders, IdPath, Ok, OkList, strict } from "../contract/Envelope.js"
import { Wire } from "../contract/Errors.js"
import { ListQuery } from "../contract/Paging.js"
import { Authentication } from "../contract/Security.js"
import { normalizePattern, parsePattern, PATTERN_MAX_LENGTH } from "./Patterns.js"

export const FilterType = Schema.Literal("whitelist", "blocklist")

export const Filter = Schema.Struct({
  id: Schema.UUID,
  type: FilterType,
  pattern: Schema.String,
  domain_id: Schema.NullOr(Schema.UUID),
  enabled: Schema.Boolean,
  created_at: DateTimeString,
  updated_at: DateTimeString
}).annotations({ identifier: "Filter" })
export type Filter = typeof Filter.Type

export const Pattern = Schema.String.pipe(
  Schema.filter((raw) => {
    const p = normalizePattern(raw)
    if (p.length === 0) return "must not be empty"
    if (p.length > PATTERN_MAX_LENGTH) return `must be at most ${PATTERN_MAX_LENGTH} characters`
    return parsePattern(p) !== undefined ||
      "must be a sender address (alice@acme.com), a domain (@acme.com) or subdomains (*.acme.com)"
  })
).annotations({
  description: "alice@acme.com, @acme.com or *.acme.com; trimmed and lowercased; at most 500 characters"
})

export const CreateFilter = strict(Schema.Struct({
  type: FilterType,
  pattern: Pattern,
  domain_id: Schema.optionalWith(Schema.NullOr(Schema.UUID), { exact: true }).annotations({
    description: "one of the organization's domains (paid plans); omitted or null: organization-wide"
  })
})).annotations({ identifier: "CreateFilter" })

export const UpdateFilter = strict(Schema.Struct({ enabled: Schema.Boolean })).annotations({
  identifier: "UpdateFilter",
  description: "only enabled can change; delete and recreate to change a pattern or type"
})

export class FiltersApi extends HttpApiGroup.make("filters")
  .add(
    HttpApiEndpoint.post("create", "/filters")
      .setPayload(CreateFilter)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Ok(Filter, "Filter"), { status: 201 })
      .addError(Wire.NotFound)
      .addError(Wire.Forbidden)
      .addError(Wire.Conflict)
      .annotate(OpenApi.Summary, "Create a sender allow/block filter (created enabled)")
  )
  .add(
    HttpApiEndpoint.get("list", "/filters")
      .setUrlParams(ListQuery)
      .addSuccess(OkList(Filter, "Filter"))
      .annotate(OpenApi.Summary, "Filters, newest first")
  )
  .add(
    HttpApiEndpoint.patch("update", "/filters/:id")
      .setPath(IdPath)
      .setPayload(UpdateFilter)
      .addSuccess(Ok(Filter, "Filter"))
      .addError(Wire.NotFound)
      .annotate(OpenApi.Summary, "Enable or disable a filter")
  )
  .add(
    HttpApiEndpoint.del("remove", "/filters/:id")
      .setPath(IdPath)
      .addSuccess(Ok(Filter, "Filter"))
      .addError(Wire.NotFound)
      .annotate(OpenApi.Summary, "Delete a filter")
  )
  .middleware(Authentication)
  .annotate(OpenApi.Description, "Organization-wide or per-domain sender allow/block lists")
{}
