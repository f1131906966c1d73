/** Contract of hosted functions: deployable ES modules run in workerd on inbound mail. */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { allErrors, DateTimeString, IdempotencyHeaders, Ok, OkList, strict } from "../contract/Envelope.js"
import { Wire } from "../contract/Errors.js"
import { ListQuery } from "../contract/Paging.js"
import { Authentication } from "../contract/Security.js"
import { FunctionPath, FunctionRef, isFunctionId } from "../contract/Functions.js"

export const CODE_MAX_BYTES = 1024 * 1024
export const MAX_SECRETS = 50
export const SECRET_VALUE_MAX_BYTES = 8 * 1024
export const SECRET_NAME = /^[A-Z][A-Z0-9_]{0,63}$/

export const FunctionName = Schema.String.pipe(
  Schema.pattern(/^[a-z0-9-]{1,64}$/, { message: () => "must be 1-64 characters of a-z, 0-9 and -" })
).annotations({ description: "1-64 of [a-z0-9-], unique in the organization" })

export { FunctionPath, FunctionRef, isFunctionId }

const Code = Schema.String.pipe(Schema.minLength(1, { message: () => "must not be empty" })).annotations({
  description: "the ES module source (at most 1 MiB): its default export has `async fetch(request, env)`"
})

export const FunctionInfo = Schema.Struct({
  id: Schema.UUID,
  name: Schema.String,
  version: Schema.Int.annotations({ description: "1, then +1 on every change of code or secrets" }),
  code_sha256: Schema.String,
  code_size_bytes: Schema.Int,
  secret_names: Schema.Array(Schema.String).annotations({ description: "sorted; values are never returned" }),
  endpoint_id: Schema.NullOr(Schema.UUID),
  created_at: DateTimeString,
  updated_at: DateTimeString,
  deployed_at: DateTimeString
}).annotations({ identifier: "Function" })
export type FunctionInfo = typeof FunctionInfo.Type

export const FunctionWithCode = Schema.Struct({ ...FunctionInfo.fields, code: Schema.String }).annotations({
  identifier: "FunctionWithCode"
})
export type FunctionWithCode = typeof FunctionWithCode.Type

export const CreateFunction = strict(Schema.Struct({
  name: FunctionName,
  code: Code,
  secrets: Schema.optionalWith(Schema.Record({ key: Schema.String, value: Schema.String }), { exact: true }).annotations({
    description: "NAME: value; names ^[A-Z][A-Z0-9_]{0,63}$, at most 50, values at most 8 KiB; never returned"
  }),
  endpoint: Schema.optionalWith(
    strict(Schema.Struct({
      is_route_target: Schema.optionalWith(Schema.Boolean, { exact: true }).annotations({
        description: "default true: mail reaches it through routes (and wakes) and it holds no default slot; " +
          "false makes it the organization-wide fallback (every mail without a route)"
      })
    })),
    { exact: true }
  ).annotations({
    description: "also create the function's endpoint, in the same transaction: if it cannot be made, no function is"
  }),
  route: Schema.optionalWith(strict(Schema.Struct({ pattern: Schema.String })), { exact: true }).annotations({
    description: "also route mail for this address pattern to the function (its endpoint is then a route target), " +
      "in the same transaction"
  })
})).annotations({ identifier: "CreateFunction" })
export type CreateFunction = typeof CreateFunction.Type

export const UpdateFunction = strict(Schema.Struct({
  name: Schema.optionalWith(FunctionName, { exact: true }),
  code: Schema.optionalWith(Code, { exact: true }),
  secrets: Schema.optionalWith(Schema.Record({ key: Schema.String, value: Schema.NullOr(Schema.String) }), { exact: true })
    .annotations({ description: "secrets to set; a value null removes that secret; others are kept" })
})).pipe(
  Schema.filter((b) => Object.keys(b).length > 0 || "at least one property is required"),
  Schema.annotations({ identifier: "UpdateFunction" })
)
export type UpdateFunction = typeof UpdateFunction.Type

export const InvokeFunction = strict(Schema.Struct({
  event: Schema.optionalWith(Schema.Record({ key: Schema.String, value: Schema.Unknown }), { exact: true }).annotations({
    description: "the payload to send (a JSON object); default a synthetic email.received event"
  })
})).annotations({ identifier: "InvokeFunction" })
export type InvokeFunction = typeof InvokeFunction.Type

export const InvocationStatus = Schema.String.annotations({
  description: "`ok`, `http_<status>`, `function_error`, `function_timeout` or `function_crashed`"
})

export const InvokeResult = Schema.Struct({
  invocation_id: Schema.NullOr(Schema.UUID).annotations({ description: "the recorded invocation (null if the function was deleted meanwhile)" }),
  status: InvocationStatus,
  status_code: Schema.NullOr(Schema.Int).annotations({ description: "the HTTP status the function answered" }),
  response_body: Schema.String.annotations({ description: "the first 2 KiB of the response" }),
  duration_ms: Schema.Int,
  logs: Schema.String.annotations({ description: "console output, at most 16 KiB" }),
  error: Schema.NullOr(Schema.String)
}).annotations({ identifier: "InvokeResult" })
export type InvokeResult = typeof InvokeResult.Type

export const Invocation = Schema.Struct({
  id: Schema.UUID,
  function_id: Schema.UUID,
  function_version: Schema.Int,
  delivery_id: Schema.NullOr(Schema.UUID).annotations({ description: "null for POST /functions/{id}/invoke" }),
  event_id: Schema.NullOr(Schema.String),
  event: Schema.NullOr(Schema.String),
  status: InvocationStatus,
  status_code: Schema.NullOr(Schema.Int),
  duration_ms: Schema.Int,
  logs: Schema.String.annotations({ description: "console output, at most 16 KiB, cut with a marker" }),
  error: Schema.NullOr(Schema.String),
  started_at: DateTimeString
}).annotations({ identifier: "Invocation" })
export type Invocation = typeof Invocation.Type

export class FunctionsApi extends HttpApiGroup.make("functions")
  .add(
    HttpApiEndpoint.post("create", "/functions")
      .setPayload(CreateFunction)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Ok(FunctionInfo, "Function"), { status: 201 })
      .addError(Wire.Forbidden)
      .addError(Wire.Conflict)
      .addError(Wire.NotFound)
      .annotate(OpenApi.Summary, "Deploy a function (the module is loaded in workerd first), with its endpoint and route if asked")
  )
  .add(
    HttpApiEndpoint.get("list", "/functions")
      .setUrlParams(ListQuery)
      .addSuccess(OkList(FunctionInfo, "Function"))
      .addError(Wire.Forbidden)
      .annotate(OpenApi.Summary, "Functions, newest first")
  )
  .add(
    HttpApiEndpoint.get("get", "/functions/:id")
      .setPath(FunctionPath)
      .addSuccess(Ok(FunctionWithCode, "FunctionWithCode"))
      .addError(Wire.NotFound)
      .addError(Wire.Forbidden)
      .annotate(OpenApi.Summary, "A function with its code")
  )
  .add(
    HttpApiEndpoint.patch("update", "/functions/:id")
      .setPath(FunctionPath)
      .setPayload(UpdateFunction)
      .addSuccess(Ok(FunctionInfo, "Function"))
      .addError(Wire.NotFound)
      .addError(Wire.Forbidden)
      .addError(Wire.Conflict)
      .annotate(OpenApi.Summary, "Redeploy: new name, code and/or secrets; the next invocation sees them")
  )
  .add(
    HttpApiEndpoint.del("remove", "/functions/:id")
      .setPath(FunctionPath)
      .addSuccess(Ok(FunctionInfo, "Function"))
      .addError(Wire.NotFound)
      .addError(Wire.Forbidden)
      .annotate(OpenApi.Summary, "Delete a function, deactivate its endpoint, delete its routes and memories")
  )
  .add(
    HttpApiEndpoint.post("invoke", "/functions/:id/invoke")
      .setPath(FunctionPath)
      .setPayload(InvokeFunction)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Ok(InvokeResult, "InvokeResult"))
      .addError(Wire.NotFound)
      .addError(Wire.Forbidden)
      .annotate(OpenApi.Summary, "Run the function now on a synthetic email.received event (or the given payload)")
  )
  .add(
    HttpApiEndpoint.get("invocations", "/functions/:id/invocations")
      .setPath(FunctionPath)
      .setUrlParams(ListQuery)
      .addSuccess(OkList(Invocation, "Invocation"))
      .addError(Wire.NotFound)
      .addError(Wire.Forbidden)
      .annotate(OpenApi.Summary, "Invocations of a function, newest first: outcome, duration, console output")
  )
  .middleware(Authentication)
  .annotate(
    OpenApi.Description,
    "Hosted functions: one ES module whose default export has `async fetch(request, env)`, run in workerd " +
      "(Cloudflare's open-source Workers runtime), one process per invocation. The request is a POST of the " +
      "event payload (with `event`) signed like a webhook; `env` holds the secrets, MAILROOM_WEBHOOK_SECRET, " +
      "MEMORY and ORG_MEMORY (Workers KV API) and MAILROOM (fetch `/v1/…` as the organization). Outcomes: " +
      "2xx delivered, `http_<status>`, `function_error`, `function_timeout` (FUNCTION_TIMEOUT wall clock, " +
      "`waitUntil` work included), `function_crashed`. Needs the `functions` entitlement."
  )
{}
