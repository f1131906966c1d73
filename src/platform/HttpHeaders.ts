/** Response-header helpers for handlers. */
import { HttpApp, HttpServerResponse } from "@effect/platform"
import { Effect } from "effect"

/** Token-issuing and claim responses must never be cached. */
export const noStore = HttpApp.appendPreResponseHandler((_req, res) =>
  Effect.succeed(HttpServerResponse.setHeaders(res, { "cache-control": "no-store", pragma: "no-cache" }))
)

export const setHeader = (name: string, value: string) =>
  HttpApp.appendPreResponseHandler((_req, res) => Effect.succeed(HttpServerResponse.setHeader(res, name, value)))
