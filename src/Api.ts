/**
 * The Mailroom `/v1` contract: every group, the API-wide errors and the OpenAPI metadata.
 * Importable by the server, the CLI and tests without pulling in any server code.
 */
import { HttpApi, OpenApi } from "@effect/platform"
import { Wire } from "./contract/Errors.js"
import { VERSION } from "./contract/Version.js"
import { AccountApi } from "./account/Api.js"
import { DeliveriesApi } from "./deliveries/Api.js"
import { DownloadsApi, EmailsApi } from "./emails/Api.js"
import { QuarantineApi } from "./trust/Api.js"
import { AgentAccountsApi, AuthApi, AuthSessionApi } from "./identity/Api.js"
import { ServiceApi } from "./service/Api.js"
import { DomainsApi } from "./domains/Api.js"
import { EndpointsApi } from "./endpoints/Api.js"
import { FiltersApi } from "./filters/Api.js"
import { InboxApi } from "./inbox/Api.js"
import { InboxesApi } from "./inboxes/Api.js"
import { RoutesApi } from "./routes/Api.js"
import { ListenApi } from "./listen/Api.js"
import { FunctionsApi } from "./functions/Api.js"
import { MemoriesApi } from "./memories/Api.js"
import { TemplatesApi } from "./templates/Api.js"
import { WakesApi } from "./wake/Api.js"
import { RegistriesApi } from "./registries/Api.js"
import { PaymentsApi } from "./payments/Api.js"
import { DemoApi } from "./demo/Api.js"
import { ThreadsApi } from "./threads/Api.js"
import { SearchApi } from "./search/Api.js"
import { SendingApi } from "./sending/Api.js"
import { SuppressionsApi } from "./bounces/Api.js"
import { EventsApi } from "./events/Api.js"
import { webhooksSection } from "./webhooks/Events.js"
import { ApiKeysApi } from "./apikeys/Api.js"
import { DraftsApi } from "./drafts/Api.js"

type SchemaRef = { readonly $ref?: string }
type MediaType = { schema?: { anyOf?: Array<SchemaRef> } | SchemaRef }
type Operation = { responses?: Record<string, { content?: Record<string, MediaType> }> }
type OpenApiDocument = {
  paths?: Record<string, Record<string, Operation>>
  components?: { schemas?: Record<string, unknown> }
}

/**
 * HttpApi always declares its built-in `HttpApiDecodeError` (400); the server turns every decode
 * failure into `validation_error`, so the derived document must not advertise the built-in shape.
 */
const dropBuiltinDecodeError = (spec: OpenApiDocument): OpenApiDocument => {
  const isBuiltin = (s: SchemaRef) => s.$ref === "#/components/schemas/HttpApiDecodeError"
  for (const item of Object.values(spec.paths ?? {})) {
    for (const op of Object.values(item)) {
      const media = op.responses?.["400"]?.content?.["application/json"]
      if (!media?.schema || !("anyOf" in media.schema) || !Array.isArray(media.schema.anyOf)) continue
      const rest = media.schema.anyOf.filter((s) => !isBuiltin(s))
      media.schema = rest.length === 1 ? rest[0]! : { anyOf: rest }
    }
  }
  for (const k of ["HttpApiDecodeError", "Issue", "PropertyKey"]) delete spec.components?.schemas?.[k]
  return stripAnyIds(spec) as OpenApiDocument
}

type Response = { description?: string; content?: Record<string, MediaType> }

/** An error envelope component like the derived ones, for a code no endpoint declares itself. */
const envelopeComponent = (code: string, like: unknown): unknown => {
  const copy = JSON.parse(JSON.stringify(like)) as {
    description?: string
    properties: { error: { properties: { code: { enum: Array<string> } } } }
  }
  copy.properties.error.properties.code.enum = [code]
  copy.description = code
  return copy
}

/** Adds an error envelope to an operation's answer for `status` (beside what is declared there). */
const declare = (op: Operation & { responses: Record<string, Response> }, status: string, component: string, code: string) => {
  const ref = { $ref: `#/components/schemas/${component}` }
  const existing = op.responses[status]
  if (existing === undefined) {
    op.responses[status] = { description: code, content: { "application/json": { schema: ref } } }
    return
  }
  const media = existing.content?.["application/json"]
  if (media?.schema === undefined) return
  const refs = "anyOf" in media.schema && Array.isArray(media.schema.anyOf) ? media.schema.anyOf : [media.schema as SchemaRef]
  if (refs.some((r) => r.$ref === ref.$ref)) return
  media.schema = { anyOf: [...refs, ref] }
  existing.description = `${existing.description ?? ""}, ${code}`
}

/**
 * Statuses the request pipeline answers before or around any handler, declared on the operations
 * they can reach (test/support/http.ts fails a test on any answer its operation does not declare):
 * - 503 `service_unavailable` on every operation (load shedding past MAX_INFLIGHT_REQUESTS, and the
 *   health check while the process admits nothing);
 * - 415 `unsupported_media_type` on every operation that reads a body, and 413 `payload_too_large`
 *   (a body past the operation's limit) on those and on every other POST, PATCH and PUT;
 * - 409 `conflict` on every POST (an Idempotency-Key still running, reused with another body, or
 *   replayed to a caller without a credential when its result carried one);
 * - 200 beside 201 on `POST /endpoints` (a function's existing endpoint is returned).
 * A known path with a method it does not have is 405 `method_not_allowed` with `Allow` (no
 * operation to declare it on: see the document's description); an unknown path is 404.
 */
const declarePipelineStatuses = (spec: OpenApiDocument): OpenApiDocument => {
  const schemas = spec.components?.schemas ?? {}
  const like = schemas["ConflictError"]
  if (like !== undefined && schemas["UnsupportedMediaTypeError"] === undefined) {
    schemas["UnsupportedMediaTypeError"] = envelopeComponent("unsupported_media_type", like)
  }
  if (like !== undefined && schemas["PayloadTooLargeError"] === undefined) {
    schemas["PayloadTooLargeError"] = envelopeComponent("payload_too_large", like)
  }
  for (const [path, item] of Object.entries(spec.paths ?? {})) {
    for (const [method, raw] of Object.entries(item)) {
      const op = raw as Operation & { responses: Record<string, Response>; requestBody?: unknown }
      if (op.responses === undefined) continue
      declare(op, "503", "ServiceUnavailableError", "service_unavailable")
      if (op.requestBody !== undefined) declare(op, "415", "UnsupportedMediaTypeError", "unsupported_media_type")
      // The size limit is checked from the request's head, before any operation reads its body: a POST,
      // PATCH or PUT that declares none still answers 413 to a body past it.
      if (op.requestBody !== undefined || method === "post" || method === "patch" || method === "put") {
        declare(op, "413", "PayloadTooLargeError", "payload_too_large")
      }
      if (method === "post") declare(op, "409", "ConflictError", "conflict")
      if (method === "post" && path === "/v1/endpoints" && op.responses["201"] !== undefined && op.responses["200"] === undefined) {
        op.responses["200"] = { ...op.responses["201"], description: "a function's existing endpoint (not created again)" }
      }
    }
  }
  return spec
}

/** OpenAPI 3.1 `webhooks`: every event payload, from the schemas the sender encodes with. */
const withWebhooks = (spec: OpenApiDocument): OpenApiDocument => {
  const { schemas, webhooks } = webhooksSection()
  spec.components = { ...spec.components, schemas: { ...spec.components?.schemas, ...(stripAnyIds(schemas) as Record<string, unknown>) } }
  return { ...spec, webhooks } as OpenApiDocument
}

/** `Schema.Unknown` emits `{$id:"/schemas/unknown"}` at every use; repeated `$id`s make the document invalid. */
const stripAnyIds = (node: unknown): unknown => {
  if (Array.isArray(node)) return node.map(stripAnyIds)
  if (node === null || typeof node !== "object") return node
  const obj = node as Record<string, unknown>
  if (typeof obj.$id === "string" && obj.$id.startsWith("/schemas/")) return {}
  return Object.fromEntries(Object.entries(obj).map(([k, v]) => [k, stripAnyIds(v)]))
}

export class MailroomApi extends HttpApi.make("mailroom")
  .add(ServiceApi)
  .add(AccountApi)
  .add(AgentAccountsApi)
  .add(DomainsApi)
  .add(EndpointsApi)
  .add(FiltersApi)
  .add(RoutesApi)
  .add(EmailsApi)
  .add(QuarantineApi)
  .add(InboxApi)
  .add(InboxesApi)
  .add(DownloadsApi)
  .add(DeliveriesApi)
  .add(AuthApi)
  .add(AuthSessionApi)
  .add(ListenApi)
  .add(FunctionsApi)
  .add(MemoriesApi)
  .add(TemplatesApi)
  .add(WakesApi)
  .add(RegistriesApi)
  .add(PaymentsApi)
  .add(DemoApi)
  .add(ThreadsApi)
  .add(SearchApi)
  .add(SendingApi)
  .add(SuppressionsApi)
  .add(EventsApi)
  .add(ApiKeysApi)
  .add(DraftsApi)
  .addError(Wire.ValidationError)
  .addError(Wire.RateLimited)
  .addError(Wire.InternalError)
  .prefix("/v1")
  .annotate(OpenApi.Title, "Mailroom API")
  .annotate(OpenApi.Version, VERSION)
  .annotate(
    OpenApi.Description,
    "Email infrastructure for AI agents. Every success is `{success:true,data,meta?}`; every error is " +
      "`{success:false,error:{code,message,details?,gates?}}`: branch on `code`. Authenticate with " +
      "`Authorization: Bearer <credential>` (API key `mr_live_…` or OAuth access token `mr_at_…`); " +
      "see /auth.md. Every POST accepts `Idempotency-Key`. Responses carry `ratelimit-*` headers. Every operation " +
      "may answer 429 `rate_limited` and 503 `service_unavailable` (at capacity; `Retry-After`); one that reads a body " +
      "415 `unsupported_media_type` for another Content-Type; a known path called with a method it does not have " +
      "answers 405 `method_not_allowed` with `Allow`."
  )
  .annotate(OpenApi.Transform, (spec) => withWebhooks(declarePipelineStatuses(dropBuiltinDecodeError(spec))))
{}
