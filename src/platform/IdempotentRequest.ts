/**
 * A POST run under an idempotency key (the caller's `Idempotency-Key`, or one derived from the body
 * for operations that create something): the first request claims the key and its final response is
 * recorded; a retry with the same key and body gets that response replayed, one with another body or
 * while the first still runs gets 409. Which results are kept is `storable`; a result that handed out
 * a credential is never replayed to a caller without one.
 */
import { type HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Effect } from "effect"
import { Conflict, envelopeOf, ValidationError } from "../contract/Errors.js"
import { bodyLimitOf } from "./BodyLimits.js"
import { bodyHash, Idempotency, type KeyRef, type StoredResponse } from "./Idempotency.js"
import { type App, finalize, json, type Services } from "./PipelineResponse.js"

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

export const idempotent = (
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
