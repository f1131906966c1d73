/** Contract of the Filters area. */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { DateTimeString, IdempotencyHeaders, IdPath, Ok, OkList, strict } from "../contract/Envelope.js"
import { Wire } from "../contract/Errors.js"
import { ListQuery } from "../contract/Paging.js"
import { Authentication } from "../contract/Security.js"
import { REGISTRY_NAME } from "../registries/Api.js"
import { normalizePattern, parsePattern, PATTERN_MAX_LENGTH } from "../mail/SenderPatterns.js"
import { SignalName } from "../mail/Trust.js"

export const FilterType = Schema.Literal("whitelist", "blocklist", "registry", "quarantine").annotations({
  description: "`whitelist`: admit these senders; `blocklist`: refuse them; `registry`: admit senders verified as a " +
    "published entry of the registry named by `pattern` (an allow rule like `whitelist`); `quarantine`: hold back mail " +
    "raising any of `signals` (from senders matching `pattern`, when given): stored, not delivered, until released"
})
export type FilterType = typeof FilterType.Type

export const Filter = Schema.Struct({
  id: Schema.UUID,
  type: FilterType,
  pattern: Schema.NullOr(Schema.String).annotations({ description: "null only for a quarantine filter of any sender" }),
  signals: Schema.optionalWith(Schema.Array(SignalName), { exact: true }).annotations({
    description: "quarantine filters only: the trust signals that quarantine (any of them)"
  }),
  domain_id: Schema.NullOr(Schema.UUID),
  enabled: Schema.Boolean,
  created_at: DateTimeString,
  updated_at: DateTimeString
}).annotations({ identifier: "Filter" })
export type Filter = typeof Filter.Type

/** Why `pattern` does not fit a filter of `type` (after trimming and lowercasing); `undefined` when it does. */
export const patternProblem = (type: FilterType, raw: string): string | undefined => {
  const p = normalizePattern(raw)
  if (p.length === 0) return "must not be empty"
  if (p.length > PATTERN_MAX_LENGTH) return `must be at most ${PATTERN_MAX_LENGTH} characters`
  if (type === "registry") {
    return REGISTRY_NAME.test(p) ? undefined : "must be a registry name (3-64 characters of a-z, 0-9 and -)"
  }
  return parsePattern(p) !== undefined
    ? undefined
    : "must be a sender address (alice@acme.com), a domain (@acme.com) or subdomains (*.acme.com)"
}

export const CreateFilter = strict(Schema.Struct({
  type: FilterType,
  pattern: Schema.optionalWith(Schema.String, { exact: true }).annotations({
    description: "whitelist, blocklist and quarantine: alice@acme.com, @acme.com or *.acme.com; registry: a registry's name. " +
      "Trimmed and lowercased; at most 500 characters. Required except for quarantine (absent: every sender)"
  }),
  signals: Schema.optionalWith(Schema.Array(SignalName).pipe(Schema.minItems(1), Schema.maxItems(7)), { exact: true }).annotations({
    description: "quarantine only (required there): trust signals that quarantine the mail, any of them"
  }),
  domain_id: Schema.optionalWith(Schema.NullOr(Schema.UUID), { exact: true }).annotations({
    description: "one of the organization's domains (paid plans); omitted or null: organization-wide"
  })
})).pipe(
  Schema.filter((b) => {
    if (b.type === "quarantine") {
      if (b.signals === undefined) return { path: ["signals"], message: "a quarantine filter needs at least one signal" }
      if (b.pattern === undefined) return true
    } else if (b.signals !== undefined) {
      return { path: ["signals"], message: "only quarantine filters take signals" }
    }
    if (b.pattern === undefined) return { path: ["pattern"], message: "is required" }
    const problem = patternProblem(b.type, b.pattern)
    return problem === undefined || { path: ["pattern"], message: problem }
  }),
  Schema.annotations({ identifier: "CreateFilter" })
)

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
