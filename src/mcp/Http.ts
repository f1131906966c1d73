/**
 * `/mcp`: the Model Context Protocol over Streamable HTTP (JSON responses, no sessions), on
 * @effect/ai's McpServer. Each POST is one request of the API's pipeline (counted on the
 * organization's window, its credential resolved once); a missing or bad credential is the same 401
 * as `/v1`'s. A tool call runs its operation's request through the API's own router in process, so
 * validation, handlers, scopes, errors and idempotency are the operation's; its result is the
 * operation's response body, and an error answers `isError: true` with the error envelope.
 */
import * as McpSchema from "@effect/ai/McpSchema"
import * as McpServer from "@effect/ai/McpServer"
import { HttpApi, HttpApiBuilder, HttpRouter, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import * as RpcSerialization from "@effect/rpc/RpcSerialization"
import * as RpcServer from "@effect/rpc/RpcServer"
import { Cause, Effect, FiberRef, Layer, Option, Redacted } from "effect"
import { envelopeOf, InternalError, MethodNotAllowed, ValidationError } from "../contract/Errors.js"
import { Authentication } from "../contract/Security.js"
import { VERSION } from "../contract/Version.js"
import { creatingOperations, type Idempotency } from "../platform/Idempotency.js"
import { ResolvedPrincipal } from "../platform/RequestContext.js"
import { dispatchAdmitted } from "../platform/RequestPipeline.js"
import { withOutputSchemas } from "./Serialization.js"
import { requestOf, ToolArgumentError, TOOLS, type ToolSpec } from "./Tools.js"

const OUTPUT_SCHEMAS = new Map(TOOLS.map((t) => [t.name, t.outputSchema]))

export const MCP_PATH = "/mcp"

const text = (s: string) => ({ type: "text" as const, text: s })

const failure = (envelope: unknown) =>
  new McpSchema.CallToolResult({ isError: true, content: [text(JSON.stringify(envelope))] })

const decoder = new TextDecoder()

/** The operation's response as a tool result: its body, or `isError` with its error envelope. */
const toResult = (response: HttpServerResponse.HttpServerResponse) => {
  const body = response.body._tag === "Uint8Array" ? decoder.decode(response.body.body) : undefined
  let parsed: { success?: boolean } | undefined
  try {
    parsed = body === undefined || body === "" ? undefined : JSON.parse(body)
  } catch {
    parsed = undefined
  }
  if (parsed === undefined || typeof parsed !== "object") {
    return failure(envelopeOf(new InternalError({ message: `the operation answered ${response.status} without a JSON body` })))
  }
  if (response.status >= 400 || parsed.success !== true) return failure(parsed)
  return new McpSchema.CallToolResult({ isError: false, structuredContent: parsed, content: [text(body!)] })
}

/** The tools, each calling its operation through the API's router. */
const ToolsLive = Layer.effectDiscard(Effect.gen(function*() {
  const server = yield* McpServer.McpServer
  const { api } = yield* HttpApi.Api
  const createsResource = creatingOperations(api)
  const context = yield* Effect.context<HttpApiBuilder.Router | HttpApi.Api | HttpApiBuilder.Middleware | Idempotency>()
  // Built at the first call, when every route has been registered.
  const app = yield* Effect.cached(
    HttpApiBuilder.httpApp.pipe(HttpRouter.withRouterConfig({ maxParamLength: 4096 }), Effect.provide(context))
  )

  const call = (spec: ToolSpec, args: Record<string, unknown> | undefined) =>
    Effect.gen(function*() {
      const outer = yield* Effect.serviceOption(HttpServerRequest.HttpServerRequest)
      const principal = Option.flatten(yield* FiberRef.get(ResolvedPrincipal))
      if (Option.isNone(outer) || Option.isNone(principal)) {
        return failure(envelopeOf(new InternalError({ message: "the tool call arrived without its request" })))
      }
      let req
      try {
        req = requestOf(spec, args)
      } catch (e) {
        if (!(e instanceof ToolArgumentError)) throw e
        const [field, reason] = e.message.split(": ", 2) as [string, string]
        return failure(envelopeOf(new ValidationError({ message: e.message, details: { issues: [{ field, reason }] } })))
      }
      const headers: Record<string, string> = {
        authorization: outer.value.headers["authorization"] ?? "",
        accept: "application/json"
      }
      if (req.body !== undefined) headers["content-type"] = "application/json"
      if (req.idempotencyKey !== undefined) headers["idempotency-key"] = req.idempotencyKey
      const request = HttpServerRequest.fromWeb(
        new Request(`http://mailroom.internal${req.url}`, {
          method: req.method,
          headers,
          ...(req.body !== undefined ? { body: req.body } : {})
        })
      ).modify(Option.match(outer.value.remoteAddress, { onNone: () => ({}), onSome: (remoteAddress) => ({ remoteAddress }) }))
      const response = yield* dispatchAdmitted(yield* app, request, principal.value, createsResource)
      return toResult(response)
    }).pipe(
      Effect.catchAllCause((cause) =>
        Cause.isInterruptedOnly(cause)
          ? Effect.interrupt
          : Effect.as(
            Effect.logError(`MCP tool ${spec.name} failed`, cause),
            failure(envelopeOf(new InternalError({ message: "internal error" })))
          )
      )
    )

  for (const spec of TOOLS) {
    yield* server.addTool({
      tool: new McpSchema.Tool({
        name: spec.name,
        description: spec.description,
        inputSchema: spec.inputSchema,
        annotations: new McpSchema.ToolAnnotations({
          readOnlyHint: spec.readOnly,
          destructiveHint: false,
          idempotentHint: spec.readOnly || spec.method === "PUT",
          openWorldHint: spec.name === "send_email" || spec.name === "reply_to_email" || spec.name === "forward_email"
        })
      }),
      handle: (args) =>
        // The handler runs on the POST's fiber refs and context (its request and resolved credential).
        call(spec, args as Record<string, unknown> | undefined) as Effect.Effect<McpSchema.CallToolResult, never, never>
    })
  }
}))

/** POST /mcp for the McpServer's JSON-RPC, behind the bearer check; other methods 405. */
const ProtocolLive = Layer.effect(
  RpcServer.Protocol,
  Effect.gen(function*() {
    const { httpApp, protocol } = yield* RpcServer.makeProtocolWithHttpApp
    const auth = yield* Authentication
    const router = yield* HttpApiBuilder.Router
    const post = Effect.gen(function*() {
      const checked = yield* Effect.either(auth.bearer(Redacted.make("")))
      if (checked._tag === "Left") {
        return HttpServerResponse.unsafeJson(envelopeOf(checked.left), { status: 401 })
      }
      const response = yield* httpApp
      // Only notifications or responses were posted: nothing to answer (Streamable HTTP: 202).
      const empty = response.body._tag === "Uint8Array" && decoder.decode(response.body.body).trim().replace(/^\[\]$/, "") === ""
      return empty ? HttpServerResponse.empty({ status: 202 }) : response
    })
    const notAllowed = HttpServerResponse.unsafeJson(
      envelopeOf(new MethodNotAllowed({ message: "the MCP endpoint takes POST (Streamable HTTP, JSON responses); it opens no event stream", details: { allowed: ["POST"] } })),
      { status: 405, headers: { allow: "POST" } }
    )
    yield* router.post(MCP_PATH, Effect.scoped(post))
    yield* router.get(MCP_PATH, Effect.succeed(notAllowed))
    yield* router.del(MCP_PATH, Effect.succeed(notAllowed))
    return protocol
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
