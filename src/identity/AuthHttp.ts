/** Handlers of sign-up, device login, token refresh (public) and claim + logout (bearer). */
import { HttpServerRequest } from "@effect/platform"
import { Effect, Layer } from "effect"
import { MailroomApi } from "../Api.js"
import { Forbidden, NotFound } from "../contract/Errors.js"
import { CurrentPrincipal } from "../contract/Security.js"
import * as ApiGroup from "../platform/ApiGroup.js"
import { noStore } from "../platform/HttpHeaders.js"
import { RateLimiter } from "../platform/RateLimiter.js"
import { ClaimLinkBody, LoginStartBody, LogoutBody } from "./Api.js"
import { Accounts } from "./Accounts.js"
import { Claim } from "./Claim.js"
import { DeviceLogin } from "./DeviceLogin.js"
import { Grants } from "./Grants.js"
import { clientAddress, optionalBody } from "./OptionalBody.js"
import { Signup } from "./Signup.js"

export const LOGIN_START_PER_ADDRESS = { limit: 30, windowSeconds: 3600 } as const
export const REFRESH_PER_ADDRESS = { limit: 120, windowSeconds: 3600 } as const

const address = Effect.map(HttpServerRequest.HttpServerRequest, clientAddress)

export const AuthHttpLive = ApiGroup.group(MailroomApi, "auth", (handlers) =>
  Effect.gen(function*() {
    const signup = yield* Signup
    const device = yield* DeviceLogin
    const grants = yield* Grants
    const limiter = yield* RateLimiter
    return handlers
      .handleRaw("loginStart", ({ request }) =>
        Effect.gen(function*() {
          yield* noStore
          const payload = yield* optionalBody(LoginStartBody, request)
          yield* limiter.enforce(`login-start:ip:${clientAddress(request)}`, LOGIN_START_PER_ADDRESS, "CLI logins from this address")
          return yield* device.start(payload)
        }))
      .handle("loginPoll", ({ payload }) => Effect.zipRight(noStore, device.poll(payload.device_code)))
      .handle("cliSignupStart", ({ payload }) =>
        Effect.gen(function*() {
          yield* noStore
          return yield* signup.start("cli", payload, yield* address)
        }))
      .handle("cliSignupResend", ({ payload }) => Effect.zipRight(noStore, signup.resend("cli", payload.signup_token)))
      .handle("cliSignupVerify", ({ payload }) =>
        Effect.gen(function*() {
          yield* noStore
          return yield* signup.verifyCli(payload, yield* address)
        }))
      .handle("agentSignupStart", ({ payload }) =>
        Effect.gen(function*() {
          yield* noStore
          return yield* signup.start("agent", payload, yield* address)
        }))
      .handle("agentSignupResend", ({ payload }) => Effect.zipRight(noStore, signup.resend("agent", payload.signup_token)))
      .handle("agentSignupVerify", ({ payload }) =>
        Effect.gen(function*() {
          yield* noStore
          return yield* signup.verifyAgent(payload, yield* address)
        }))
      .handle("tokenRefresh", ({ payload }) =>
        Effect.gen(function*() {
          yield* noStore
          yield* limiter.enforce(`token-refresh:ip:${yield* address}`, REFRESH_PER_ADDRESS, "token refreshes from this address")
          return yield* grants.refresh(payload.refresh_token)
        }))
  }))

export const AuthSessionHttpLive = ApiGroup.group(MailroomApi, "authSession", (handlers) =>
  Effect.gen(function*() {
    const claim = yield* Claim
    const grants = yield* Grants
    return handlers
      .handle("claimStart", ({ payload }) =>
        Effect.gen(function*() {
          yield* noStore
          const principal = yield* CurrentPrincipal
          return yield* claim.start(principal.orgId, payload.email)
        }))
      .handle("claimVerify", ({ payload }) =>
        Effect.gen(function*() {
          yield* noStore
          const principal = yield* CurrentPrincipal
          return yield* claim.verify(principal.orgId, payload.verification_code)
        }))
      .handleRaw("claimLink", ({ request }) =>
        Effect.gen(function*() {
          yield* noStore
          yield* optionalBody(ClaimLinkBody, request)
          const principal = yield* CurrentPrincipal
          return yield* claim.link(principal.orgId)
        }))
      .handleRaw("logout", ({ request }) =>
        Effect.gen(function*() {
          // Two credentials of one organization send the same body: a derived idempotency key
          // (scoped to the organization) must never replay one's logout to the other.
          yield* noStore
          const payload = yield* optionalBody(LogoutBody, request)
          const principal = yield* CurrentPrincipal
          const own = principal.credential.id
          if (payload.key_id !== undefined && payload.key_id !== own) {
            // Another credential of the same organization: forbidden; anything else: not found.
            const exists = yield* grants.credentialExists(principal.orgId, payload.key_id)
            return yield* Effect.fail(
              exists
                ? new Forbidden({ message: "key_id must be the credential making this request" })
                : new NotFound({ message: "no credential with this key_id" })
            )
          }
          if (principal.credential.kind === "oauth") {
            yield* grants.revoke(own)
            return { revoked: true, oauth_grant_id: own }
          }
          return { revoked: false, key_id: own }
        }))
  }))

export const IdentityServicesLive = Layer.mergeAll(
  Signup.Default,
  DeviceLogin.Default,
  Claim.Default,
  Grants.Default,
  Accounts.Default
)

export const IdentityHttpLive = Layer.mergeAll(AuthHttpLive, AuthSessionHttpLive).pipe(
  Layer.provide(IdentityServicesLive)
)
