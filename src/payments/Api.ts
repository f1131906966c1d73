/** Contract of the Payments area: x402 challenges and payments, payout addresses, the payer's spend policy. */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { allErrors, DateTimeString, IdempotencyHeaders, IdPath, Ok, OkList, strict, Uuid } from "../contract/Envelope.js"
import { Wire } from "../contract/Errors.js"
import { withOutboundErrors } from "../contract/Outbound.js"
import { ListQuery } from "../contract/Paging.js"
import { Authentication } from "../contract/Security.js"
import { SentEmail } from "../sending/Api.js"
import { addressProblemText, parseEvmAddress } from "./Address.js"

export const MAX_ALLOWLIST = 100
export const MIN_EXPIRES_IN = 30
export const MAX_EXPIRES_IN = 7 * 86_400
export const DEFAULT_EXPIRES_IN = 3600

export const Amount = Schema.String.pipe(
  Schema.pattern(/^(0|[1-9]\d{0,17})(\.\d{1,6})?$/, {
    message: () => "must be a decimal string such as \"1.5\" (at most 6 decimals)"
  })
).annotations({ description: "USDC as a decimal string, e.g. \"1.5\" (at most 6 decimals); never a JSON number" })

export const Network = Schema.String.pipe(
  Schema.pattern(/^eip155:\d{1,12}$/, { message: () => "must be a CAIP-2 network id such as eip155:84532" })
).annotations({ description: "CAIP-2 network id, e.g. `eip155:84532` (Base Sepolia)" })

export const EvmAddress = Schema.String.annotations({
  description: "EVM address: 0x and 40 hex digits, all lowercase, all uppercase or EIP-55 mixed case (a mixed-case " +
    "address with a wrong checksum is 400); stored and shown in EIP-55 form"
})

// --- payout addresses --------------------------------------------------------------------------

export const PayoutAddress = Schema.Struct({
  network: Schema.String,
  address: Schema.String,
  created_at: DateTimeString,
  updated_at: DateTimeString
}).annotations({ identifier: "PayoutAddress" })
export type PayoutAddress = typeof PayoutAddress.Type

export const SetPayoutAddress = strict(Schema.Struct({ address: EvmAddress })).annotations({ identifier: "SetPayoutAddress" })

export const NetworkPath = allErrors(Schema.Struct({ network: Network }))

// --- policy -----------------------------------------------------------------------------------

export const Policy = Schema.Struct({
  paused: Schema.Boolean.annotations({ description: "kill-switch: while true every pay is declined (`paused`)" }),
  per_payment_cap: Schema.NullOr(Schema.String).annotations({ description: "largest single payment (USDC), null: none" }),
  daily_cap: Schema.NullOr(Schema.String).annotations({
    description: "most the organization pays per UTC day (USDC; settled and settling payments count), null: none"
  }),
  payee_allowlist: Schema.NullOr(Schema.Array(Schema.String)).annotations({
    description: "payees that may be paid: organization ids and/or addresses (addresses shown in EIP-55 form, compared " +
      "case-insensitively); null allows every payee"
  }),
  spent_today: Schema.String.annotations({ description: "paid (or being settled) in the current UTC day, USDC" }),
  day_resets_at: DateTimeString.annotations({ description: "the next UTC midnight, when `spent_today` starts again from 0" }),
  updated_at: Schema.NullOr(DateTimeString)
}).annotations({ identifier: "PaymentPolicy" })
export type Policy = typeof Policy.Type

const AllowlistEntry = Schema.String.pipe(
  Schema.filter((s) => {
    if (/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(s)) return true
    if (!/^0x[0-9a-fA-F]{40}$/.test(s)) return "must be an organization id (UUID) or an EVM address"
    const parsed = parseEvmAddress(s)
    return parsed.ok || addressProblemText(parsed.problem)
  },
    // Generated values (property tests) are drawn from the two forms: filtering random strings never ends.
    { arbitrary: () => (fc) => fc.oneof(fc.uuid(), fc.stringMatching(/^0x[0-9a-f]{40}$/)) }
  )
)

export const UpdatePolicy = strict(Schema.Struct({
  paused: Schema.optionalWith(Schema.Boolean, { exact: true }),
  per_payment_cap: Schema.optionalWith(Schema.NullOr(Amount), { exact: true }),
  daily_cap: Schema.optionalWith(Schema.NullOr(Amount), { exact: true }),
  payee_allowlist: Schema.optionalWith(
    Schema.NullOr(Schema.Array(AllowlistEntry).pipe(Schema.maxItems(MAX_ALLOWLIST))),
    { exact: true }
  )
})).pipe(
  Schema.filter((b) => Object.keys(b).length > 0 || "at least one property is required"),
  Schema.annotations({ identifier: "UpdatePaymentPolicy" })
)
export type UpdatePolicy = typeof UpdatePolicy.Type

// --- challenges -------------------------------------------------------------------------------

export const ChallengeStatus = Schema.Literal("pending", "paid", "expired")

export const PaymentRequirements = Schema.Struct({
  scheme: Schema.Literal("exact"),
  network: Schema.String,
  asset: Schema.String,
  amount: Schema.String.annotations({ description: "atomic units of the asset (USDC: 6 decimals)" }),
  payTo: Schema.String,
  maxTimeoutSeconds: Schema.Int,
  extra: Schema.Struct({
    name: Schema.String.annotations({ description: "EIP-712 domain name of the asset" }),
    version: Schema.String.annotations({ description: "EIP-712 domain version of the asset" }),
    chainId: Schema.Int,
    nonce: Schema.String.annotations({
      description: "a suggested bytes32 EIP-3009 nonce, reserved for this challenge; any other bytes32 nonce is accepted too " +
        "(x402 payers pick their own). The first pay of a challenge binds its (network, asset, payer, nonce) to it: " +
        "presented for another challenge, it is `nonce_mismatch`"
    }),
    challengeId: Schema.String
  })
}).annotations({ identifier: "PaymentRequirements" })

export const PaymentRequired = Schema.Struct({
  x402Version: Schema.Literal(2),
  resource: Schema.Struct({
    url: Schema.String,
    description: Schema.optional(Schema.String),
    mimeType: Schema.optional(Schema.String)
  }),
  accepts: Schema.Array(PaymentRequirements)
}).annotations({ identifier: "PaymentRequired", description: "The x402 (protocol version 2) PaymentRequired object" })
export type PaymentRequired = typeof PaymentRequired.Type

export const Challenge = Schema.Struct({
  id: Uuid,
  status: ChallengeStatus,
  amount: Schema.String,
  asset: Schema.String,
  network: Schema.String,
  pay_to: Schema.String,
  payer_address: Schema.NullOr(Schema.String).annotations({ description: "when set, only this wallet may pay" }),
  description: Schema.NullOr(Schema.String),
  expires_at: DateTimeString,
  created_at: DateTimeString,
  paid_at: Schema.NullOr(DateTimeString),
  payment_id: Schema.NullOr(Uuid).annotations({ description: "the payment that paid it" }),
  is_payee: Schema.Boolean.annotations({ description: "true when the caller's organization created it" }),
  deliver_to: Schema.NullOr(Schema.String).annotations({
    description: "the address the challenge was mailed to (email rail); null when not mailed, or for the payer"
  }),
  sent_email_id: Schema.NullOr(Uuid).annotations({ description: "the sent email that carried the challenge (email rail)" }),
  payment_required: PaymentRequired
}).annotations({ identifier: "PaymentChallenge" })
export type Challenge = typeof Challenge.Type

export const CreateChallenge = strict(Schema.Struct({
  amount: Amount,
  network: Schema.optionalWith(Network, { exact: true }),
  description: Schema.optionalWith(Schema.String.pipe(Schema.minLength(1), Schema.maxLength(500)), { exact: true }),
  expires_in: Schema.optionalWith(
    Schema.Int.pipe(Schema.between(MIN_EXPIRES_IN, MAX_EXPIRES_IN, {
      message: () => `must be an integer number of seconds from ${MIN_EXPIRES_IN} to ${MAX_EXPIRES_IN}`
    })),
    { exact: true }
  ).annotations({ description: `seconds until the challenge expires (default ${DEFAULT_EXPIRES_IN})` }),
  payer_address: Schema.optionalWith(EvmAddress, { exact: true }).annotations({
    description: "only this wallet may pay (an EVM address as for payout addresses); otherwise any wallet"
  }),
  deliver_to: Schema.optionalWith(
    Schema.String.pipe(
      Schema.maxLength(320),
      Schema.pattern(/^[^\s@<>"(),;:]+@[^\s@<>"(),;:]+\.[^\s@<>"(),;:]+$/, { message: () => "must be an email address" })
    ),
    { exact: true }
  ).annotations({
    description: "email rail: also mail the challenge to this address from the organization's managed inbox, as an " +
      "`application/x402-payment-required+json` part; the payer answers by replying with an " +
      "`application/x402-payment+json` part"
  })
})).annotations({ identifier: "CreatePaymentChallenge" })
export type CreateChallenge = typeof CreateChallenge.Type

export const ChallengeListQuery = allErrors(Schema.Struct({
  ...ListQuery.fields,
  status: Schema.optionalWith(ChallengeStatus, { exact: true })
}))

// --- payments ---------------------------------------------------------------------------------

export const PaymentStatus = Schema.Literal("settling", "settled", "failed")
export const Direction = Schema.Literal("in", "out")

export const PaymentFailureInfo = Schema.Struct({
  code: Schema.String,
  category: Schema.Literal("declined", "cap", "verification", "settlement"),
  reasons: Schema.Array(Schema.String),
  message: Schema.String
}).annotations({ identifier: "PaymentFailure" })

export const Payment = Schema.Struct({
  id: Uuid,
  challenge_id: Uuid,
  direction: Direction.annotations({ description: "`out`: the caller paid; `in`: the caller was paid" }),
  rail: Schema.Literal("http", "email"),
  status: PaymentStatus,
  amount: Schema.String,
  asset: Schema.String,
  network: Schema.String,
  payer_address: Schema.NullOr(Schema.String),
  pay_to: Schema.String,
  transaction: Schema.NullOr(Schema.String).annotations({ description: "the settlement's transaction hash" }),
  settled_at: Schema.NullOr(DateTimeString),
  failure: Schema.NullOr(PaymentFailureInfo),
  created_at: DateTimeString
}).annotations({ identifier: "Payment" })
export type Payment = typeof Payment.Type

export const PaymentListQuery = allErrors(Schema.Struct({
  ...ListQuery.fields,
  direction: Schema.optionalWith(Direction, { exact: true }),
  status: Schema.optionalWith(PaymentStatus, { exact: true })
}))

export const PayRequest = strict(Schema.Struct({
  payment_payload: Schema.Unknown.annotations({
    description: "the x402 PaymentPayload (version 2, scheme `exact`): `{x402Version, accepted, payload: {signature, " +
      "authorization: {from, to, value, validAfter, validBefore, nonce}}}`; a payload of another shape is " +
      "`payment_verification_failed` with `malformed_payload`"
  })
})).annotations({ identifier: "PayChallenge" })

export const EmailChallenge = Schema.Struct({
  email_id: Uuid,
  challenge_id: Schema.NullOr(Schema.String).annotations({ description: "`accepts[0].extra.challengeId`, when given" }),
  payment_required: Schema.Unknown.annotations({
    description: "the x402 PaymentRequired the email carries (its `application/x402-payment-required+json` part), as sent"
  })
}).annotations({ identifier: "EmailPaymentChallenge" })

export const PayByEmailRequest = strict(Schema.Struct({
  payment_payload: Schema.Unknown.annotations({
    description: "the signed x402 PaymentPayload, mailed as the reply's `application/x402-payment+json` part"
  })
})).annotations({ identifier: "PayChallengeByEmail" })

const failures = "Failures carry `details.failure_category`, `details.reasons` (every subreason), `details.retryable`, " +
  "`details.payment_id` and `details.challenge_id`, and emit `payment.failed` to the payer's endpoints."

export class PaymentsApi extends HttpApiGroup.make("payments")
  .add(
    HttpApiEndpoint.get("listPayoutAddresses", "/payments/payout-addresses")
      .addSuccess(OkList(PayoutAddress, "PayoutAddress"))
      .addError(Wire.FeatureDisabled)
      .annotate(OpenApi.Summary, "Where the organization is paid, per network")
  )
  .add(
    HttpApiEndpoint.put("setPayoutAddress", "/payments/payout-addresses/:network")
      .setPath(NetworkPath)
      .setPayload(SetPayoutAddress)
      .addSuccess(Ok(PayoutAddress, "PayoutAddress"))
      .addError(Wire.FeatureDisabled)
      .annotate(OpenApi.Summary, "Set the payout wallet of a network (any case; a wrong mixed-case checksum is 400)")
  )
  .add(
    HttpApiEndpoint.get("getPolicy", "/payments/policy")
      .addSuccess(Ok(Policy, "PaymentPolicy"))
      .addError(Wire.FeatureDisabled)
      .annotate(OpenApi.Summary, "The payer spend policy and what was spent today (UTC)")
  )
  .add(
    HttpApiEndpoint.patch("updatePolicy", "/payments/policy")
      .setPayload(UpdatePolicy)
      .addSuccess(Ok(Policy, "PaymentPolicy"))
      .addError(Wire.FeatureDisabled)
      .annotate(OpenApi.Summary, "Change the spend policy: kill-switch, caps (decimal strings or null), payee allowlist")
  )
  .add(
    HttpApiEndpoint.post("createChallenge", "/payments/challenges")
      .setPayload(CreateChallenge)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Ok(Challenge, "PaymentChallenge"), { status: 201 })
      .addError(Wire.FeatureDisabled)
      .addError(Wire.NoPayoutAddress)
      .addError(Wire.Forbidden)
      .pipe(withOutboundErrors)
      .annotate(OpenApi.Summary, "Ask for a payment: an x402 PaymentRequired to the organization's payout address")
  )
  .add(
    HttpApiEndpoint.get("listChallenges", "/payments/challenges")
      .setUrlParams(ChallengeListQuery)
      .addSuccess(OkList(Challenge, "PaymentChallenge"))
      .addError(Wire.FeatureDisabled)
      .annotate(OpenApi.Summary, "The organization's challenges, newest first")
  )
  .add(
    HttpApiEndpoint.get("getChallenge", "/payments/challenges/:id")
      .setPath(IdPath)
      .addSuccess(Ok(Challenge, "PaymentChallenge"))
      .addError(Wire.FeatureDisabled)
      .addError(Wire.NotFound)
      .annotate(OpenApi.Summary, "One challenge (any organization with payments may read one whose id it was given, to pay it)")
  )
  .add(
    HttpApiEndpoint.post("pay", "/payments/challenges/:id/pay")
      .setPath(IdPath)
      .setPayload(PayRequest)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Ok(Payment, "Payment"))
      .addError(Wire.FeatureDisabled)
      .addError(Wire.NotFound)
      .addError(Wire.Conflict)
      .addError(Wire.ChallengeExpired)
      .addError(Wire.PaymentDeclined)
      .addError(Wire.PaymentVerificationFailed)
      .addError(Wire.SettlementFailed)
      .annotate(OpenApi.Summary, "Pay a challenge with a signed x402 PaymentPayload; answers the settled payment")
      .annotate(
        OpenApi.Description,
        "Checks in order: the challenge's expiry (422 `challenge_expired`), the payer's spend policy (422 " +
          "`payment_declined`: paused, per_payment_cap, daily_cap, allowlist, spend_non_positive_amount; the challenge " +
          "stays pending), verification of the signed authorization against the challenge (422 " +
          "`payment_verification_failed`, every failing subreason listed; any bytes32 nonce not bound to another challenge, " +
          "a window of at most 86,400 s counted from max(validAfter, now), a canonical low-s signature), settlement on " +
          "chain through the facilitator " +
          "(502 `settlement_failed`: insufficient_funds, facilitator_unavailable, settlement_misconfigured, " +
          "settlement_failed; the last two kinds of transient failure carry `Retry-After`). A challenge is paid at " +
          "most once: a pay while another is settling, or after it was paid, is 409 `conflict`. " + failures
      )
  )
  .add(
    HttpApiEndpoint.get("getEmailChallenge", "/payments/emails/:id/challenge")
      .setPath(IdPath)
      .addSuccess(Ok(EmailChallenge, "EmailPaymentChallenge"))
      .addError(Wire.FeatureDisabled)
      .addError(Wire.NotFound)
      .annotate(OpenApi.Summary, "Email rail, payer side: the x402 PaymentRequired a received email carries (404 when none)")
  )
  .add(
    HttpApiEndpoint.post("payByEmail", "/payments/emails/:id/pay")
      .setPath(IdPath)
      .setPayload(PayByEmailRequest)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Ok(SentEmail, "SentEmail"), { status: 201 })
      .addError(Wire.FeatureDisabled)
      .addError(Wire.NotFound)
      .addError(Wire.Forbidden)
      .addError(Wire.InboundNotRepliable)
      .pipe(withOutboundErrors)
      .addError(Wire.PaymentDeclined)
      .addError(Wire.PaymentVerificationFailed)
      .annotate(
        OpenApi.Summary,
        "Email rail, payer side: reply to a received challenge with a signed payment (`application/x402-payment+json` part)"
      )
      .annotate(
        OpenApi.Description,
        "The payload is signed by the payer (the CLI signs locally). What the email claims decides nothing; what the " +
          "authorization does decides: an authorization that cannot be read is 422 `payment_verification_failed` " +
          "(malformed_payload, invalid_from_address, invalid_to_address); the payer's spend policy judges its value, the " +
          "address it pays and the organizations that own that address (422 `payment_declined`: paused, per_payment_cap, " +
          "daily_cap, allowlist, spend_non_positive_amount); a challenge of this service named by the email or the payload " +
          "must be paid to its own `pay_to` (422 `payment_verification_failed`, payto_mismatch). Nothing is mailed on a " +
          "refusal. The mailed authorization counts on the daily cap (once, however often it is mailed). The signature is " +
          "verified by the payee's service, which settles it on receipt and answers by mail with a receipt or a reject " +
          "(`application/x402-payment-response+json`)."
      )
  )
  .add(
    HttpApiEndpoint.get("listPayments", "/payments")
      .setUrlParams(PaymentListQuery)
      .addSuccess(OkList(Payment, "Payment"))
      .addError(Wire.FeatureDisabled)
      .annotate(OpenApi.Summary, "Payments made (`out`) and received (`in`), newest first")
  )
  .add(
    HttpApiEndpoint.get("getPayment", "/payments/:id")
      .setPath(IdPath)
      .addSuccess(Ok(Payment, "Payment"))
      .addError(Wire.FeatureDisabled)
      .addError(Wire.NotFound)
      .annotate(OpenApi.Summary, "One payment")
  )
  .middleware(Authentication)
  .annotate(
    OpenApi.Description,
    "Stablecoin (USDC) payments over x402, non-custodial: payers sign EIP-3009 authorizations themselves; the " +
      "service verifies them, applies the payer's spend policy and settles through a facilitator. Needs the " +
      "`payments` entitlement, granted by an operator: without it every operation is 403 `feature_disabled` " +
      "(`details.missing_entitlement`, `message`, `docs_url`)."
  )
{}
