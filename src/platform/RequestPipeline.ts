/**
 * The outermost layer of every HTTP request: request id and access log, the client address
 * (`TRUSTED_PROXIES`), load shedding past `MAX_INFLIGHT_REQUESTS` (503 with Retry-After; the health
 * probe answers 503 then too), one caller's share of that cap (a quarter: 429 with Retry-After), the
 * organization-wide rate limit (120 per 60 s sliding window per organization, per client address
 * without a valid credential) and POST idempotency (a key derived from the body only for POSTs that
 * create something; actions run every time unless the caller sends a key). It runs before routing,
 * so even 401s and 404s carry the `ratelimit-*` headers. It also applies the handlers' pre-response hooks itself (`finalize`), so it
 * holds the exact final response before it is written: idempotency records store what was sent.
 */
import { HttpApp, HttpIncomingMessage, type HttpRouter, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import type { ResponseError } from "@effect/platform/HttpServerError"
import { Cause, Effect, FiberRef, LogLevel, Option, Stream } from "effect"
import type { BlockList } from "node:net"
import { Conflict, envelopeOf, PayloadTooLarge, RateLimited, ServiceUnavailable, ValidationError } from "../contract/Errors.js"
import type { Principal } from "../contract/Security.js"
import { bearerToken } from "./Authentication.js"
import { Admission } from "./Admission.js"
import { clientAddress } from "./ClientAddress.js"
import { internalErrorResponse } from "./ErrorMapping.js"
import { bodyHash, type CreatesResource, Idempotency, type KeyRef, type StoredResponse } from "./Idempotency.js"
import { type Decision, rateLimitHeaders } from "./RateLimiter.js"
import { pathOf, RequestId, ResolvedPrincipal } from "./RequestContext.js"
import { PREFIX, randomToken } from "./Secrets.js"

export const API_RATE_LIMIT = { limit: 120, windowSeconds: 60 } as const

/**
 * The public demo sandbox has a window of its own per client address: trying the demo never uses
 * up an organization's window (a credential sent along is ignored there), and it is never idempotent
 * storage either, since none of its operations changes anything.
 */
export const DEMO_RATE_LIMIT = { limit: 60, windowSeconds: 60 } as const
export const isDemo = (path: string) => path.startsWith("/v1/demo/")

/**
 * Exempt from every limiter. Of the `/device` page only its static assets are: a look-up
 * of a user code is counted here and by the page's own per-address and per-code limits.
 */
export const isExempt = (method: string, path: string) =>
  path === "/v1/health" || path === "/v1/openapi.json" || path === "/v1/discovery" || path === "/docs" || path.startsWith("/docs/") ||
  path === "/auth.md" || path === "/llms.txt" || path.startsWith("/.well-known/") ||
  (method === "GET" && path.startsWith("/device/assets/"))

/** Largest request body the API reads. */
export const MAX_BODY_BYTES = 1024 * 1024
/** Deploying a function carries up to 1 MiB of module source, which JSON escaping can multiply. */
export const FUNCTIONS_MAX_BODY_BYTES = 8 * 1024 * 1024
/** Outgoing mail carries up to 10 MiB of attachments, base64-encoded in the JSON body. */
export const SEND_MAX_BODY_BYTES = 16 * 1024 * 1024
const SENDS = /^\/v1\/(send-mail|emails\/[^/]+\/reply)$/
/** The MCP endpoint carries what the operations its tools call carry (sends, function code). */
const bodyLimitOf = (path: string) =>
  path.startsWith("/v1/functions") ? FUNCTIONS_MAX_BODY_BYTES : SENDS.test(path) || path === "/mcp" ? SEND_MAX_BODY_BYTES : MAX_BODY_BYTES

/**
 * A declared body past the limit is read and discarded up to this many bytes, then answered 413 on
 * a connection that stays usable; a larger one is answered at once and the connection closed.
 */
const DRAIN_MAX_BYTES = 64 * 1024 * 1024

const tooLarge = (limit: number, close: boolean) =>
  json(
    envelopeOf(
      new PayloadTooLarge({
        message: `body: larger than the ${limit} bytes this operation reads`,
        details: { limit_bytes: limit }
      })
    ),
    413,
    close ? { connection: "close" } : {}
  )

const json = (body: unknown, status: number, headers: Record<string, string>) =>
  HttpServerResponse.unsafeJson(body, { status, headers })

const responseBytes = (res: HttpServerResponse.HttpServerResponse): Uint8Array | undefined =>
  res.body._tag === "Uint8Array" ? res.body.body : res.body._tag === "Empty" ? new Uint8Array() : undefined

/** A response that hands out a credential (a new API key, tokens) is marked no-store. */
const carriesCredential = (headers: Readonly<Record<string, string>>) => (headers["cache-control"] ?? "").includes("no-store")

/** Which finished results an idempotency record keeps. */
const storable = (ref: KeyRef, res: HttpServerResponse.HttpServerResponse, bytes: Uint8Array) => {
  // A derived key is the same for every caller of one scope sending the same body: it never
  // stands for a credential-bearing result, so a second such caller gets one of its own.
  if (ref.derived) return res.status >= 200 && res.status < 300 && !carriesCredential(res.headers)
  // An outbound relay's answer is kept whatever its status: the message may be in flight (a
  // timeout) or was recorded as failed, and a retry with the key must not send it a second time.
  if (res.status >= 500) return errorCodeOf(bytes)?.startsWith("outbound_") === true
  // A 415 is about the request's headers, which the key does not cover: the corrected retry must run.
  if (res.status === 429 || res.status === 415) return false
  if (res.status === 400) {
    const code = errorCodeOf(bytes)
    return code !== undefined && code !== "validation_error"
  }
  return true
}

const errorCodeOf = (bytes: Uint8Array): string | undefined => {
  try {
    const code = JSON.parse(new TextDecoder().decode(bytes))?.error?.code
    return typeof code === "string" ? code : undefined
  } catch {
    return undefined
  }
}

const REPLAYED_HEADERS = ["content-type", "location", "cache-control"]

type Services = HttpRouter.HttpRouter.DefaultServices | HttpServerRequest.HttpServerRequest
type App = HttpApp.Default<never, Services>

export interface PipelineOptions {
  /** The operations whose POSTs get a derived idempotency key (see `creatingOperations`). */
  readonly createsResource: CreatesResource
  /** Requests worked on at once before shedding with 503; 0: no cap. */
  readonly maxInflight: number
  /** Peers believed about the client address they forward (`TRUSTED_PROXIES`). */
  readonly trustedProxies: BlockList | undefined
}

/**
 * Not shed under overload: the health probe is one trivial query, and a load balancer that saw
 * 503s from it would take a busy but working instance out of service, moving its load onto the others.
 */
const isShedExempt = (path: string) => path === "/v1/health"

/** Seconds a shed client is asked to wait: the overload is a queue of requests lasting well under that. */
const SHED_RETRY_AFTER_SECONDS = 1

/**
 * Requests one caller (an organization, or a client address without a valid credential) may have
 * in progress at once: a quarter of the cap, so one caller never holds the whole process.
 */
export const callerShareOf = (maxInflight: number) => Math.max(1, Math.floor(maxInflight / 4))

const overShare = (share: number) =>
  json(
    envelopeOf(
      new RateLimited({
        message: `at most ${share} requests of one organization (or client address) are worked on at once; retry in ${SHED_RETRY_AFTER_SECONDS} s`,
        details: { limit: share, retry_after: SHED_RETRY_AFTER_SECONDS }
      })
    ),
    429,
    { "retry-after": String(SHED_RETRY_AFTER_SECONDS) }
  )

/** The health probe while no request is admitted: the instance is full, a balancer should look elsewhere. */
const unhealthy = (maxInflight: number) =>
  json(
    envelopeOf(
      new ServiceUnavailable({
        message: `the service admits no request now (${maxInflight} in progress)`,
        details: { retry_after: SHED_RETRY_AFTER_SECONDS, inflight: maxInflight }
      })
    ),
    503,
    { "retry-after": String(SHED_RETRY_AFTER_SECONDS) }
  )

const shed = (maxInflight: number) =>
  json(
    envelopeOf(
      new ServiceUnavailable({
        message: `the service is at capacity (${maxInflight} requests in progress); retry in ${SHED_RETRY_AFTER_SECONDS} s`,
        details: { retry_after: SHED_RETRY_AFTER_SECONDS }
      })
    ),
    503,
    { "retry-after": String(SHED_RETRY_AFTER_SECONDS) }
  )

export const requestPipeline = (
  app: App,
  options: PipelineOptions
): HttpApp.Default<ResponseError, Services | Admission | Idempotency> => {
  // Requests of this server between admission and their response. Counting them is enough: the
  // event loop is single-threaded, and past the cap a request costs almost nothing to refuse, so
  // the ones accepted keep their latency and nothing is left queued when the load drops.
  let inflight = 0
  const share = callerShareOf(options.maxInflight)
  /** Requests in progress per caller (see `callerShareOf`); a caller with none has no entry. */
  const byCaller = new Map<string, number>()
  const release = (caller: string) => {
    const left = (byCaller.get(caller) ?? 1) - 1
    if (left <= 0) byCaller.delete(caller)
    else byCaller.set(caller, left)
  }
  return Effect.gen(function*() {
    const original = yield* HttpServerRequest.HttpServerRequest
    const requestId = `req_${randomToken(20)}`
    const started = Date.now()
    const path = pathOf(original.url)
    const method = original.method.toUpperCase()
    // Everything downstream (limiters, idempotency scope, handlers) sees the client's address. A
    // request a function makes through its MAILROOM binding (its credential, which workerd sets
    // itself) is the organization's own: whatever forwarded headers the function wrote are ignored,
    // so per-address limits cannot be spoofed from inside a function whatever TRUSTED_PROXIES says.
    const fromFunction = (original.headers["authorization"] ?? "").startsWith(`Bearer ${PREFIX.functionToken}`)
    const client = clientAddress(
      Option.getOrUndefined(original.remoteAddress),
      original.headers,
      fromFunction ? undefined : options.trustedProxies
    )
    const request = original.modify({ remoteAddress: client })

    // `x-request-id` is set on the final response itself (below), whatever produced it.
    const counted = options.maxInflight > 0 && !isShedExempt(path)
    if (!counted && options.maxInflight > 0 && inflight >= options.maxInflight) {
      return withRequestId(yield* finalize(request, unhealthy(options.maxInflight)), requestId)
    }
    if (counted && inflight >= options.maxInflight) {
      const final = withRequestId(yield* finalize(request, shed(options.maxInflight)), requestId)
      yield* Effect.logWarning(`${method} ${path} 503 shed`).pipe(
        Effect.annotateLogs({ request_id: requestId, inflight })
      )
      return final
    }
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
      const limit = bodyLimitOf(path)
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
      const early = Option.isSome(token) ? yield* admission.cachedOrg(token.value) : Option.none<string>()
      if (Option.isSome(early) && !(yield* hold(`org:${early.value}`))) return overShare(share)
      const admitted = yield* admission.admit(token, "api:org:", `api:ip:${client}`, API_RATE_LIMIT)
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

    if (counted) inflight++
    const response = yield* run.pipe(
      Effect.provideService(HttpServerRequest.HttpServerRequest, request),
      HttpIncomingMessage.withMaxBodySize(Option.some(bodyLimitOf(path))),
      Effect.locally(RequestId, requestId),
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
        if (counted) inflight--
        if (heldBy !== undefined) release(heldBy)
      }))
    )
    const final = withRequestId(yield* finalize(request, response), requestId)
    // The access line is built only when the logger's level lets it through.
    if (LogLevel.greaterThanEqual(LogLevel.Info, yield* FiberRef.get(FiberRef.currentMinimumLogLevel))) {
      yield* Effect.logInfo(`${method} ${path} ${final.status}`).pipe(
        Effect.annotateLogs({ request_id: requestId, duration_ms: Date.now() - started })
      )
    }
    return final
  })
}

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

const limited = (decision: Decision) =>
  json(
    envelopeOf(
      new RateLimited({
        message: `rate limit of ${decision.limit} requests per ${decision.windowSeconds} s exceeded; retry in ${decision.retryAfter} s`,
        details: { retry_after: decision.retryAfter }
      })
    ),
    429,
    rateLimitHeaders(decision, true)
  )

const withRequestId = (response: HttpServerResponse.HttpServerResponse, requestId: string) =>
  HttpServerResponse.setHeader(response, "x-request-id", requestId)

/** Applies (and consumes) the pre-response hooks registered so far: the response as it will be sent. */
const finalize = (request: HttpServerRequest.HttpServerRequest, response: HttpServerResponse.HttpServerResponse) =>
  Effect.gen(function*() {
    const hooks = yield* FiberRef.get(HttpApp.currentPreResponseHandlers)
    if (Option.isNone(hooks)) return response
    yield* FiberRef.set(HttpApp.currentPreResponseHandlers, Option.none())
    return yield* hooks.value(request, response)
  })

/** Org-wide values; a per-resource limiter that refuses the request overwrites them with its own. */
const withLimitHeaders = (d: Decision) =>
  HttpApp.appendPreResponseHandler((_req, res) => Effect.succeed(HttpServerResponse.setHeaders(res, rateLimitHeaders(d, false))))

const idempotent = (
  app: App,
  request: HttpServerRequest.HttpServerRequest,
  scope: string,
  derivedScope: string,
  anonymous: boolean,
  method: string,
  path: string
): Effect.Effect<HttpServerResponse.HttpServerResponse, unknown, Services | Idempotency> =>
  Effect.gen(function*() {
    const explicit = request.headers["idempotency-key"]
    if (explicit !== undefined && (explicit.length < 1 || explicit.length > 255)) {
      return json(
        envelopeOf(
          new ValidationError({
            message: "idempotency-key: must be 1 to 255 characters",
            details: { issues: [{ field: "idempotency-key", reason: "must be 1 to 255 characters" }] }
          })
        ),
        400,
        {}
      )
    }
    const raw = yield* Effect.either(request.text)
    if (raw._tag === "Left") {
      return json(
        envelopeOf(
          new ValidationError({
            message: `body: unreadable or larger than ${bodyLimitOf(path)} bytes`,
            details: { issues: [{ field: "body", reason: `unreadable or larger than ${bodyLimitOf(path)} bytes` }] }
          })
        ),
        400,
        {}
      )
    }
    const hash = bodyHash(raw.right)
    const ref: KeyRef = explicit !== undefined
      ? { scope, method, path, key: explicit, derived: false, bodyHash: hash }
      : { scope: derivedScope, method, path, key: `derived_${hash}`, derived: true, bodyHash: hash }
    const echo = { "idempotency-key": ref.key }

    const store = yield* Idempotency
    const claim = yield* store.claim(ref)
    switch (claim._tag) {
      case "Replay":
        // Callers without a credential are told apart only by their address, which many clients
        // share (a proxy, a NAT), and an Idempotency-Key is no secret between them: a result that
        // handed out a credential is never replayed to one. The key still ran its request once.
        if (anonymous && carriesCredential(claim.response.headers)) {
          return json(
            envelopeOf(
              new Conflict({
                message:
                  "this Idempotency-Key was already used; its result carried a credential and is not replayed to a caller without one (use a new key to run the request again)",
                details: { idempotency_key: ref.key }
              })
            ),
            409,
            echo
          )
        }
        return replay(claim.response, echo)
      case "InFlight":
        return json(
          envelopeOf(
            new Conflict({
              message: "a request with this Idempotency-Key is still being processed; retry shortly",
              details: { idempotency_key: ref.key }
            })
          ),
          409,
          echo
        )
      case "Mismatch":
        return json(
          envelopeOf(
            new Conflict({
              message: "this Idempotency-Key was already used with a different request body",
              details: { idempotency_key: ref.key }
            })
          ),
          409,
          echo
        )
      case "Claimed":
        break
    }

    const response = yield* app.pipe(Effect.onInterrupt(() => store.release(ref)))
    const final = yield* finalize(request, response).pipe(Effect.tapErrorCause(() => store.release(ref)))
    const bytes = responseBytes(final)
    if (bytes !== undefined && storable(ref, final, bytes)) {
      const headers: Record<string, string> = {}
      for (const h of REPLAYED_HEADERS) {
        const v = final.headers[h]
        if (v !== undefined) headers[h] = v
      }
      // Kept as a marker that the key ran (it is never replayed, see above), without the credential.
      const body = anonymous && carriesCredential(final.headers) ? new Uint8Array() : bytes
      yield* store.complete(ref, { status: final.status, headers, body })
    } else {
      yield* store.release(ref)
    }
    return HttpServerResponse.setHeaders(final, echo)
  })

const replay = (stored: StoredResponse, echo: Record<string, string>) =>
  HttpServerResponse.uint8Array(stored.body, {
    status: stored.status,
    headers: { ...stored.headers, ...echo, "idempotent-replayed": "true" },
    ...(stored.headers["content-type"] !== undefined ? { contentType: stored.headers["content-type"] } : {})
  })
