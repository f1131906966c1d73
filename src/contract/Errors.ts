/**
 * The error table: every tagged error of the API, its one wire `code` and its one HTTP status.
 *
 * Rows: the general codes, send and reply, outbound relay, payment, device login, sign-up and claim,
 * plus `service_unavailable` (the health probe's 503, see docs/decisions.md), `method_not_allowed`
 * (405 with `Allow` for a known path called with another method) and `unsupported_media_type` (415 for
 * a body that is not `application/json`), which the error middleware answers before routing. Handlers fail with the
 * tagged classes; endpoints declare the `Wire` schemas, which encode to the error envelope
 * `{success:false,error:{code,message,details?,gates?}}` so the OpenAPI document shows the real body
 * and the typed client decodes the envelope back into the class (so `catchTag` works on the client).
 */
import { HttpApiSchema } from "@effect/platform"
import { Schema, SchemaAST } from "effect"

/** `error.details`: a free-form object (e.g. `remediation`, `required_plan`, `valid_senders`). */
export const ErrorDetails = Schema.Record({ key: Schema.String, value: Schema.Unknown }).annotations({
  description: "Machine-readable context for the error; keys depend on the code."
})
export type ErrorDetails = typeof ErrorDetails.Type

/** One entry of `error.gates[]` (send gates). */
export const Gate = Schema.Struct({
  name: Schema.String,
  reason: Schema.String,
  message: Schema.String,
  subject: Schema.String,
  fix: Schema.optional(Schema.Struct({ action: Schema.String, subject: Schema.String })),
  docs_url: Schema.String
}).annotations({ [SchemaAST.JSONIdentifierAnnotationId]: "Gate" })
export type Gate = typeof Gate.Type

const fields = {
  message: Schema.String,
  details: Schema.optional(ErrorDetails),
  gates: Schema.optional(Schema.Array(Gate))
}

// --- General ----------------------------------------------------------------------------------
export class Unauthorized extends Schema.TaggedError<Unauthorized>()("Unauthorized", fields) {}
export class DownloadTokenExpired extends Schema.TaggedError<DownloadTokenExpired>()("DownloadTokenExpired", fields) {}
export class DownloadTokenInvalid extends Schema.TaggedError<DownloadTokenInvalid>()("DownloadTokenInvalid", fields) {}
export class Forbidden extends Schema.TaggedError<Forbidden>()("Forbidden", fields) {}
export class NotFound extends Schema.TaggedError<NotFound>()("NotFound", fields) {}
export class ValidationError extends Schema.TaggedError<ValidationError>()("ValidationError", fields) {}
export class MxConflict extends Schema.TaggedError<MxConflict>()("MxConflict", fields) {}
export class Conflict extends Schema.TaggedError<Conflict>()("Conflict", fields) {}
export class RateLimited extends Schema.TaggedError<RateLimited>()("RateLimited", fields) {}
export class RateLimitExceeded extends Schema.TaggedError<RateLimitExceeded>()("RateLimitExceeded", fields) {}
export class InternalError extends Schema.TaggedError<InternalError>()("InternalError", fields) {}
export class ServiceUnavailable extends Schema.TaggedError<ServiceUnavailable>()("ServiceUnavailable", fields) {}
export class MethodNotAllowed extends Schema.TaggedError<MethodNotAllowed>()("MethodNotAllowed", fields) {}
export class UnsupportedMediaType extends Schema.TaggedError<UnsupportedMediaType>()("UnsupportedMediaType", fields) {}
export class PayloadTooLarge extends Schema.TaggedError<PayloadTooLarge>()("PayloadTooLarge", fields) {}
// --- Send and reply ---------------------------------------------------------------------------
export class RecipientNotAllowed extends Schema.TaggedError<RecipientNotAllowed>()("RecipientNotAllowed", fields) {}
export class CannotSendFromDomain extends Schema.TaggedError<CannotSendFromDomain>()("CannotSendFromDomain", fields) {}
export class InboundNotRepliable extends Schema.TaggedError<InboundNotRepliable>()("InboundNotRepliable", fields) {}
export class NotScheduled extends Schema.TaggedError<NotScheduled>()("NotScheduled", fields) {}
export class DiscardNotEnabled extends Schema.TaggedError<DiscardNotEnabled>()("DiscardNotEnabled", fields) {}
export class LoopDetected extends Schema.TaggedError<LoopDetected>()("LoopDetected", fields) {}
export class RecipientSuppressed extends Schema.TaggedError<RecipientSuppressed>()("RecipientSuppressed", fields) {}
export class SearchTimeout extends Schema.TaggedError<SearchTimeout>()("SearchTimeout", fields) {}
// --- Outbound relay ---------------------------------------------------------------------------
export class OutboundCapacityExhausted
  extends Schema.TaggedError<OutboundCapacityExhausted>()("OutboundCapacityExhausted", fields)
{}
export class OutboundUnreachable extends Schema.TaggedError<OutboundUnreachable>()("OutboundUnreachable", fields) {}
export class OutboundRelayTimeout extends Schema.TaggedError<OutboundRelayTimeout>()("OutboundRelayTimeout", fields) {}
export class OutboundRelayFailed extends Schema.TaggedError<OutboundRelayFailed>()("OutboundRelayFailed", fields) {}
export class OutboundResponseMalformed
  extends Schema.TaggedError<OutboundResponseMalformed>()("OutboundResponseMalformed", fields)
{}
export class OutboundKeyInvalid extends Schema.TaggedError<OutboundKeyInvalid>()("OutboundKeyInvalid", fields) {}
// --- Payments (x402) --------------------------------------------------------------------------
export class FeatureDisabled extends Schema.TaggedError<FeatureDisabled>()("FeatureDisabled", fields) {}
export class NoPayoutAddress extends Schema.TaggedError<NoPayoutAddress>()("NoPayoutAddress", fields) {}
export class PaymentDeclined extends Schema.TaggedError<PaymentDeclined>()("PaymentDeclined", fields) {}
export class PaymentVerificationFailed
  extends Schema.TaggedError<PaymentVerificationFailed>()("PaymentVerificationFailed", fields)
{}
export class SettlementFailed extends Schema.TaggedError<SettlementFailed>()("SettlementFailed", fields) {}
export class ChallengeExpired extends Schema.TaggedError<ChallengeExpired>()("ChallengeExpired", fields) {}
// --- Device login, sign-up, claim ---------------------------------------------------------------
export class AuthorizationPending extends Schema.TaggedError<AuthorizationPending>()("AuthorizationPending", fields) {}
export class SlowDown extends Schema.TaggedError<SlowDown>()("SlowDown", fields) {}
export class ExpiredToken extends Schema.TaggedError<ExpiredToken>()("ExpiredToken", fields) {}
export class InvalidGrant extends Schema.TaggedError<InvalidGrant>()("InvalidGrant", fields) {}
export class AccessDenied extends Schema.TaggedError<AccessDenied>()("AccessDenied", fields) {}
export class ClaimExpired extends Schema.TaggedError<ClaimExpired>()("ClaimExpired", fields) {}

/** The single source of truth: tag → class, code, status. */
export const ErrorTable = {
  Unauthorized: { error: Unauthorized, code: "unauthorized", status: 401 },
  DownloadTokenExpired: { error: DownloadTokenExpired, code: "download_token_expired", status: 401 },
  DownloadTokenInvalid: { error: DownloadTokenInvalid, code: "download_token_invalid", status: 401 },
  Forbidden: { error: Forbidden, code: "forbidden", status: 403 },
  NotFound: { error: NotFound, code: "not_found", status: 404 },
  ValidationError: { error: ValidationError, code: "validation_error", status: 400 },
  MxConflict: { error: MxConflict, code: "mx_conflict", status: 409 },
  Conflict: { error: Conflict, code: "conflict", status: 409 },
  RateLimited: { error: RateLimited, code: "rate_limited", status: 429 },
  RateLimitExceeded: { error: RateLimitExceeded, code: "rate_limit_exceeded", status: 429 },
  InternalError: { error: InternalError, code: "internal_error", status: 500 },
  ServiceUnavailable: { error: ServiceUnavailable, code: "service_unavailable", status: 503 },
  MethodNotAllowed: { error: MethodNotAllowed, code: "method_not_allowed", status: 405 },
  UnsupportedMediaType: { error: UnsupportedMediaType, code: "unsupported_media_type", status: 415 },
  PayloadTooLarge: { error: PayloadTooLarge, code: "payload_too_large", status: 413 },
  RecipientNotAllowed: { error: RecipientNotAllowed, code: "recipient_not_allowed", status: 403 },
  CannotSendFromDomain: { error: CannotSendFromDomain, code: "cannot_send_from_domain", status: 403 },
  InboundNotRepliable: { error: InboundNotRepliable, code: "inbound_not_repliable", status: 422 },
  NotScheduled: { error: NotScheduled, code: "not_scheduled", status: 409 },
  DiscardNotEnabled: { error: DiscardNotEnabled, code: "discard_not_enabled", status: 403 },
  LoopDetected: { error: LoopDetected, code: "loop_detected", status: 429 },
  RecipientSuppressed: { error: RecipientSuppressed, code: "recipient_suppressed", status: 422 },
  SearchTimeout: { error: SearchTimeout, code: "search_timeout", status: 504 },
  OutboundCapacityExhausted: { error: OutboundCapacityExhausted, code: "outbound_capacity_exhausted", status: 503 },
  OutboundUnreachable: { error: OutboundUnreachable, code: "outbound_unreachable", status: 502 },
  OutboundRelayTimeout: { error: OutboundRelayTimeout, code: "outbound_relay_timeout", status: 504 },
  OutboundRelayFailed: { error: OutboundRelayFailed, code: "outbound_relay_failed", status: 502 },
  OutboundResponseMalformed: { error: OutboundResponseMalformed, code: "outbound_response_malformed", status: 502 },
  OutboundKeyInvalid: { error: OutboundKeyInvalid, code: "outbound_key_invalid", status: 500 },
  FeatureDisabled: { error: FeatureDisabled, code: "feature_disabled", status: 403 },
  NoPayoutAddress: { error: NoPayoutAddress, code: "no_payout_address", status: 422 },
  PaymentDeclined: { error: PaymentDeclined, code: "payment_declined", status: 422 },
  PaymentVerificationFailed: { error: PaymentVerificationFailed, code: "payment_verification_failed", status: 422 },
  SettlementFailed: { error: SettlementFailed, code: "settlement_failed", status: 502 },
  ChallengeExpired: { error: ChallengeExpired, code: "challenge_expired", status: 422 },
  AuthorizationPending: { error: AuthorizationPending, code: "authorization_pending", status: 400 },
  SlowDown: { error: SlowDown, code: "slow_down", status: 400 },
  ExpiredToken: { error: ExpiredToken, code: "expired_token", status: 400 },
  InvalidGrant: { error: InvalidGrant, code: "invalid_grant", status: 400 },
  AccessDenied: { error: AccessDenied, code: "access_denied", status: 403 },
  ClaimExpired: { error: ClaimExpired, code: "claim_expired", status: 410 }
} as const

type Table = typeof ErrorTable
export type ErrorTag = keyof Table
export type ApiError = InstanceType<Table[ErrorTag]["error"]>
export type ErrorCode = Table[ErrorTag]["code"]

/** The wire form of the error envelope for one code. */
export interface ErrorEnvelope<C extends string> {
  readonly success: false
  readonly error: {
    readonly code: C
    readonly message: string
    readonly details?: { readonly [x: string]: unknown }
    readonly gates?: ReadonlyArray<Schema.Schema.Encoded<typeof Gate>>
  }
}

const envelopeStruct = <C extends string>(code: C) =>
  Schema.Struct({
    success: Schema.Literal(false),
    error: Schema.Struct({
      code: Schema.Literal(code),
      message: Schema.String,
      details: Schema.optional(ErrorDetails),
      gates: Schema.optional(Schema.Array(Gate))
    })
  })

type AnyErrorClass = new(props: {
  message: string
  details?: ErrorDetails
  gates?: ReadonlyArray<Gate>
}) => ApiError

const toWire = (tag: ErrorTag): Schema.Schema.Any => {
  const { code, error: cls, status } = ErrorTable[tag]
  const Cls = cls as unknown as AnyErrorClass
  return Schema.transform(
    envelopeStruct(code),
    Schema.typeSchema(cls as unknown as Schema.Schema<ApiError>),
    {
      strict: false,
      decode: (body) =>
        new Cls({
          message: body.error.message,
          ...(body.error.details !== undefined ? { details: body.error.details } : {}),
          ...(body.error.gates !== undefined ? { gates: body.error.gates } : {})
        }),
      encode: (e: ApiError) => ({
        success: false as const,
        error: {
          code,
          message: e.message,
          ...(e.details !== undefined ? { details: e.details } : {}),
          ...(e.gates !== undefined ? { gates: e.gates } : {})
        }
      })
    }
  ).annotations(
    HttpApiSchema.annotations({
      status,
      description: code,
      [SchemaAST.JSONIdentifierAnnotationId]: `${tag}Error`
    })
  )
}

type WireTable = { readonly [K in ErrorTag]: Schema.Schema<InstanceType<Table[K]["error"]>, ErrorEnvelope<Table[K]["code"]>> }

/** Envelope schemas to declare on endpoints: `.addError(Wire.NotFound)`. */
export const Wire: WireTable = Object.fromEntries(
  (Object.keys(ErrorTable) as Array<ErrorTag>).map((tag) => [tag, toWire(tag)])
) as unknown as WireTable

/** The envelope body of an error, for responses built outside an endpoint (router fallbacks). */
export const envelopeOf = (e: ApiError): ErrorEnvelope<ErrorCode> => {
  const row = ErrorTable[e._tag]
  return {
    success: false,
    error: {
      code: row.code,
      message: e.message,
      ...(e.details !== undefined ? { details: e.details } : {}),
      ...(e.gates !== undefined ? { gates: e.gates } : {})
    }
  }
}

export const statusOf = (e: ApiError): number => ErrorTable[e._tag].status
