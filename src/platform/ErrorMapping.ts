/**
 * API-wide error mapping, wrapped around the router before errors are encoded:
 * - decode failures of body, path, query and headers → 400 `validation_error` listing
 *   `<field>: <reason>` for each rejected field;
 * - malformed JSON (a defect inside HttpApiBuilder) → 400 `validation_error`;
 * - unknown routes → 404 `not_found`;
 * - anything unexpected → 500 `internal_error`, logged with the request id, never a stack in the body.
 */
import { HttpApiBuilder, HttpServerResponse } from "@effect/platform"
import { HttpApiDecodeError } from "@effect/platform/HttpApiError"
import { Cause, Effect, FiberRef, Option } from "effect"
import { MailroomApi } from "../Api.js"
import { envelopeOf, ErrorTable, InternalError, NotFound, ValidationError } from "../contract/Errors.js"
import { RequestId } from "./RequestContext.js"

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

export const ErrorMappingLive = HttpApiBuilder.middleware(MailroomApi, (app) =>
  Effect.catchAllCause(app, (cause) =>
    Effect.gen(function*() {
      const failure = Option.getOrUndefined(Cause.failureOption(cause)) as object | undefined
      if (failure instanceof HttpApiDecodeError) return yield* Effect.fail(validationFromDecode(failure))
      if (isApiError(failure)) return yield* Effect.failCause(cause)
      if ((failure as { _tag?: string } | undefined)?._tag === "RouteNotFound") {
        return HttpServerResponse.unsafeJson(
          envelopeOf(new NotFound({ message: "no such route; see /v1/openapi.json for the operations" })),
          { status: 404 }
        )
      }
      const defect = Option.getOrUndefined(Cause.dieOption(cause)) as { _tag?: string; reason?: string } | undefined
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
  ))
