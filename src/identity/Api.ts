/** Contract of the CLI and agent authentication area. */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { EmailAddress } from "../contract/EmailAddress.js"
import { IdempotencyHeaders, Ok, strict } from "../contract/Envelope.js"
import { Wire } from "../contract/Errors.js"
import { PlanLimits } from "../contract/Plans.js"
import { Authentication } from "../contract/Security.js"

export const DeviceName = Schema.String.pipe(Schema.minLength(1), Schema.maxLength(80))

export const TermsAccepted = Schema.Literal(true).annotations({
  description: "must be true",
  message: () => "must be true (accept the terms of service)"
})

export const CreateAgentAccount = strict(Schema.Struct({
  terms_accepted: TermsAccepted,
  device_name: Schema.optional(DeviceName)
})).annotations({ identifier: "CreateAgentAccount" })

export const AgentAccount = Schema.Struct({
  api_key: Schema.String.annotations({ description: "shown once" }),
  org_id: Schema.UUID,
  address: Schema.NullOr(Schema.String).annotations({ description: "managed inbox FQDN; null if publish deferred" }),
  plan: Schema.Literal("agent"),
  limits: PlanLimits,
  upgrade: Schema.Struct({
    plan: Schema.Literal("developer"),
    description: Schema.String,
    claim_path: Schema.String
  })
}).annotations({ identifier: "AgentAccount" })

export class AgentAccountsApi extends HttpApiGroup.make("agentAccounts")
  .add(
    HttpApiEndpoint.post("create", "/agent/accounts")
      .setPayload(CreateAgentAccount)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Ok(AgentAccount, "AgentAccount"), { status: 200 })
      .addError(Wire.RateLimitExceeded)
      .annotate(OpenApi.Summary, "Create an emailless agent account (agent plan, reply-only) and its API key")
  )
  .annotate(OpenApi.Description, "Emailless agent accounts")
{}

// --- CLI and agent authentication ---------------------------------------------------------------

/** Metadata serialized at most 2048 bytes. */
export const METADATA_MAX_BYTES = 2048
export const Metadata = Schema.Record({ key: Schema.String, value: Schema.Unknown }).pipe(
  Schema.filter((m) =>
    Buffer.byteLength(JSON.stringify(m), "utf8") <= METADATA_MAX_BYTES ||
    `must serialize to at most ${METADATA_MAX_BYTES} bytes of JSON`
  )
).annotations({ description: `free-form object; serialized at most ${METADATA_MAX_BYTES} bytes` })


const Secret = (description: string) => Schema.String.pipe(Schema.minLength(1)).annotations({ description })
export const VerificationCode = Schema.String.pipe(Schema.minLength(1), Schema.maxLength(32)).annotations({
  description: "the code from the verification email"
})
export const SignupCode = Schema.String.pipe(Schema.minLength(1), Schema.maxLength(128)).annotations({
  description: "reserved sign-up code from an operator"
})
const opt = <S extends Schema.Schema.Any>(s: S) => Schema.optionalWith(s, { exact: true })

export const LoginStartBody = strict(Schema.Struct({
  device_name: opt(DeviceName),
  metadata: opt(Metadata)
})).annotations({ identifier: "CliLoginStart" })

export const DeviceAuthorization = Schema.Struct({
  device_code: Schema.String.annotations({ description: "secret; poll with it" }),
  user_code: Schema.String.pipe(Schema.pattern(/^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$/)),
  verification_uri: Schema.String,
  verification_uri_complete: Schema.String,
  expires_in: Schema.Int,
  interval: Schema.Int.annotations({ description: "minimum seconds between polls" })
}).annotations({ identifier: "DeviceAuthorization" })

export const LoginPollBody = strict(Schema.Struct({ device_code: Secret("from /cli/login/start") }))
  .annotations({ identifier: "CliLoginPoll" })

const tokenSetFields = {
  api_key: Schema.String.annotations({ description: "legacy alias of access_token" }),
  key_id: Schema.UUID.annotations({ description: "legacy alias of oauth_grant_id" }),
  key_prefix: Schema.String.annotations({ description: "legacy display prefix derived from access_token" }),
  access_token: Schema.String,
  refresh_token: Schema.String,
  token_type: Schema.Literal("Bearer"),
  expires_in: Schema.Int.annotations({ description: "seconds until access_token expires" }),
  auth_method: Schema.Literal("oauth"),
  oauth_grant_id: Schema.UUID,
  oauth_client_id: Schema.String,
  org_id: Schema.UUID,
  org_name: Schema.NullOr(Schema.String)
}
export const TokenSet = Schema.Struct(tokenSetFields).annotations({ identifier: "TokenSet" })
export type TokenSet = typeof TokenSet.Type

export const Workspace = Schema.Struct({ id: Schema.UUID, name: Schema.NullOr(Schema.String) })
  .annotations({ identifier: "Workspace" })
export const AgentTokenSet = Schema.Struct({ ...tokenSetFields, orgs: Schema.Array(Workspace) })
  .annotations({ identifier: "AgentTokenSet" })

export const SignupStartBody = strict(Schema.Struct({
  email: EmailAddress,
  terms_accepted: TermsAccepted,
  signup_code: opt(SignupCode),
  device_name: opt(DeviceName),
  metadata: opt(Metadata)
})).annotations({ identifier: "SignupStart" })

export const SignupResendBody = strict(Schema.Struct({ signup_token: Secret("from the start response") }))
  .annotations({ identifier: "SignupResend" })

export const CliSignupVerifyBody = strict(Schema.Struct({
  signup_token: Secret("from the start response"),
  verification_code: VerificationCode,
  password: opt(Schema.String.pipe(Schema.minLength(1), Schema.maxLength(1024)))
})).annotations({ identifier: "CliSignupVerify" })

export const AgentSignupVerifyBody = strict(Schema.Struct({
  signup_token: Secret("from the start response"),
  verification_code: VerificationCode,
  org_id: opt(Schema.UUID.annotations({ description: "workspace to sign in to when the email belongs to several" }))
})).annotations({ identifier: "AgentSignupVerify" })

const pendingFields = {
  email: Schema.String,
  expires_in: Schema.Int.annotations({ description: "seconds until the pending signup expires" }),
  resend_after: Schema.Int.annotations({ description: "minimum seconds before another verification email" }),
  verification_code_length: Schema.Int
}
export const PendingSignup = Schema.Struct({ signup_token: Schema.String, ...pendingFields })
  .annotations({ identifier: "PendingSignup" })
export const PendingSignupResent = Schema.Struct(pendingFields).annotations({ identifier: "PendingSignupResent" })

export const RefreshBody = strict(Schema.Struct({ refresh_token: Secret("the refresh token of the current token set") }))
  .annotations({ identifier: "TokenRefresh" })

/** Some bodies are optional: an empty body means `{}` (see OptionalBody.ts). */
const optionalRequestBody = (op: Record<string, any>): Record<string, any> =>
  op.requestBody === undefined ? op : { ...op, requestBody: { ...op.requestBody, required: false } }

const post = <const Name extends string>(name: Name, path: `/${string}`) =>
  HttpApiEndpoint.post(name, path).setHeaders(IdempotencyHeaders)

export class AuthApi extends HttpApiGroup.make("auth")
  .add(
    post("loginStart", "/cli/login/start")
      .setPayload(LoginStartBody)
      .annotate(OpenApi.Transform, optionalRequestBody)
      .addSuccess(Ok(DeviceAuthorization, "DeviceAuthorization"), { status: 201 })
      .addError(Wire.ValidationError)
      .addError(Wire.RateLimitExceeded)
      .annotate(OpenApi.Summary, "Start a browser-approved CLI login (RFC 8628); the body is optional")
  )
  .add(
    post("loginPoll", "/cli/login/poll")
      .setPayload(LoginPollBody)
      .addSuccess(Ok(TokenSet, "CliLoginToken"))
      .addError(Wire.AuthorizationPending)
      .addError(Wire.SlowDown)
      .addError(Wire.ExpiredToken)
      .addError(Wire.InvalidGrant)
      .addError(Wire.AccessDenied)
      .annotate(OpenApi.Summary, "Poll a CLI login; the token set is returned once, after approval")
  )
  .add(
    post("cliSignupStart", "/cli/signup/start")
      .setPayload(SignupStartBody)
      .addSuccess(Ok(PendingSignup, "CliSignupStart"), { status: 201 })
      .addError(Wire.ValidationError)
      .addError(Wire.RateLimitExceeded)
      .annotate(OpenApi.Summary, "Start a CLI sign-up: a 6-digit code is mailed to the address")
  )
  .add(
    post("cliSignupResend", "/cli/signup/resend")
      .setPayload(SignupResendBody)
      .addSuccess(Ok(PendingSignupResent, "CliSignupResend"))
      .addError(Wire.InvalidGrant)
      .addError(Wire.ExpiredToken)
      .addError(Wire.RateLimitExceeded)
      .annotate(OpenApi.Summary, "Mail a new code (not before resend_after seconds)")
  )
  .add(
    post("cliSignupVerify", "/cli/signup/verify")
      .setPayload(CliSignupVerifyBody)
      .addSuccess(Ok(TokenSet, "CliSignupVerify"))
      .addError(Wire.ValidationError)
      .addError(Wire.InvalidGrant)
      .addError(Wire.ExpiredToken)
      .addError(Wire.RateLimitExceeded)
      .annotate(OpenApi.Summary, "Verify the emailed code: creates the account and returns a token set")
  )
  .add(
    post("agentSignupStart", "/agent/signup/start")
      .setPayload(SignupStartBody)
      .addSuccess(Ok(PendingSignup, "AgentSignupStart"), { status: 201 })
      .addError(Wire.ValidationError)
      .addError(Wire.RateLimitExceeded)
      .annotate(OpenApi.Summary, "Start an agent sign-up tied to an email (device_name names the OAuth session)")
  )
  .add(
    post("agentSignupResend", "/agent/signup/resend")
      .setPayload(SignupResendBody)
      .addSuccess(Ok(PendingSignupResent, "AgentSignupResend"))
      .addError(Wire.InvalidGrant)
      .addError(Wire.ExpiredToken)
      .addError(Wire.RateLimitExceeded)
      .annotate(OpenApi.Summary, "Mail a new code (not before resend_after seconds)")
  )
  .add(
    post("agentSignupVerify", "/agent/signup/verify")
      .setPayload(AgentSignupVerifyBody)
      .addSuccess(Ok(AgentTokenSet, "AgentSignupVerify"))
      .addError(Wire.ValidationError)
      .addError(Wire.InvalidGrant)
      .addError(Wire.ExpiredToken)
      .addError(Wire.Forbidden)
      .addError(Wire.Conflict)
      .addError(Wire.RateLimitExceeded)
      .annotate(OpenApi.Summary, "Verify the emailed code: a token set with every workspace of the email (`orgs`)")
  )
  .add(
    post("tokenRefresh", "/cli/token/refresh")
      .setPayload(RefreshBody)
      .addSuccess(Ok(TokenSet, "TokenRefresh"))
      .addError(Wire.InvalidGrant)
      .addError(Wire.RateLimitExceeded)
      .annotate(
        OpenApi.Summary,
        "Exchange a refresh token for a new token set; the refresh token rotates and the old one stops working"
      )
  )
  .annotate(OpenApi.Description, "CLI and agent sign-up, device login and token refresh (no credential needed)")
{}

// --- Claim and logout (bearer) -----------------------------------------------------------------

export const ClaimStartBody = strict(Schema.Struct({ email: EmailAddress })).annotations({ identifier: "ClaimStart" })
export const ClaimSession = Schema.Struct({
  claim_session_id: Schema.String,
  resend_after_seconds: Schema.Int,
  expires_in_seconds: Schema.Int
}).annotations({ identifier: "ClaimSession" })

export const ClaimVerifyBody = strict(Schema.Struct({ verification_code: VerificationCode }))
  .annotations({ identifier: "ClaimVerify" })
export const ClaimResult = Schema.Struct({
  org_id: Schema.UUID,
  plan: Schema.Literal("developer"),
  email: Schema.String,
  limits: PlanLimits
}).annotations({ identifier: "ClaimResult" })

/** An empty object (or no body); `Schema.Struct({})` would accept any object, so every key is refused. */
export const ClaimLinkBody = Schema.Record({ key: Schema.String, value: Schema.Never }).annotations({
  identifier: "ClaimLinkRequest",
  description: "optional; an empty object",
  parseOptions: { errors: "all" }
})
export const ClaimLink = Schema.Struct({
  claim_token: Schema.String.annotations({ description: "single use" }),
  claim_url: Schema.NullOr(Schema.String),
  expires_in_seconds: Schema.Int
}).annotations({ identifier: "ClaimLink" })

export const LogoutBody = strict(Schema.Struct({
  key_id: opt(Schema.UUID.annotations({ description: "must match the authenticated OAuth grant id or API key id" }))
})).annotations({ identifier: "CliLogout" })
export const LogoutResult = Schema.Struct({
  revoked: Schema.Boolean,
  key_id: opt(Schema.UUID),
  oauth_grant_id: opt(Schema.UUID)
}).annotations({ identifier: "CliLogoutResult" })

export class AuthSessionApi extends HttpApiGroup.make("authSession")
  .add(
    post("claimStart", "/agent/claim/start")
      .setPayload(ClaimStartBody)
      .addSuccess(Ok(ClaimSession, "ClaimStart"))
      .addError(Wire.NotFound)
      .addError(Wire.Conflict)
      .addError(Wire.RateLimitExceeded)
      .annotate(OpenApi.Summary, "Claim this agent account with a person's email: a code is mailed to it")
  )
  .add(
    post("claimVerify", "/agent/claim/verify")
      .setPayload(ClaimVerifyBody)
      .addSuccess(Ok(ClaimResult, "ClaimVerify"))
      .addError(Wire.InvalidGrant)
      .addError(Wire.NotFound)
      .addError(Wire.Conflict)
      .addError(Wire.ClaimExpired)
      .addError(Wire.RateLimitExceeded)
      .annotate(OpenApi.Summary, "Verify the claim code: the organization moves to the developer plan")
  )
  .add(
    post("claimLink", "/agent/claim/link")
      .setPayload(ClaimLinkBody)
      .annotate(OpenApi.Transform, optionalRequestBody)
      .addSuccess(Ok(ClaimLink, "ClaimLink"))
      .addError(Wire.NotFound)
      .addError(Wire.Conflict)
      .addError(Wire.RateLimitExceeded)
      .annotate(OpenApi.Summary, "A single-use link a person opens to claim this agent account in the browser")
  )
  .add(
    post("logout", "/cli/logout")
      .setPayload(LogoutBody)
      .annotate(OpenApi.Transform, optionalRequestBody)
      .addSuccess(Ok(LogoutResult, "CliLogout"))
      .addError(Wire.Forbidden)
      .addError(Wire.NotFound)
      .annotate(OpenApi.Summary, "Revoke the calling OAuth grant (API keys: legacy logout, nothing is deleted)")
  )
  .middleware(Authentication)
  .annotate(OpenApi.Description, "Claim of agent accounts and CLI logout")
{}
