/**
 * `/mcp`: the Model Context Protocol over Streamable HTTP (JSON responses, no sessions), on
 * @effect/ai's McpServer. Each POST is one request of the API's pipeline (counted on the
 * organization's window, its credential resolved once); a missing or bad credential is the same 401
 * as `/v1`'s. A tool call runs its operation's request in process through the route the API registered for it
 * (Routes.ts), so validation, handlers, scopes, errors and idempotency are the operation's; its result is the
 * operation's response body, and an error answers `isError: true` with the error envelope. A
 * `tools/call` posted alone skips the RPC server (Direct.ts): same handler, same answer.
 */
import type { CallToolResult } from "@effect/ai/McpSchema"
import * as McpServer from "@effect/ai/McpServer"
import { Headers, HttpApi, HttpApiBuilder, HttpRouter, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import * as RpcSerialization from "@effect/rpc/RpcSerialization"
import * as RpcServer from "@effect/rpc/RpcServer"
import { Context, Effect, FiberRef, Layer, Option, Redacted } from "effect"
import { envelopeOf, InternalError, MethodNotAllowed } from "../contract/Errors.js"
import { Authentication } from "../contract/Security.js"
import { VERSION } from "../contract/Version.js"
import { creatingOperations, Idempotency } from "../platform/Idempotency.js"
import { ResolvedPrincipal } from "../platform/RequestContext.js"
import { dispatchAdmitted } from "../platform/RequestPipeline.js"
import { directCall } from "./Direct.js"
import { operationRoutes } from "./Routes.js"
import { failure, OUTPUT_SCHEMAS, registerTools, resultOf, type Run } from "./Register.js"
import { withOutputSchemas } from "./Serialization.js"

export const MCP_PATH = "/mcp"

const decoder = new TextDecoder()

/**
 * The inner request's source, as much of a web `Request` as the platform's request reads (its
 * method, URL and body; the headers are given to it directly): an undici `Request` (its URL, its
 * `Headers`, its body as a web stream read back) would be built and read on every call for nothing.
 */
const sourceOf = (method: string, url: string, body: string | undefined): Request => {
  const text = body ?? ""
  return {
    method,
    url,
    get body() {
      return body === undefined ? null : new Blob([body]).stream()
    },
    text: () => Promise.resolve(text),
    json: () => Promise.resolve().then(() => JSON.parse(text)),
    arrayBuffer: () => Promise.resolve(new TextEncoder().encode(text).buffer),
    formData: () => new Response(text, { headers: { "content-type": "application/json" } }).formData()
  } as unknown as Request
}

/** The registered tools' handlers by name, for the direct path; filled in once the tools are registered. */
class DirectRuns extends Context.Tag("mailroom/mcp/DirectRuns")<DirectRuns, Map<string, Run>>() {}

/** The tools, each calling its operation through the API's router. */
const ToolsLive = Layer.effectDiscard(Effect.gen(function*() {
  const { api } = yield* HttpApi.Api
  const createsResource = creatingOperations(api)
  const context = yield* Effect.context<HttpApiBuilder.Router | HttpApi.Api | HttpApiBuilder.Middleware>()
  const idempotency = yield* Idempotency
  // Built at the first call, when every route has been registered.
  const app = yield* Effect.cached(
    HttpApiBuilder.httpApp.pipe(HttpRouter.withRouterConfig({ maxParamLength: 4096 }), Effect.provide(context))
  )
  const routes = yield* Effect.cached(Effect.provide(operationRoutes, context))
  const runs = yield* registerTools((spec, req) =>
    // The HTTP services (request, platform) are the POST's own: the handler runs in its context.
    Effect.gen(function*() {
      const outer = yield* Effect.serviceOption(HttpServerRequest.HttpServerRequest)
      const principal = Option.flatten(yield* FiberRef.get(ResolvedPrincipal))
      if (Option.isNone(outer) || Option.isNone(principal)) {
        return failure(envelopeOf(new InternalError({ message: "the tool call arrived without its request" })))
      }
      const headers: Record<string, string> = { authorization: outer.value.headers["authorization"] ?? "", accept: "application/json" }
      if (req.body !== undefined) headers["content-type"] = "application/json"
      if (req.idempotencyKey !== undefined) headers["idempotency-key"] = req.idempotencyKey
      const request = HttpServerRequest.fromWeb(sourceOf(req.method, req.url, req.body)).modify({
        headers: Headers.fromInput(headers),
        ...Option.match(outer.value.remoteAddress, { onNone: () => ({}), onSome: (remoteAddress) => ({ remoteAddress }) })
      })
      const routed = (yield* routes)(spec, req.url)
      const response = yield* dispatchAdmitted(routed ?? (yield* app), request, principal.value, createsResource)
      return resultOf(response.status, response.body._tag === "Uint8Array" ? decoder.decode(response.body.body) : undefined)
    }).pipe(Effect.provideService(Idempotency, idempotency)) as Effect.Effect<CallToolResult, unknown>
  )
  const direct = yield* DirectRuns
  for (const [name, run] of runs) direct.set(name, run)
}))

/** POST /mcp for the McpServer's JSON-RPC, behind the bearer check; other methods 405. */
const ProtocolLive = Layer.effectContext(
  Effect.gen(function*() {
    const { httpApp, protocol } = yield* RpcServer.makeProtocolWithHttpApp
    const runs = new Map<string, Run>()
    const auth = yield* Authentication
    const router = yield* HttpApiBuilder.Router
    const post = Effect.gen(function*() {
      const checked = yield* Effect.either(auth.bearer(Redacted.make("")))
      if (checked._tag === "Left") {
        return HttpServerResponse.unsafeJson(envelopeOf(checked.left), { status: 401 })
      }
      const posted = yield* Effect.either((yield* HttpServerRequest.HttpServerRequest).text)
      const direct = posted._tag === "Right" ? directCall(runs, posted.right) : undefined
      if (direct !== undefined) return HttpServerResponse.text(yield* direct, { contentType: "application/json" })
      const response = yield* Effect.scoped(httpApp)
      // Only notifications or responses were posted: nothing to answer (Streamable HTTP: 202).
      const empty = response.body._tag === "Uint8Array" && decoder.decode(response.body.body).trim().replace(/^\[\]$/, "") === ""
      return empty ? HttpServerResponse.empty({ status: 202 }) : response
    })
    const notAllowed = HttpServerResponse.unsafeJson(
      envelopeOf(new MethodNotAllowed({ message: "the MCP endpoint takes POST (Streamable HTTP, JSON responses); it opens no event stream", details: { allowed: ["POST"] } })),
      { status: 405, headers: { allow: "POST" } }
    )
    yield* router.post(MCP_PATH, post)
    yield* router.get(MCP_PATH, Effect.succeed(notAllowed))
    yield* router.del(MCP_PATH, Effect.succeed(notAllowed))
    return Context.make(RpcServer.Protocol, protocol).pipe(Context.add(DirectRuns, runs))
  })
).pipe(
  Layer.provide(Layer.succeed(RpcSerialization.RpcSerialization, withOutputSchemas(RpcSerialization.jsonRpc(), OUTPUT_SCHEMAS))),
  Layer.provide(HttpApiBuilder.Router.Live)
)

/** The MCP server with every tool, served at `/mcp` on the API's router. */
export const McpHttpLive = ToolsLive.pipe(
  Layer.provide(McpServer.layer({ name: "mailroom", version: VERSION })),
  Layer.provide(ProtocolLive),
  Layer.provide(HttpApiBuilder.Router.Live)
)
