/** Handlers of the operational endpoints. */
import { OpenApi } from "@effect/platform"
import { Effect, Layer, Schema } from "effect"
import { MailroomApi } from "../Api.js"
import { PREFIX } from "../platform/Secrets.js"
import { AppConfig } from "../platform/Config.js"
import { VERSION } from "../contract/Version.js"
import * as ApiGroup from "../platform/ApiGroup.js"
import { HealthCheck } from "../platform/HealthLane.js"
import { HealthResponse } from "./Api.js"
import { DatabaseHealth } from "./Health.js"

const healthy = { status: "ok" as const, database: "ok" as const, version: VERSION }

/**
 * The probe and answer of the health lane (platform/HealthLane.ts), which answers `GET /v1/health`
 * at the Node server: the same check as the handler below, the body its success schema encodes.
 */
export const HealthCheckLive = Layer.effect(
  HealthCheck,
  Effect.map(DatabaseHealth, ({ probe }) => ({
    probe,
    healthyBody: JSON.stringify(Schema.encodeSync(HealthResponse)(healthy))
  }))
).pipe(Layer.provide(DatabaseHealth.Default))

/** Every operation of the contract that needs no credential, read off the derived OpenAPI document. */
export const publicOperations = () => {
  const spec = OpenApi.fromApi(MailroomApi) as unknown as {
    paths: Record<string, Record<string, { operationId: string; summary?: string; security?: Array<unknown> }>>
  }
  const out: Array<{ method: string; path: string; operation_id: string; summary: string | null }> = []
  for (const [path, item] of Object.entries(spec.paths)) {
    for (const [method, op] of Object.entries(item)) {
      if (op.security === undefined || op.security.length === 0) {
        out.push({ method: method.toUpperCase(), path, operation_id: op.operationId, summary: op.summary ?? null })
      }
    }
  }
  return out
}

export const ServiceHttpLive = ApiGroup.group(MailroomApi, "service", (handlers) =>
  Effect.gen(function*() {
    const { probe } = yield* DatabaseHealth
    const config = yield* AppConfig
    const base = config.publicBaseUrl
    const operations = publicOperations()
    return handlers
      .handle("health", () => Effect.as(probe, healthy))
      .handle("discovery", () =>
        Effect.succeed({
          name: "Mailroom",
          base_url: `${base}/v1`,
          api_version: "v1",
          openapi_url: `${base}/v1/openapi.json`,
          docs_url: `${base}/docs`,
          auth_md_url: `${base}/auth.md`,
          llms_txt_url: `${base}/llms.txt`,
          mcp_url: `${base}/mcp`,
          protected_resource_metadata_url: `${base}/.well-known/oauth-protected-resource`,
          authentication: {
            scheme: "Bearer" as const,
            header: "Authorization: Bearer <credential>",
            credential_prefixes: { api_key: PREFIX.apiKey, access_token: PREFIX.accessToken },
            how_to_get_a_credential: [
              `POST ${base}/v1/agent/accounts with {"terms_accepted":true}: an emailless agent account and its API key, at once`,
              `POST ${base}/v1/agent/signup/start then /v1/agent/signup/verify: an account tied to an email address`,
              `POST ${base}/v1/cli/login/start then poll /v1/cli/login/poll while a person approves in the browser`,
              `Read ${base}/auth.md for the whole flow`
            ]
          },
          demo: {
            base_url: `${base}/v1/demo`,
            description: "No credential needed: GET /demo/account, /demo/emails, /demo/emails/{id}, /demo/threads, " +
              "/demo/threads/{id}, /demo/search and /demo/webhooks/deliveries answer synthetic, deterministic data with the " +
              "same response schemas as the real operations; POST /demo/send-mail validates like /send-mail and sends " +
              "nothing. Limited per client address on a window of its own."
          },
          public_operations: operations
        }))
  })).pipe(Layer.provide(DatabaseHealth.Default))
