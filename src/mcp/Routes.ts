/**
 * A tool call's operation, run as the API's router would run it, minus the lookup: the route the
 * HttpApi registered for the tool's method and path is found once, and a call runs that route's
 * handler (its path, query and body decoding, its group's middleware: the bearer check and the
 * operation's scope, the handler, the success encoding) inside the API-wide middleware (input screen,
 * error mapping) and the API's error encoding, with the route context and parsed query the router
 * would have given it. Same handler, same answers; what is skipped is the second router pass of the
 * request already routed to `/mcp` (a copy of the request context, the path match, the query parse).
 *
 * A call the router would refuse by itself (a path parameter past its length limit) is left to the
 * router: `undefined` here, and the caller runs the whole app.
 */
import { HttpApi, HttpApiBuilder, HttpRouter, HttpServerRequest, type HttpServerResponse } from "@effect/platform"
import { Chunk, Effect } from "effect"
import type { ToolSpec } from "./Tools.js"

/** Longest path parameter the API's router accepts (see platform/HttpServing.ts). */
const MAX_PARAM_LENGTH = 4096

/** Typed as the API's app is: the global middleware turns what no error schema encodes into a 500. */
type RouteApp = Effect.Effect<HttpServerResponse.HttpServerResponse, never, HttpServerRequest.HttpServerRequest>

export type OperationRoutes = (spec: ToolSpec, url: string) => RouteApp | undefined

/** The path parameters of `url` by `spec.path`'s `:name` segments, decoded as the router decodes them. */
const paramsOf = (spec: ToolSpec, pathname: string): Record<string, string> | undefined => {
  if (spec.pathKeys.length === 0) return {}
  const pattern = spec.path.split("/")
  const segments = pathname.split("/")
  if (pattern.length !== segments.length) return undefined
  const params: Record<string, string> = {}
  for (let i = 0; i < pattern.length; i++) {
    const p = pattern[i]!
    if (!p.startsWith(":")) continue
    const raw = segments[i]!
    if (raw.length > MAX_PARAM_LENGTH) return undefined
    try {
      params[p.slice(1)] = decodeURIComponent(raw)
    } catch {
      return undefined
    }
  }
  return params
}

/** The query as the router parses it: a repeated key becomes an array. */
const searchParamsOf = (query: string): Record<string, string | Array<string>> => {
  const out: Record<string, string | Array<string>> = {}
  for (const [key, value] of new URLSearchParams(query)) {
    const seen = out[key]
    out[key] = seen === undefined ? value : Array.isArray(seen) ? [...seen, value] : [seen, value]
  }
  return out
}

/**
 * The API's routes by method and path, built once every route is registered (at the first call).
 * Needs the API's router, its declaration and its global middleware.
 */
export const operationRoutes = Effect.gen(function*() {
  const { api, context: apiContext } = yield* HttpApi.Api
  // API-level middleware would sit between the router and the global middleware: none is declared,
  // and were one added, every call would take the router's way (the caller runs the whole app).
  if (api.middlewares.size > 0) return (() => undefined) satisfies OperationRoutes
  const router = yield* (yield* HttpApiBuilder.Router).router
  const global = yield* (yield* HttpApiBuilder.Middleware).retrieve
  const encodeErrors = yield* Effect.provide(HttpApiBuilder.buildMiddleware(api), apiContext)
  const byKey = new Map<string, HttpRouter.Route<unknown, unknown>>()
  for (const route of Chunk.toReadonlyArray(router.routes)) byKey.set(`${route.method} ${route.path}`, route as HttpRouter.Route<unknown, unknown>)
  const routes: OperationRoutes = (spec, url) => {
    const route = byKey.get(`${spec.method} ${spec.path}`)
    if (route === undefined || route.prefix._tag === "Some") return undefined
    const q = url.indexOf("?")
    const params = paramsOf(spec, q < 0 ? url : url.slice(0, q))
    if (params === undefined) return undefined
    const routeContext: HttpRouter.RouteContext = { [HttpRouter.RouteContextTypeId]: HttpRouter.RouteContextTypeId, params, route }
    const handled = route.handler.pipe(
      Effect.provideService(HttpRouter.RouteContext, routeContext),
      Effect.provideService(HttpServerRequest.ParsedSearchParams, q < 0 ? {} : searchParamsOf(url.slice(q + 1)))
    ) as RouteApp
    const app = route.uninterruptible ? handled : Effect.interruptible(handled)
    return encodeErrors(global(app) as Effect.Effect<HttpServerResponse.HttpServerResponse, unknown>) as unknown as RouteApp
  }
  return routes
})
