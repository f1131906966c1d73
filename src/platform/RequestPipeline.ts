/**
 * The outermost layer of every HTTP request: request id and access log, the organization-wide
 * rate limit (120 per 60 s sliding window per organization, per client address without a valid
 * credential) and POST idempotency. It runs before routing, so even 401s and 404s carry the
 * `ratelimit-*` headers. It also applies the handlers' pre-response hooks itself (`finalize`), so it
 * holds the exact final response before it is written: idempotency records store what was sent.
 */
import { HttpApp, HttpIncomingMessage, type HttpRouter, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import type { ResponseError } from "@effect/platform/HttpServerError"
import { Cause, Effect, FiberRef, Option } from "effect"
import { Conflict, envelopeOf, RateLimited, ValidationError } from "../contract/Errors.js"
import type { Principal } from "../contract/Security.js"
import { bearerToken } from "./Authentication.js"
import { Admission } from "./Admission.js"
import { internalErrorResponse } from "./ErrorMapping.js"
import { bodyHash, Idempotency, type KeyRef, type StoredResponse } from "./Idempotency.js"
import { type Decision, rateLimitHeaders } from "./RateLimiter.js"
import { RequestId, ResolvedPrincipal } from "./RequestContext.js"
import { randomToken } from "./Secrets.js"

export const API_RATE_LIMIT = { limit: 120, windowSeconds: 60 } as const

/** CONTRACT.md: exempt from every limiter. */
export const isExempt = (method: string, path: string) =>
  path === "/v1/health" || path === "/v1/openapi.json" || path === "/v1/discovery" || path === "/docs" ||
  path === "/auth.md" || path.startsWith("/.well-known/") ||
  (method === "GET" && (path === "/device" || path.startsWith("/device/assets/")))

/** Largest request body the API reads. */
export const MAX_BODY_BYTES = 1024 * 1024

const json = (body: unknown, status: number, headers: Record<string, string>) =>
  HttpServerResponse.unsafeJson(body, { status, headers })

const responseBytes = (res: HttpServerResponse.HttpServerResponse): Uint8Array | undefined =>
  res.body._tag === "Uint8Array" ? res.body.body : res.body._tag === "Empty" ? new Uint8Array() : undefined

/** Which finished results an idempotency record may replay (CONTRACT.md). */
const storable = (derived: boolean, res: HttpServerResponse.HttpServerResponse, bytes: Uint8Array) => {
  // A derived key is the same for every caller behind one address sending the same body, so it
  // never replays a response that hands out a credential (marked no-store) to a second caller.
  if (derived) return res.status >= 200 && res.status < 300 && !(res.headers["cache-control"] ?? "").includes("no-store")
  if (res.status >= 500 || res.status === 429) return false
  if (res.status === 400) {
    try {
      return JSON.parse(new TextDecoder().decode(bytes))?.error?.code !== "validation_error"
    } catch {
      return false
    }
  }
  return true
}

const REPLAYED_HEADERS = ["content-type", "location", "cache-control"]

type Services = HttpRouter.HttpRouter.DefaultServices | HttpServerRequest.HttpServerRequest
type App = HttpApp.Default<never, Services>

export const requestPipeline = (
  app: App
): HttpApp.Default<ResponseError, Services | Admission | Idempotency> =>
  Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    const requestId = `req_${randomToken(20)}`
    const started = Date.now()
    const path = new URL(request.url, "http://mailroom.invalid").pathname
    const method = request.method.toUpperCase()

    yield* HttpApp.appendPreResponseHandler((_req, res) =>
      Effect.succeed(HttpServerResponse.setHeader(res, "x-request-id", requestId))
    )
    const run: Effect.Effect<
      HttpServerResponse.HttpServerResponse,
      unknown,
      Services | Admission | Idempotency
    > = Effect.gen(function*() {
      if (isExempt(method, path)) return yield* app

      // Resolve the credential once (it decides the limiter key and the idempotency scope) and
      // count the request, in one statement.
      const token = bearerToken(request.headers["authorization"])
      const client = Option.getOrElse(request.remoteAddress, () => "unknown")
      const admission = yield* Admission
      const admitted = yield* admission.admit(token, "api:org:", `api:ip:${client}`, API_RATE_LIMIT)
      if (Option.isSome(admitted.principal)) yield* FiberRef.set(ResolvedPrincipal, admitted.principal)
      const principal: Option.Option<Principal> = Option.flatten(admitted.principal)
      const scope = Option.match(principal, { onNone: () => `ip:${client}`, onSome: (p) => `org:${p.orgId}` })
      const decision = admitted.decision
      if (!decision.allowed) {
        return json(
          envelopeOf(
            new RateLimited({
              message: `rate limit of ${decision.limit} requests per ${decision.windowSeconds} s exceeded; retry in ${decision.retryAfter} s`,
              details: { retry_after: decision.retryAfter }
            })
          ),
          429,
          rateLimitHeaders(decision, true)
        )
      }
      yield* withLimitHeaders(decision)

      if (method !== "POST" || !path.startsWith("/v1/")) return yield* app
      // A derived key stands for "this caller sent this body": it is scoped to the credential, so two
      // credentials of one organization never receive each other's results.
      const derivedScope = Option.match(principal, {
        onNone: () => scope,
        onSome: (p) => `${scope}:${p.credential.kind}:${p.credential.id}`
      })
      return yield* idempotent(app, request, scope, derivedScope, method, path)
    })

    const response = yield* run.pipe(
      HttpIncomingMessage.withMaxBodySize(Option.some(MAX_BODY_BYTES)),
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
      )
    )
    const final = yield* finalize(request, response)
    yield* Effect.logInfo(`${method} ${path} ${final.status}`).pipe(
      Effect.annotateLogs({ request_id: requestId, duration_ms: Date.now() - started })
    )
    // A body over the limit is answered without being read to its end: the rest of it is still on
    // the connection, so the client must not send its next request there (found by the fuzz: the
    // next POST on a reused keep-alive socket failed).
    const declared = Number(request.headers["content-length"] ?? 0)
    return declared > MAX_BODY_BYTES ? HttpServerResponse.setHeader(final, "connection", "close") : final
  })

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
            message: `body: unreadable or larger than ${MAX_BODY_BYTES} bytes`,
            details: { issues: [{ field: "body", reason: `unreadable or larger than ${MAX_BODY_BYTES} bytes` }] }
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
    if (bytes !== undefined && storable(ref.derived, final, bytes)) {
      const headers: Record<string, string> = {}
      for (const h of REPLAYED_HEADERS) {
        const v = final.headers[h]
        if (v !== undefined) headers[h] = v
      }
      yield* store.complete(ref, { status: final.status, headers, body: bytes })
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
