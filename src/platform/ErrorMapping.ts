/**
 * API-wide input screening and error mapping, wrapped around the router before errors are encoded:
 * - a body on an operation that reads JSON sent with another Content-Type → 415 `unsupported_media_type`;
 * - U+0000 anywhere in the input, or JSON nested too deep (see InputScreen) → 400 `validation_error`;
 * - decode failures of body, path, query and headers → 400 `validation_error` listing
 *   `<field>: <reason>` for each rejected field;
 * - malformed JSON (a defect inside HttpApiBuilder) → 400 `validation_error`;
 * - a known path with another method → 405 `method_not_allowed` with `Allow` (with its own method, the router
 *   refused a path parameter past its length limit: 400 `validation_error`); unknown routes → 404 `not_found`;
 * - anything unexpected → 500 `internal_error`, logged with the request id, never a stack in the body.
 */
import { type HttpApp, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { HttpApiDecodeError } from "@effect/platform/HttpApiError"
import { Cause, Effect, FiberRef, Option } from "effect"
import {
  envelopeOf,
  ErrorTable,
  InternalError,
  MethodNotAllowed,
  NotFound,
  statusOf,
  UnsupportedMediaType,
  ValidationError
} from "../contract/Errors.js"
import {
  DEPTH_REASON,
  isFormMediaType,
  isJsonMediaType,
  jsonDeeperThan,
  MAX_JSON_DEPTH,
  NUL_REASON,
  nulInJson,
  nulInParams,
  nulSegment
} from "./InputScreen.js"
import { bodyLimitOf, tooLarge } from "./BodyLimits.js"
import { pathOf, RequestId } from "./RequestContext.js"
import type { RouteTable } from "./RouteTable.js"

const isApiError = (u: unknown): boolean => {
  if (typeof u !== "object" || u === null || !("_tag" in u) || typeof u._tag !== "string") return false
  if (!(u._tag in ErrorTable)) return false
  const cls: unknown = ErrorTable[u._tag as keyof typeof ErrorTable].error
  return u instanceof (cls as new(...args: Array<never>) => object)
}

const fieldOf = (path: ReadonlyArray<PropertyKey>) =>
  path.length === 0 ? "body" : path.map((p) => typeof p === "number" ? `[${p}]` : String(p)).join(".").replace(/\.\[/g, "[")

/** Fields whose values are never echoed back in an error message. */
const SECRET_FIELD = /password|code|token|secret|key/i

/** Keeps reasons readable and free of echoed secrets: long `actual` values are cut, secret ones dropped. */
const tidyReason = (field: string, reason: string) => {
  const at = reason.indexOf(", actual ")
  if (at < 0) return reason
  if (SECRET_FIELD.test(field)) return reason.slice(0, at)
  const actual = reason.slice(at + 9)
  return actual.length > 60 ? `${reason.slice(0, at + 9)}${actual.slice(0, 57)}…` : reason
}

export const validationFromDecode = (e: HttpApiDecodeError): ValidationError => {
  const all = e.issues.map((i) => ({ field: fieldOf(i.path), reason: i.message }))
  // An optional field's union adds "Expected undefined" next to the real reason: drop that echo.
  const issues = all
    .filter((i) => !(i.reason.startsWith("Expected undefined") && all.some((o) => o.field === i.field && o !== i)))
    .map((i) => ({ field: i.field, reason: tidyReason(i.field, i.reason) }))
  // One line per field, in order, without repeating an identical line.
  const lines = [...new Set(issues.map((i) => `${i.field}: ${i.reason}`))]
  return new ValidationError({ message: lines.join("; "), details: { issues } })
}

export const internalErrorResponse = (requestId: string) =>
  HttpServerResponse.unsafeJson(
    envelopeOf(
      new InternalError({
        message: "internal error; the request id identifies it in the service logs",
        details: { request_id: requestId }
      })
    ),
    { status: 500 }
  )

const invalid = (field: string, reason: string) =>
  new ValidationError({ message: `${field}: ${reason}`, details: { issues: [{ field, reason }] } })

const BODY_METHODS = new Set(["POST", "PUT", "PATCH"])

/**
 * Refuses what must not reach a decoder or a handler: a body in the wrong media type, U+0000 in any
 * value, JSON nested too deep. Runs before routing, so it covers the browser pages too.
 */
const screen = (
  routes: RouteTable
): Effect.Effect<Option.Option<ValidationError | UnsupportedMediaType>, never, HttpServerRequest.HttpServerRequest> =>
  Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    const method = request.method.toUpperCase()
    const path = pathOf(request.url)
    // The route is looked up only when it is needed (a NUL in the path, a body to screen).
    const routeOf = () => routes.match(method, path)

    // A segment that is not percent-encoded UTF-8 names nothing (`/memories/%FF`): refused as input,
    // not routed to a method that then looks missing.
    const undecodable = path.split("/").find((seg) => {
      try {
        decodeURIComponent(seg)
        return false
      } catch {
        return true
      }
    })
    if (undecodable !== undefined) return Option.some(invalid("path", `${undecodable.slice(0, 60)} is not percent-encoded UTF-8`))
    const segment = nulSegment(path)
    if (segment !== undefined) {
      const raw = path.split("/")[segment] ?? ""
      const route = routeOf()
      const param = route === undefined ? undefined : Object.entries(route.params).find(([, v]) => v === raw)?.[0]
      return Option.some(invalid(param ?? "path", NUL_REASON))
    }
    if (request.url.includes("?")) {
      const query = nulInParams(new URL(request.url, "http://mailroom.invalid").search.slice(1))
      if (query !== undefined) return Option.some(invalid(query, NUL_REASON))
    }

    if (!BODY_METHODS.has(method)) return Option.none()
    const route = routeOf()
    const contentType = request.headers["content-type"]
    const json = isJsonMediaType(contentType)
    const form = isFormMediaType(contentType)
    if (!json && !form && route?.readsJson !== true) return Option.none()
    const text = yield* Effect.option(request.text)
    if (Option.isNone(text) || text.value === "") return Option.none()
    if (route?.readsJson === true && !json) {
      return Option.some(
        new UnsupportedMediaType({
          message: `${method} ${route.template} reads a JSON body: send it with the header Content-Type: application/json (got ${
            contentType === undefined || contentType === "" ? "no Content-Type" : contentType
          })`,
          details: { expected: "application/json", received: contentType ?? null }
        })
      )
    }
    if (json) {
      if (jsonDeeperThan(text.value, MAX_JSON_DEPTH)) return Option.some(invalid("body", DEPTH_REASON))
      const field = nulInJson(text.value)
      if (field !== undefined) return Option.some(invalid(field, NUL_REASON))
    } else {
      const field = nulInParams(text.value)
      if (field !== undefined) return Option.some(invalid(field, NUL_REASON))
    }
    return Option.none()
  })

const allowedResponse = (method: string, path: string, allow: ReadonlyArray<string>) =>
  HttpServerResponse.unsafeJson(
    envelopeOf(
      new MethodNotAllowed({
        message: `${method} is not allowed on ${path}; this path accepts ${allow.join(", ")}`,
        details: { allow }
      })
    ),
    { status: 405, headers: { allow: allow.join(", ") } }
  )

/**
 * The API-wide middleware; the composition root installs it over the one HttpApi
 * (`HttpApiBuilder.middleware(MailroomApi, apiMiddleware(RouteTable.of(MailroomApi)))`), so this
 * floor never imports the contract of the areas above it.
 */
export const apiMiddleware = (routes: RouteTable) => <E, R>(app: HttpApp.Default<E, R>) =>
  Effect.gen(function*() {
    const refusal = yield* screen(routes)
    if (Option.isNone(refusal)) return yield* app
    const e = refusal.value
    if (e._tag === "ValidationError") return yield* Effect.fail(e)
    return HttpServerResponse.unsafeJson(envelopeOf(e), { status: statusOf(e) })
  }).pipe(
    Effect.catchAllCause((cause) =>
      Effect.gen(function*() {
        const failure = Option.getOrUndefined(Cause.failureOption(cause)) as object | undefined
        if (failure instanceof HttpApiDecodeError) return yield* Effect.fail(validationFromDecode(failure))
        if (isApiError(failure)) return yield* Effect.failCause(cause)
        if ((failure as { _tag?: string } | undefined)?._tag === "RouteNotFound") {
          const request = yield* HttpServerRequest.HttpServerRequest
          const path = pathOf(request.url)
          const allow = routes.allowed(path)
          const method = request.method.toUpperCase()
          // The path and method name an operation, yet the router refused it: a path parameter past
          // the router's length limit. That is the request's fault, not a method the path lacks.
          if (allow.includes(method) || (method === "HEAD" && allow.includes("GET"))) {
            return yield* Effect.fail(
              new ValidationError({
                message: "path: a path parameter is too long",
                details: { issues: [{ field: "path", reason: "a path parameter is too long" }] }
              })
            )
          }
          if (allow.length > 0) return allowedResponse(method, path, allow)
          return HttpServerResponse.unsafeJson(
            envelopeOf(new NotFound({ message: "no such route; see /v1/openapi.json for the operations" })),
            { status: 404 }
          )
        }
        const defect = Option.getOrUndefined(Cause.dieOption(cause)) as
          | { _tag?: string; reason?: string; cause?: { message?: unknown } }
          | undefined
        // A body that declared no length (chunked) and ran past the operation's limit while read.
        // The platform tells it only by its message (@effect/platform-node's body reader);
        // test/transport-edges.test.ts fails if that message changes.
        if (defect?._tag === "RequestError" && defect.cause?.message === "maxBytes exceeded") {
          return tooLarge(bodyLimitOf(pathOf((yield* HttpServerRequest.HttpServerRequest).url)), false)
        }
        if (defect?._tag === "RequestError") {
          return yield* Effect.fail(
            new ValidationError({
              message: "body: malformed JSON or unreadable request body",
              details: { issues: [{ field: "body", reason: "malformed JSON or unreadable request body" }] }
            })
          )
        }
        if (Cause.isInterruptedOnly(cause)) return yield* Effect.failCause(cause)
        const requestId = yield* FiberRef.get(RequestId)
        yield* Effect.logError("unhandled fault", cause).pipe(Effect.annotateLogs("request_id", requestId))
        return internalErrorResponse(requestId)
      })
    )
  )
