/** Contract of the operational endpoints: health probe and the unauthenticated discovery document. */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { Ok } from "../contract/Envelope.js"
import { Wire } from "../contract/Errors.js"

export const Health = Schema.Struct({
  status: Schema.Literal("ok"),
  database: Schema.Literal("ok"),
  version: Schema.String
}).annotations({ identifier: "Health" })

/** The health probe's success body: the envelope around `Health`. */
export const HealthResponse = Ok(Health, "Health")

export const PublicOperation = Schema.Struct({
  method: Schema.String,
  path: Schema.String,
  operation_id: Schema.String,
  summary: Schema.NullOr(Schema.String)
}).annotations({ identifier: "PublicOperation" })

export const Discovery = Schema.Struct({
  name: Schema.String,
  base_url: Schema.String.annotations({ description: "API base, ending in /v1" }),
  api_version: Schema.String,
  openapi_url: Schema.String,
  docs_url: Schema.String,
  auth_md_url: Schema.String,
  llms_txt_url: Schema.String.annotations({ description: "an overview for language models (llmstxt.org), generated from the OpenAPI document and /auth.md" }),
  mcp_url: Schema.String.annotations({ description: "the Model Context Protocol endpoint (Streamable HTTP, the same credentials)" }),
  protected_resource_metadata_url: Schema.String,
  authentication: Schema.Struct({
    scheme: Schema.Literal("Bearer"),
    header: Schema.String,
    credential_prefixes: Schema.Struct({ api_key: Schema.String, access_token: Schema.String }),
    how_to_get_a_credential: Schema.Array(Schema.String)
  }),
  demo: Schema.Struct({
    base_url: Schema.String.annotations({ description: "the sandbox's operations live under it, e.g. GET <base_url>/emails" }),
    description: Schema.String
  }).annotations({ description: "A public sandbox to try the API before having a credential" }),
  public_operations: Schema.Array(PublicOperation).annotations({
    description: "Every operation callable without a token"
  })
}).annotations({ identifier: "Discovery" })

export class ServiceApi extends HttpApiGroup.make("service")
  .add(
    HttpApiEndpoint.get("health", "/health")
      .addSuccess(HealthResponse)
      .addError(Wire.ServiceUnavailable)
      .annotate(OpenApi.Summary, "Health probe; checks the database")
  )
  .add(
    HttpApiEndpoint.get("discovery", "/discovery")
      .addSuccess(Ok(Discovery, "Discovery"))
      .annotate(OpenApi.Summary, "Entry point for agents: base URL, how to get credentials, public operations")
  )
  .annotate(OpenApi.Description, "Operational endpoints")
{}
