/**
 * Optional bodies: an empty body means `{}`; anything else is JSON decoded with the
 * endpoint's strict schema, failing exactly like a declared payload (400 `validation_error`).
 */
import { HttpServerRequest } from "@effect/platform"
import { HttpApiDecodeError } from "@effect/platform/HttpApiError"
import { Effect, Schema } from "effect"
import { ValidationError } from "../contract/Errors.js"
import { validationFromDecode } from "../platform/ErrorMapping.js"

const malformed = () =>
  new ValidationError({
    message: "body: malformed JSON or unreadable request body",
    details: { issues: [{ field: "body", reason: "malformed JSON or unreadable request body" }] }
  })

export const optionalBody = <A, I>(schema: Schema.Schema<A, I, never>, request: HttpServerRequest.HttpServerRequest) =>
  Effect.gen(function*() {
    const text = yield* Effect.mapError(request.text, malformed)
    let value: unknown = {}
    if (text.trim() !== "") {
      try {
        value = JSON.parse(text)
      } catch {
        return yield* Effect.fail(malformed())
      }
    }
    return yield* Schema.decodeUnknown(schema)(value).pipe(
      Effect.catchTag("ParseError", (e) =>
        Effect.flatMap(HttpApiDecodeError.fromParseError(e), (d) => Effect.fail(validationFromDecode(d))))
    )
  })

export const clientAddress = (request: HttpServerRequest.HttpServerRequest) =>
  request.remoteAddress._tag === "Some" ? request.remoteAddress.value : "unknown"
