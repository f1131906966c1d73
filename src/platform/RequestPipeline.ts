/**
 * The outermost layer of every HTTP request the gate admitted (RequestGate: `MAX_INFLIGHT_REQUESTS`
 * at once, the rest wait or get 503; the health probe answers 503 while it is full): request id and
 * access log, the client address (`TRUSTED_PROXIES`), one caller's share of that cap (a quarter: 429 with Retry-After), the
 * organization-wide rate limit (120 per 60 s sliding window per organization, per client address
 * without a valid credential) and POST idempotency (a key derived from the body only for POSTs that
 * create something; actions run every time unless the caller sends a key). It runs before routing,
 * so even 401s and 404s carry the `ratelimit-*` headers. It also applies the handlers' pre-response hooks itself (`finalize`), so it
 * holds the exact final response before it is written: idempotency records store what was sent.
 * This module orders the steps and counts each caller's requests in progress; the rules of each step are in
 * `RateLimits`, `Shedding`, `BodyLimits` and `IdempotentRequest`.
 */
import { FileSystem, HttpApp, HttpIncomingMessage, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import type { ResponseError } from "@effect/platform/HttpServerError"
import { Cause, Context, Effect, FiberRef, LogLevel, Option, Stream } from "effect"
import type { BlockList } from "node:net"
import type { Principal } from "../contract/Security.js"
import { bearerToken } from "./Authentication.js"
import { Admission } from "./Admission.js"
import { bodyLimitOf, DRAIN_MAX_BYTES, tooLarge } from "./BodyLimits.js"
import { clientAddress } from "./ClientAddress.js"
import { internalErrorResponse } from "./ErrorMapping.js"
import type { CreatesResource, Idempotency } from "./Idempotency.js"
import { idempotent } from "./IdempotentRequest.js"
import { type App, finalize, type Services, withRequestId } from "./PipelineResponse.js"
import { API_RATE_LIMIT, DEMO_RATE_LIMIT, isDemo, isExempt, limited, withLimitHeaders } from "./RateLimits.js"
import { accessLine, newRequestId, pathOf, RequestId, ResolvedPrincipal } from "./RequestContext.js"
import { PREFIX } from "./Secrets.js"
import type { RequestGate } from "./RequestGate.js"
import { callerShareOf, isShedExempt, overShare, unhealthy } from "./Shedding.js"
import * as SqlCounters from "./SqlCounters.js"

export interface PipelineOptions {
  /** The operations whose POSTs get a derived idempotency key (see `creatingOperations`). */
  readonly createsResource: CreatesResource
  /** Requests worked on at once (the gate admits them); 0: no cap. */
  readonly maxInflight: number
  /** The server's admission gate: whether the process is full, for the health probe. */
  readonly gate: RequestGate
  /** Peers believed about the client address they forward (`TRUSTED_PROXIES`). */
  readonly trustedProxies: BlockList | undefined
}

export const requestPipeline = (
  app: App,
  options: PipelineOptions
): HttpApp.Default<ResponseError, Services | Admission | Idempotency> => {
  const share = callerShareOf(options.maxInflight)
  /** Requests in progress per caller (see `callerShareOf`); a caller with none has no entry. */
  const byCaller = new Map<string, number>()
  const release = (caller: string) => {
    const left = (byCaller.get(caller) ?? 1) - 1
    if (left <= 0) byCaller.delete(caller)
    else byCaller.set(caller, left)
  }
  const handle = (original: HttpServerRequest.HttpServerRequest) => Effect.gen(function*() {
    const requestId = newRequestId()
    const started = Date.now()
    const path = pathOf(original.url)
    const method = original.method.toUpperCase()
    // The server runs each request on a fiber of its own that ends with it, so the request's fiber
    // refs are set for the rest of the fiber rather than scoped and restored (`Effect.locally`):
    // each scoped change copies the fiber's refs going in and again coming out, on every request.
    // Each request is one operation of its method and path shape (SqlCounters.ts).
    const operation = yield* SqlCounters.beginForFiber(`http ${method} ${pathShape(path)}`)
    yield* FiberRef.set(RequestId, requestId)
    // Everything downstream (limiters, idempotency scope, handlers) sees the client's address. A
    // request a function makes through its MAILROOM binding (its credential, which workerd sets
    // itself) is the organization's own: whatever forwarded headers the function wrote are ignored,
    // so per-address limits cannot be spoofed from inside a function whatever TRUSTED_PROXIES says.
    const fromFunction = (original.headers["authorization"] ?? "").startsWith(`Bearer ${PREFIX.functionToken}`)
    const peer = Option.getOrUndefined(original.remoteAddress)
    const client = clientAddress(peer, original.headers, fromFunction ? undefined : options.trustedProxies)
    const request = client === peer ? original : original.modify({ remoteAddress: client })

    // `x-request-id` is set on the final response itself (below), whatever produced it.
    // Requests past the cap never get here (RequestGate); the health probe, which the gate lets
    // through, tells a balancer when the process is full.
    const counted = options.maxInflight > 0 && !isShedExempt(path)
    if (!counted && options.gate.full) {
      SqlCounters.end(operation)
      return withRequestId(yield* finalize(request, unhealthy(options.maxInflight)), requestId)
    }
    const limit = bodyLimitOf(path)
    // The caller whose share this request holds, once known.
    let heldBy: string | undefined
    const run: Effect.Effect<
      HttpServerResponse.HttpServerResponse,
      unknown,
      Services | Admission | Idempotency
    > = Effect.gen(function*() {
      // A body declared larger than the operation reads is refused before anything else. Reading it
      // to its end first (discarding it) keeps the connection usable: a server that answers and
      // closes while the client is still sending makes the client's next read a reset instead of this answer.
      const declared = Number(request.headers["content-length"] ?? 0)
      if (declared > limit) {
        if (declared > DRAIN_MAX_BYTES) return tooLarge(limit, true)
        const drained = yield* Stream.runDrain(original.stream).pipe(Effect.either)
        return tooLarge(limit, drained._tag === "Left")
      }
      // The caller's share: false when it already has its quarter of the process in progress.
      const hold = (caller: string) =>
        Effect.sync(() => {
          if (!counted) return true
          const n = byCaller.get(caller) ?? 0
          if (n >= share) return false
          byCaller.set(caller, n + 1)
          heldBy = caller
          return true
        })
      if (isExempt(method, path)) {
        if (!(yield* hold(`ip:${client}`))) return overShare(share)
        return yield* app
      }

      if (isDemo(path)) {
        if (!(yield* hold(`ip:${client}`))) return overShare(share)
        const demo = yield* (yield* Admission).admit(Option.none(), "demo:", `demo:ip:${client}`, DEMO_RATE_LIMIT)
        if (!demo.decision.allowed) return limited(demo.decision)
        yield* withLimitHeaders(demo.decision)
        // Nothing in the demo changes state, so a key is only echoed, as the real operations echo theirs.
        const key = request.headers["idempotency-key"]
        if (method === "POST" && key !== undefined) {
          yield* HttpApp.appendPreResponseHandler((_req, res) => Effect.succeed(HttpServerResponse.setHeader(res, "idempotency-key", key)))
        }
        return yield* app
      }

      // Resolve the credential once (it decides the limiter key and the idempotency scope) and
      // count the request, in one statement.
      const token = bearerToken(request.headers["authorization"])
      const admission = yield* Admission
      // A credential seen moments ago claims its organization's share before the round trip, so a
      // flood is refused at once and never fills the process while it waits for admission.
      // The cached principal is handed on, so the token is hashed once per request.
      const early = Option.isSome(token) ? yield* admission.cachedPrincipal(token.value) : Option.none<Principal>()
      if (Option.isSome(early) && !(yield* hold(`org:${early.value.orgId}`))) return overShare(share)
      const admitted = yield* admission.admit(token, "api:org:", `api:ip:${client}`, API_RATE_LIMIT, early)
      if (Option.isSome(admitted.principal)) yield* FiberRef.set(ResolvedPrincipal, admitted.principal)
      const principal: Option.Option<Principal> = Option.flatten(admitted.principal)
      const scope = Option.match(principal, { onNone: () => `ip:${client}`, onSome: (p) => `org:${p.orgId}` })
      const decision = admitted.decision
      if (!decision.allowed) return limited(decision)
      yield* withLimitHeaders(decision)
      if (heldBy !== scope) {
        if (heldBy !== undefined) release(heldBy)
        heldBy = undefined
        if (!(yield* hold(scope))) return overShare(share)
      }

      if (method !== "POST" || !path.startsWith("/v1/")) return yield* app
      // A derived key stands for "this caller sent this body": it is scoped to the credential, so two
      // credentials of one organization never receive each other's results.
      const derivedScope = Option.match(principal, {
        onNone: () => scope,
        onSome: (p) => `${scope}:${p.credential.kind}:${p.credential.id}`
      })
      const explicit = request.headers["idempotency-key"]
      // An action without a key runs every time: a second identical call is meant (a second replay).
      if (explicit === undefined && !options.createsResource(method, path)) return yield* app
      return yield* idempotent(app, request, scope, derivedScope, Option.isNone(principal), method, path)
    })

    // What the handlers see of the request, in one change of the context, and only when it differs:
    // the client's address, and the body's limit for a request that has a body (HTTP/1.1: one
    // with neither Content-Length nor Transfer-Encoding has none).
    const length = request.headers["content-length"]
    const hasBody = (length !== undefined && length !== "0") || request.headers["transfer-encoding"] !== undefined
    const inContext = request === original && !hasBody ? run : Effect.mapInputContext(run, (context: Context.Context<Services | Admission | Idempotency>) => {
      const withRequest = request === original ? context : Context.add(context, HttpServerRequest.HttpServerRequest, request)
      return hasBody ? Context.add(withRequest, HttpIncomingMessage.MaxBodySize, Option.some(FileSystem.Size(limit))) : withRequest
    })
    const response = yield* inContext.pipe(
      // Last line of defence: nothing leaves as an empty 500.
      Effect.catchAllCause((cause) =>
        Cause.isInterruptedOnly(cause)
          ? Effect.interrupt
          : Effect.as(
            Effect.logError("unhandled fault in request pipeline", cause).pipe(
              Effect.annotateLogs("request_id", requestId)
            ),
            internalErrorResponse(requestId)
          )
      ),
      Effect.ensuring(Effect.sync(() => {
        if (heldBy !== undefined) release(heldBy)
      }))
    )
    const final = withRequestId(yield* finalize(request, response), requestId)
    // The access line is built only when the logger's level lets it through.
    if (LogLevel.greaterThanEqual(LogLevel.Info, yield* FiberRef.get(FiberRef.currentMinimumLogLevel))) {
      yield* accessLine(method, path, final.status, requestId, started)
    }
    SqlCounters.end(operation)
    return final
  })
  return Effect.flatMap(HttpServerRequest.HttpServerRequest, handle)
}

/** A path with its identifiers replaced by `:id`, so that one route is one path of the counters. */
export const pathShape = (path: string) =>
  path.split("/").map((segment) => segment === "" || /^(v1|[a-z][a-z.-]{0,22}[a-z])$/.test(segment) ? segment : ":id").join("/")

/**
 * Runs one more request inside a request already admitted for `principal` (a tool call of the MCP
 * endpoint, which speaks for an operation of the API): not counted again, but idempotent exactly
 * as the same request sent to `/v1` would be, and with its own pre-response hooks.
 */
export const dispatchAdmitted = (
  app: App,
  request: HttpServerRequest.HttpServerRequest,
  principal: Principal,
  createsResource: CreatesResource
): Effect.Effect<HttpServerResponse.HttpServerResponse, unknown, Services | Idempotency> => {
  const method = request.method.toUpperCase()
  const path = pathOf(request.url)
  const scope = `org:${principal.orgId}`
  const keyed = method === "POST" && path.startsWith("/v1/") &&
    (request.headers["idempotency-key"] !== undefined || createsResource(method, path))
  const run = keyed
    ? idempotent(app, request, scope, `${scope}:${principal.credential.kind}:${principal.credential.id}`, false, method, path)
    : app
  return Effect.flatMap(run, (response) => finalize(request, response)).pipe(
    Effect.provideService(HttpServerRequest.HttpServerRequest, request),
    HttpIncomingMessage.withMaxBodySize(Option.some(bodyLimitOf(path))),
    Effect.locally(HttpApp.currentPreResponseHandlers, Option.none())
  )
}
