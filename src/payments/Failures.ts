/**
 * Payment failures: one category and code per failure, every subreason, and whether a retry can
 * help. The same object becomes the API error (`details.failure_category`, `details.reasons`) and
 * the `payment.failed` event.
 */
import { ChallengeExpired, PaymentDeclined, PaymentVerificationFailed, SettlementFailed } from "../contract/Errors.js"

export type FailureCategory = "declined" | "cap" | "verification" | "settlement"

export type SettlementReason = "insufficient_funds" | "facilitator_unavailable" | "settlement_misconfigured" | "settlement_failed"
export type CapReason = "settle_daily_cap_exceeded" | "settle_monthly_cap_exceeded" | "amount_exceeds_per_settle_ceiling"

export interface PaymentFailure {
  readonly code: "payment_declined" | "payment_verification_failed" | "settlement_failed" | "challenge_expired"
  readonly category: FailureCategory
  readonly reasons: ReadonlyArray<string>
  readonly message: string
  /** Seconds a caller should wait before retrying; only the transient settlement reasons have one. */
  readonly retryAfter: number | null
}

/** Only these settlement outcomes may succeed on a retry. */
export const FACILITATOR_RETRY_AFTER = 5
export const SETTLEMENT_RETRY_AFTER = 10

export const declined = (reasons: ReadonlyArray<string>): PaymentFailure => ({
  code: "payment_declined",
  category: "declined",
  reasons,
  message: `the payer's spend policy refused this payment (${reasons.join(", ")}); the challenge stays pending`,
  retryAfter: null
})

export const capped = (reasons: ReadonlyArray<CapReason>): PaymentFailure => ({
  code: "payment_declined",
  category: "cap",
  reasons,
  message: `the payee's settle caps refuse this payment (${reasons.join(", ")})`,
  retryAfter: null
})

export const unverified = (reasons: ReadonlyArray<string>): PaymentFailure => ({
  code: "payment_verification_failed",
  category: "verification",
  reasons,
  message: `the signed payment does not match the challenge (${reasons.join(", ")})`,
  retryAfter: null
})

export const expired = (expiresAt: Date): PaymentFailure => ({
  code: "challenge_expired",
  category: "settlement",
  reasons: ["challenge_expired"],
  message: `the challenge expired at ${expiresAt.toISOString()}; ask the payee for a new one`,
  retryAfter: null
})

export const unsettled = (reason: SettlementReason, detail: string, retryAfter?: number): PaymentFailure => ({
  code: "settlement_failed",
  category: "settlement",
  reasons: [reason],
  message: `settlement did not complete (${reason}): ${detail}`,
  retryAfter: reason === "facilitator_unavailable"
    ? retryAfter ?? FACILITATOR_RETRY_AFTER
    : reason === "settlement_failed"
    ? retryAfter ?? SETTLEMENT_RETRY_AFTER
    : null
})

/** The API error for a failure (the `cap` category never reaches the API: it is the email rail's). */
export const apiErrorOf = (f: PaymentFailure, ids: { readonly paymentId: string; readonly challengeId: string }) => {
  const details = {
    failure_category: f.category,
    reasons: f.reasons,
    retryable: f.retryAfter !== null,
    ...(f.retryAfter !== null ? { retry_after: f.retryAfter } : {}),
    payment_id: ids.paymentId,
    challenge_id: ids.challengeId
  }
  switch (f.code) {
    case "payment_declined":
      return new PaymentDeclined({ message: f.message, details })
    case "payment_verification_failed":
      return new PaymentVerificationFailed({ message: f.message, details })
    case "challenge_expired":
      return new ChallengeExpired({ message: f.message, details })
    case "settlement_failed":
      return new SettlementFailed({ message: f.message, details })
  }
}
