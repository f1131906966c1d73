/** Contract of API keys: scoped keys an organization makes for its agents and scripts. */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { DateTimeString, IdempotencyHeaders, IdPath, Ok, strict, Uuid } from "../contract/Envelope.js"
import { Wire } from "../contract/Errors.js"
import { Authentication, SCOPES, ScopeSchema } from "../contract/Security.js"

export const ApiKey = Schema.Struct({
  id: Uuid,
  name: Schema.NullOr(Schema.String),
  scopes: Schema.Array(ScopeSchema),
  inbox_ids: Schema.NullOr(Schema.Array(Uuid)).annotations({ description: "null: every inbox of the organization" }),
  created_at: DateTimeString,
  last_used_at: Schema.NullOr(DateTimeString).annotations({ description: "updated at most once a minute" })
}).annotations({ identifier: "ApiKey" })
export type ApiKey = typeof ApiKey.Type

export const CreatedApiKey = Schema.Struct({
  ...ApiKey.fields,
  api_key: Schema.String.annotations({ description: "the secret, shown only in this answer" })
}).annotations({ identifier: "CreatedApiKey" })

export const CreateApiKey = strict(Schema.Struct({
  name: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(80)),
  scopes: Schema.Array(ScopeSchema).pipe(Schema.minItems(1), Schema.maxItems(SCOPES.length)).annotations({
    description: `one or more of ${SCOPES.join(", ")}; admin is everything`
  }),
  inbox_ids: Schema.optionalWith(Schema.Array(Uuid).pipe(Schema.maxItems(100)), { exact: true }).annotations({
    description: "limit the key to these inboxes of the organization (GET /inboxes): it sees their mail only and sends only " +
      "as them, the first being its default from; absent or empty: every inbox (a limited maker's key inherits its limit)"
  })
})).annotations({ identifier: "CreateApiKey" })

export class ApiKeysApi extends HttpApiGroup.make("apiKeys")
  .add(
    HttpApiEndpoint.post("create", "/api-keys")
      .setPayload(CreateApiKey)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Ok(CreatedApiKey, "CreatedApiKey"), { status: 201 })
      .addError(Wire.Forbidden)
      .annotate(OpenApi.Summary, "Create an API key with scopes (never wider than the caller's); its secret is shown once")
  )
  .add(
    HttpApiEndpoint.get("list", "/api-keys")
      .addSuccess(Ok(Schema.Array(ApiKey), "ApiKeyList"))
      .annotate(OpenApi.Summary, "The organization's live API keys, newest first (never their secrets)")
  )
  .add(
    HttpApiEndpoint.del("revoke", "/api-keys/:id")
      .setPath(IdPath)
      .addSuccess(Ok(ApiKey, "ApiKey"))
      .addError(Wire.NotFound)
      .annotate(OpenApi.Summary, "Revoke an API key: it answers 401 from then on")
  )
  .middleware(Authentication)
  .annotate(OpenApi.Description, "Scoped API keys (managed with an admin-scoped credential)")
{}
