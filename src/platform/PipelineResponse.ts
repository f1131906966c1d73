/**
 * Responses as the request pipeline sends them: its own refusals are JSON envelopes built without the
 * router, and every response gets the pre-response hooks registered so far applied exactly once
 * (`finalize`), so what is recorded (idempotency) and logged is what was written, with its request id.
 */
import { HttpApp, type HttpRouter, type HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Effect, FiberRef, Option } from "effect"

export type Services = HttpRouter.HttpRouter.DefaultServices | HttpServerRequest.HttpServerRequest
/** The router the pipeline wraps. */
export type App = HttpApp.Default<never, Services>

export const json = (body: unknown, status: number, headers: Record<string, string>) =>
  HttpServerResponse.unsafeJson(body, { status, headers })

export const withRequestId = (response: HttpServerResponse.HttpServerResponse, requestId: string) =>
  HttpServerResponse.setHeader(response, "x-request-id", requestId)

/** Applies (and consumes) the pre-response hooks registered so far: the response as it will be sent. */
export const finalize = (request: HttpServerRequest.HttpServerRequest, response: HttpServerResponse.HttpServerResponse) =>
  Effect.gen(function*() {
    const hooks = yield* FiberRef.get(HttpApp.currentPreResponseHandlers)
    if (Option.isNone(hooks)) return response
    yield* FiberRef.set(HttpApp.currentPreResponseHandlers, Option.none())
    return yield* hooks.value(request, response)
  })
