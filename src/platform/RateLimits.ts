/**
 * Which rate-limit window a request counts against (its organization's, its client address's, the
 * demo's own) and which requests count against none, with the 429 and the `ratelimit-*` headers a
 * counted request carries. The counting itself is `Admission` and `RateLimiter`.
 */
import { HttpApp, HttpServerResponse } from "@effect/platform"
import { Effect } from "effect"
import { envelopeOf, RateLimited } from "../contract/Errors.js"
import { json } from "./PipelineResponse.js"
import { type Decision, rateLimitHeaders } from "./RateLimiter.js"

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

export const limited = (decision: Decision) =>
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

/** Org-wide values; a per-resource limiter that refuses the request overwrites them with its own. */
export const withLimitHeaders = (d: Decision) =>
  HttpApp.appendPreResponseHandler((_req, res) => Effect.succeed(HttpServerResponse.setHeaders(res, rateLimitHeaders(d, false))))
