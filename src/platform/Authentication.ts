/** The bearer middleware: 401 `unauthorized` with `WWW-Authenticate` pointing at RFC 9728 metadata. */
import { HttpApp, HttpRouter, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Effect, FiberRef, Layer, Option } from "effect"
import { Forbidden, Unauthorized } from "../contract/Errors.js"
import { Authentication, hasScope, ScopePolicy } from "../contract/Security.js"
import { AppConfig } from "./Config.js"
import { Credentials } from "./Credentials.js"
import { ResolvedPrincipal } from "./RequestContext.js"

export const wwwAuthenticate = (publicBaseUrl: string) =>
  `Bearer realm="mailroom", resource_metadata="${publicBaseUrl}/.well-known/oauth-protected-resource"`

/** The bearer token of an `Authorization: Bearer …` header, if that is what was sent. */
export const bearerToken = (header: string | undefined): Option.Option<string> => {
  if (header === undefined) return Option.none()
  const m = /^Bearer[ ]+(\S+)\s*$/i.exec(header)
  return m ? Option.some(m[1]!) : Option.none()
}

export const AuthenticationLive = Layer.effect(
  Authentication,
  Effect.gen(function*() {
    const credentials = yield* Credentials
    const config = yield* AppConfig
    const policy = yield* ScopePolicy
    const challenge = wwwAuthenticate(config.publicBaseUrl)
    const deny = (message: string) =>
      HttpApp.appendPreResponseHandler((_req, res) =>
        Effect.succeed(HttpServerResponse.setHeader(res, "www-authenticate", challenge))
      ).pipe(Effect.zipRight(Effect.fail(new Unauthorized({ message }))))

    return Authentication.of({
      // HttpApiSecurity.bearer only slices 7 characters off the header: check the scheme here.
      bearer: () =>
        Effect.gen(function*() {
          const req = yield* HttpServerRequest.HttpServerRequest
          const header = req.headers["authorization"]
          if (header === undefined || header.trim() === "") {
            return yield* deny("missing credential: send Authorization: Bearer <api key or access token>")
          }
          const token = bearerToken(header)
          if (Option.isNone(token)) {
            return yield* deny("the Authorization header must use the Bearer scheme")
          }
          const cached = yield* FiberRef.get(ResolvedPrincipal)
          const principal = Option.isSome(cached) ? cached.value : yield* credentials.resolve(token.value)
          if (Option.isNone(principal)) {
            return yield* deny("invalid, expired or revoked credential")
          }
          yield* credentials.touch(principal.value)
          // The operation's scope, from the one table (src/policy/): this is where every operation,
          // and every MCP tool call (run through the same router), is held to a key's scopes.
          const route = yield* Effect.serviceOption(HttpRouter.RouteContext)
          const scope = Option.isSome(route) ? policy.required(route.value.route.method, route.value.route.path) : undefined
          if (scope !== undefined && !hasScope(principal.value, scope)) {
            return yield* new Forbidden({
              message: `this API key lacks the ${scope} scope`,
              details: { missing_scope: scope, scopes: principal.value.scopes ?? [] }
            })
          }
          return principal.value
        })
    })
  })
)
