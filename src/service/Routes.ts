/**
 * Routes outside the enveloped `/v1` contract: `GET /` (where to start), the agent discovery
 * document `/auth.md`, RFC 9728 protected-resource metadata and RFC 8414 authorization-server
 * metadata, the OpenAPI document and the API reference at `/docs`.
 */
import { HttpApiBuilder, HttpServerResponse, OpenApi } from "@effect/platform"
import { Effect } from "effect"
import { MailroomApi } from "../Api.js"
import { AppConfig } from "../platform/Config.js"
import { PREFIX } from "../platform/Secrets.js"
import { TOOLS } from "../mcp/Tools.js"
import { llmsTxt } from "./LlmsTxt.js"
import { docsContentSecurityPolicy, docsPage, scalarBundle, staticAsset } from "./Docs.js"

export const authMarkdown = (base: string) => `# Mailroom: getting a credential

Mailroom is email infrastructure for AI agents. The API lives at \`${base}/v1\`; every call except the
ones listed below needs \`Authorization: Bearer <credential>\`. A credential is either an API key
(\`${PREFIX.apiKey}…\`) or an OAuth access token (\`${PREFIX.accessToken}…\`), each scoped to one organization.

## 0. Before any credential: the demo sandbox

\`GET ${base}/v1/demo/account\`, \`/v1/demo/emails\`, \`/v1/demo/emails/{id}\`, \`/v1/demo/threads\`,
\`/v1/demo/threads/{id}\`, \`/v1/demo/search?q=…\` and \`/v1/demo/webhooks/deliveries\` need no credential. They answer a synthetic
agent mailbox (the same every time, never anyone's real mail) in exactly the shapes of the same paths
without \`/demo\`, so a client can be written and tried before signing up. \`POST ${base}/v1/demo/send-mail\`
validates a send exactly like \`/v1/send-mail\` (from \`agent@demo.example\`) and answers the sent email
without sending anything. The sandbox has its
own limit of 60 requests per 60 s per client address.

## 1. Fastest: an emailless agent account (no person needed)

\`\`\`http
POST ${base}/v1/agent/accounts
Content-Type: application/json

{"terms_accepted": true, "device_name": "my-agent"}
\`\`\`

The response's \`data.api_key\` is shown once: store it. \`data.address\` is the managed inbox the agent
receives mail at. The \`agent\` plan is reply-only; \`data.upgrade.claim_path\` explains how a person
claims the account later (\`POST /v1/agent/claim/start\` with their email, then \`/v1/agent/claim/verify\`).

## 2. An account tied to an email address

1. \`POST ${base}/v1/agent/signup/start\` with \`{"email": "...", "terms_accepted": true}\` → a
   \`signup_token\`; a 6-digit code is mailed to the address.
2. \`POST ${base}/v1/agent/signup/verify\` with \`{"signup_token": "...", "verification_code": "123456"}\`
   → a token set (\`access_token\`, \`refresh_token\`, \`expires_in\`, \`orgs\`). Pass \`org_id\` to choose a
   workspace when the address belongs to several.

The CLI flavour is \`/v1/cli/signup/start\`, \`/resend\` and \`/verify\`.

## 3. A person approves a CLI or agent in the browser (device login, RFC 8628)

1. \`POST ${base}/v1/cli/login/start\` → \`device_code\`, \`user_code\`, \`verification_uri_complete\`, \`interval\`.
2. Show the person \`verification_uri_complete\` (${base}/device?user_code=…); they sign in and approve.
3. Poll \`POST ${base}/v1/cli/login/poll\` with \`{"device_code": "..."}\` no faster than \`interval\` seconds.
   \`authorization_pending\` means keep polling, \`slow_down\` means add 5 s, \`access_denied\` and
   \`expired_token\` are final. Success returns the token set once.

## Using and renewing the credential

- Send \`Authorization: Bearer <access_token or api_key>\`. A missing or bad credential answers 401
  \`unauthorized\` with \`WWW-Authenticate\` pointing at \`${base}/.well-known/oauth-protected-resource\`.
- Access tokens expire after \`expires_in\` seconds; exchange the refresh token for a new set with
  \`POST ${base}/v1/cli/token/refresh\` and \`{"refresh_token": "..."}\` (the refresh token rotates; the old one stops working). \`POST /v1/cli/logout\` revokes an OAuth grant.
- Limits: 120 requests per 60 s per organization (\`ratelimit-*\` headers on every response; 429 carries
  \`Retry-After\`). Every POST accepts \`Idempotency-Key\` so retries are safe.
- Errors are \`{"success": false, "error": {"code", "message", "details"?, "gates"?}}\`: branch on \`code\`.

Machine-readable: \`${base}/v1/discovery\` (public operations), \`${base}/v1/openapi.json\`, docs at \`${base}/docs\`,
an overview for language models at \`${base}/llms.txt\`, and MCP tools at \`${base}/mcp\`.
`

export const protectedResourceMetadata = (base: string) => ({
  resource: `${base}/v1`,
  resource_name: "Mailroom API",
  authorization_servers: [base],
  bearer_methods_supported: ["header"],
  resource_documentation: `${base}/auth.md`
})

export const authorizationServerMetadata = (base: string) => ({
  issuer: base,
  device_authorization_endpoint: `${base}/v1/cli/login/start`,
  token_endpoint: `${base}/v1/cli/login/poll`,
  grant_types_supported: ["urn:ietf:params:oauth:grant-type:device_code", "refresh_token"],
  response_types_supported: [],
  token_endpoint_auth_methods_supported: ["none"],
  service_documentation: `${base}/auth.md`
})

/** `GET /`: a pointer to everything a newcomer (person or agent) reads first. */
export const rootDocument = (base: string) => ({
  name: "Mailroom",
  description: "Email infrastructure for AI agents. The API lives under /v1.",
  docs: `${base}/docs`,
  discovery: `${base}/v1/discovery`,
  auth: `${base}/auth.md`,
  openapi: `${base}/v1/openapi.json`,
  llms_txt: `${base}/llms.txt`,
  mcp: `${base}/mcp`,
  health: `${base}/v1/health`
})

export const ServiceRoutesLive = HttpApiBuilder.Router.use((router) =>
  Effect.gen(function*() {
    const config = yield* AppConfig
    const base = config.publicBaseUrl
    const markdown = authMarkdown(base)
    const spec = OpenApi.fromApi(MailroomApi)
    yield* router.get(
      "/auth.md",
      Effect.succeed(HttpServerResponse.text(markdown, { contentType: "text/markdown; charset=utf-8" }))
    )
    yield* router.get(
      "/.well-known/oauth-protected-resource",
      HttpServerResponse.json(protectedResourceMetadata(base))
    )
    yield* router.get(
      "/.well-known/oauth-authorization-server",
      HttpServerResponse.json(authorizationServerMetadata(base))
    )
    yield* router.get("/v1/openapi.json", HttpServerResponse.json(spec))
    const llms = llmsTxt(base, spec as Parameters<typeof llmsTxt>[1], markdown, TOOLS)
    yield* router.get("/llms.txt", Effect.succeed(HttpServerResponse.text(llms, { contentType: "text/markdown; charset=utf-8" })))
    yield* router.get("/", HttpServerResponse.json(rootDocument(base)))

    const script = staticAsset(scalarBundle(), "text/javascript; charset=utf-8", {
      // The URL names the content's hash, so a cached copy never goes stale.
      "cache-control": "public, max-age=31536000, immutable"
    })
    const page = staticAsset(docsPage(spec, `/docs/scalar.js?v=${script.tag}`), "text/html; charset=utf-8", {
      "cache-control": "no-cache",
      "content-security-policy": docsContentSecurityPolicy(new URL(base).origin)
    })
    yield* router.get("/docs", page.respond)
    yield* router.get("/docs/scalar.js", script.respond)
  })
)
