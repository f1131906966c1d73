/** Contract of templates: installable functions that ship with the service (`templates/<slug>/`). */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { allErrors, IdempotencyHeaders, Ok, OkList, strict } from "../contract/Envelope.js"
import { Wire } from "../contract/Errors.js"
import { Authentication } from "../contract/Security.js"
import { Endpoint } from "../endpoints/Api.js"
import { FunctionInfo, FunctionName } from "../functions/Api.js"
import { Route } from "../routes/Api.js"
import { Wake } from "../wake/Api.js"

export const TemplateSlug = Schema.String.pipe(
  Schema.pattern(/^[a-z0-9-]{1,64}$/, { message: () => "must be a template slug: 1-64 of a-z, 0-9 and -" })
)

export const Template = Schema.Struct({
  slug: Schema.String,
  name: Schema.String,
  description: Schema.String,
  event_types: Schema.Array(Schema.String).annotations({ description: "the events its endpoint subscribes to" }),
  required_secrets: Schema.Array(Schema.String).annotations({ description: "secrets the install must give" }),
  optional_secrets: Schema.Array(Schema.String),
  version: Schema.String
}).annotations({ identifier: "Template" })
export type Template = typeof Template.Type

/** A schedule a template's install creates for its function (one of `every` or `cron`). */
export const TemplateWake = Schema.Struct({
  command: Schema.Struct({ type: Schema.String, payload: Schema.optional(Schema.Unknown) }),
  every: Schema.optional(Schema.String),
  cron: Schema.optional(Schema.String)
}).annotations({ identifier: "TemplateWake" })
export type TemplateWake = typeof TemplateWake.Type

export const TemplateDetail = Schema.Struct({
  ...Template.fields,
  wakes: Schema.Array(TemplateWake).annotations({ description: "wakes the install creates for the function" }),
  code: Schema.String.annotations({ description: "the ES module the install deploys" }),
  readme: Schema.String.annotations({ description: "Markdown" })
}).annotations({ identifier: "TemplateDetail" })
export type TemplateDetail = typeof TemplateDetail.Type

export const InstallTemplate = strict(Schema.Struct({
  name: Schema.optionalWith(FunctionName, { exact: true }).annotations({ description: "the function's name (default: the slug)" }),
  secrets: Schema.optionalWith(Schema.Record({ key: Schema.String, value: Schema.String }), { exact: true }).annotations({
    description: "NAME: value for the function; every required secret of the template must be given"
  }),
  route: Schema.optionalWith(strict(Schema.Struct({ pattern: Schema.String })), { exact: true }).annotations({
    description: "route mail for this address pattern to the function (a route-target endpoint); without it the " +
      "function's endpoint is the organization-wide one"
  })
})).annotations({ identifier: "InstallTemplate" })
export type InstallTemplate = typeof InstallTemplate.Type

export const Installed = Schema.Struct({
  function: FunctionInfo,
  endpoint: Endpoint,
  route: Schema.NullOr(Route),
  wakes: Schema.Array(Wake).annotations({ description: "the wakes the template schedules for its function" })
}).annotations({ identifier: "InstalledTemplate" })
export type Installed = typeof Installed.Type

const SlugPath = allErrors(Schema.Struct({ slug: TemplateSlug }))

export class TemplatesApi extends HttpApiGroup.make("templates")
  .add(
    HttpApiEndpoint.get("list", "/templates")
      .addSuccess(OkList(Template, "Template"))
      .annotate(OpenApi.Summary, "Installable function templates (no credential needed)")
  )
  .add(
    HttpApiEndpoint.get("get", "/templates/:slug")
      .setPath(SlugPath)
      .addSuccess(Ok(TemplateDetail, "TemplateDetail"))
      .addError(Wire.NotFound)
      .annotate(OpenApi.Summary, "A template with its code and README (no credential needed)")
  )
  .add(
    HttpApiEndpoint.post("install", "/templates/:slug/install")
      .setPath(SlugPath)
      .setPayload(InstallTemplate)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Ok(Installed, "InstalledTemplate"), { status: 201 })
      .addError(Wire.NotFound)
      .addError(Wire.Forbidden)
      .addError(Wire.Conflict)
      .middleware(Authentication)
      .annotate(
        OpenApi.Summary,
        "Install a template: its function (secrets checked), its endpoint, its wakes and optionally a route, in one transaction"
      )
  )
  .annotate(
    OpenApi.Description,
    "Templates are working functions that ship with the service, each verifying the webhook signature before " +
      "acting: read them without a credential, install one with the `functions` entitlement."
  )
{}
