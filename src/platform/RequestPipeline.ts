/**
 * The outermost layer of every HTTP request: request id and access log, the organization-wide
 * rate limit (120 per 60 s sliding window per organization, per client address without a valid
 * credential) and POST idempotency. It runs before routing, so even 401s and 404s carry the
 * `ratelimit-*` headers, and it sees the final encoded response, so idempotent replays are byte-exact.
 */
import { HttpApp, HttpIncomingMessage, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Cause, Effect, FiberRef, Option } from "effect"
import { Conflict, envelopeOf, RateLimited, ValidationError } from "../contract/Errors.js"
import type { Principal } from "../contract/Security.js"
import { bearerToken } from "./Authentication.js"
import { Credentials } from "./Credentials.js"
import { internalErrorResponse } from "./ErrorMapping.js"
import { bodyHash, Idempotency, type KeyRef, type StoredResponse } from "./Idempotency.js"
import { type Decision, RateLimiter, rateLimitHeaders } from "./RateLimiter.js"
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
  if (derived) return res.status >= 200 && res.status < 300
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

export const requestPipeline = (app: HttpApp.Default): HttpApp.Default<never, Credentials | RateLimiter | Idempotency> =>
  Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    const requestId = `req_${randomToken(20)}`
    const started = Date.now()
    const path = new URL(request.url, "http://mailroom.invalid").pathname
    const method = request.method.toUpperCase()

    yield* HttpApp.appendPreResponseHandler((_req, res) =>
      Effect.succeed(HttpServerResponse.setHeader(res, "x-request-id", requestId))
    )
    // Responses built here (429, replays, idempotency conflicts) bypass the pre-response
    // handlers, so they get the request id and limiter headers directly at the end.
    let direct: Record<string, string> = { "x-request-id": requestId }
    const run: Effect.Effect<
      HttpServerResponse.HttpServerResponse,
      unknown,
      HttpServerRequest.HttpServerRequest | Credentials | RateLimiter | Idempotency
    > = Effect.gen(function*() {
      if (isExempt(method, path)) return yield* app

      // Resolve the credential once: it decides the limiter key and the idempotency scope.
      const token = bearerToken(request.headers["authorization"])
      const principal: Option.Option<Principal> = Option.isSome(token)
        ? yield* Effect.flatMap(Credentials, (c) => c.resolve(token.value))
        : Option.none()
      if (Option.isSome(token)) yield* FiberRef.set(ResolvedPrincipal, Option.some(principal))
      const client = Option.getOrElse(request.remoteAddress, () => "unknown")
      const scope = Option.match(principal, { onNone: () => `ip:${client}`, onSome: (p) => `org:${p.orgId}` })

      const limiter = yield* RateLimiter
      const decision = yield* limiter.consume(`api:${scope}`, API_RATE_LIMIT)
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
      direct = { ...rateLimitHeaders(decision, false), ...direct }

      if (method !== "POST" || !path.startsWith("/v1/")) return yield* app
      return yield* idempotent(app, request, scope, method, path)
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
    yield* Effect.logInfo(`${method} ${path} ${response.status}`).pipe(
      Effect.annotateLogs({ request_id: requestId, duration_ms: Date.now() - started })
    )
    return HttpServerResponse.setHeaders(response, direct)
  })

/** Org-wide values; a per-resource limiter that refuses the request overwrites them with its own. */
const withLimitHeaders = (d: Decision) =>
  HttpApp.appendPreResponseHandler((_req, res) => Effect.succeed(HttpServerResponse.setHeaders(res, rateLimitHeaders(d, false))))

const idempotent = (
  app: HttpApp.Default,
  request: HttpServerRequest.HttpServerRequest,
  scope: string,
  method: string,
  path: string
): Effect.Effect<HttpServerResponse.HttpServerResponse, unknown, HttpServerRequest.HttpServerRequest | Idempotency> =>
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
      : { scope, method, path, key: `derived_${hash}`, derived: true, bodyHash: hash }
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

    // The app writes its response itself, so the record is completed just before that write:
    // a retry arriving right after the response always finds the stored result.
    yield* HttpApp.appendPreResponseHandler((_req, res) =>
      Effect.gen(function*() {
        const bytes = responseBytes(res)
        if (bytes !== undefined && storable(ref.derived, res, bytes)) {
          const headers: Record<string, string> = {}
          for (const h of REPLAYED_HEADERS) {
            const v = res.headers[h]
            if (v !== undefined) headers[h] = v
          }
          yield* store.complete(ref, { status: res.status, headers, body: bytes })
        } else {
          yield* store.release(ref)
        }
        return HttpServerResponse.setHeaders(res, echo)
      })
    )
    return yield* app.pipe(Effect.onInterrupt(() => store.release(ref)))
  })

const replay = (stored: StoredResponse, echo: Record<string, string>) =>
  HttpServerResponse.uint8Array(stored.body, {
    status: stored.status,
    headers: { ...stored.headers, ...echo, "idempotent-replayed": "true" },
    ...(stored.headers["content-type"] !== undefined ? { contentType: stored.headers["content-type"] } : {})
  })
