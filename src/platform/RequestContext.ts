/**
 * Per-request state shared between the serving pipeline (outermost) and the API middleware
 * (innermost). They run on the same fiber, so fiber refs carry it without threading services.
 */
import { Effect, FiberRef, Option } from "effect"
import type { Principal } from "../contract/Security.js"
import { randomToken } from "./Secrets.js"

/** Correlates a response with its log lines; also sent back as `x-request-id`. */
export const RequestId = FiberRef.unsafeMake<string>("")

/** A new request's id (`x-request-id`), wherever it is answered. */
export const newRequestId = () => `req_${randomToken(20)}`

/** A request's access log line, at info (callers skip building it when info is off). */
export const accessLine = (method: string, path: string, status: number, requestId: string, started: number) =>
  Effect.logInfo(`${method} ${path} ${status}`).pipe(
    Effect.annotateLogs({ request_id: requestId, duration_ms: Date.now() - started })
  )

/**
 * The bearer credential as resolved once by the pipeline (for rate limiting and idempotency
 * scope). `None`: not resolved here; `Some(None)`: presented but invalid.
 */
export const ResolvedPrincipal = FiberRef.unsafeMake<Option.Option<Option.Option<Principal>>>(Option.none())

/** A path that `new URL` would give back unchanged: no dot segments, escapes or other characters to normalize. */
const PLAIN_PATH = /^\/(?!\/)[A-Za-z0-9_\-/]*$/

/**
 * The pathname of a request target, exactly as `new URL(url, base).pathname` gives it; the common
 * plain path is taken as it is, without building a URL (every request needs it, several times).
 */
export const pathOf = (url: string): string => {
  const q = url.indexOf("?")
  const path = q < 0 ? url : url.slice(0, q)
  return PLAIN_PATH.test(path) ? path : new URL(url, "http://mailroom.invalid").pathname
}
