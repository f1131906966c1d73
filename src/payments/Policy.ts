/**
 * The payer's spend policy: a kill-switch, a cap per payment, a cap per UTC day and an allowlist of
 * payees. x402 leaves client budgets out of scope; this is ours. Every refusal reason that applies
 * is reported, all of them permanent until the policy changes.
 */

export const DECLINE_REASONS = ["paused", "per_payment_cap", "daily_cap", "allowlist", "spend_non_positive_amount"] as const
export type DeclineReason = (typeof DECLINE_REASONS)[number]

export interface SpendPolicy {
  readonly paused: boolean
  readonly perPaymentCap: bigint | null
  readonly dailyCap: bigint | null
  /** Organization ids and addresses (any case); null allows every payee. */
  readonly payeeAllowlist: ReadonlyArray<string> | null
}

export const OPEN_POLICY: SpendPolicy = { paused: false, perPaymentCap: null, dailyCap: null, payeeAllowlist: null }

export interface Spend {
  /** What the signed authorization would move (atomic units). */
  readonly amount: bigint
  /** Settled and settling payments of this payer in the current UTC day. */
  readonly spentToday: bigint
  /** The organizations that own the address paid (none when it is no organization's payout address). */
  readonly payeeOrgIds: ReadonlyArray<string>
  /** The address the authorization pays. */
  readonly payTo: string
}

export const evaluatePolicy = (policy: SpendPolicy, spend: Spend): ReadonlyArray<DeclineReason> => {
  const reasons: Array<DeclineReason> = []
  if (policy.paused) reasons.push("paused")
  if (policy.perPaymentCap !== null && spend.amount > policy.perPaymentCap) reasons.push("per_payment_cap")
  if (policy.dailyCap !== null && spend.amount > 0n && spend.spentToday + spend.amount > policy.dailyCap) reasons.push("daily_cap")
  if (policy.payeeAllowlist !== null) {
    const listed = new Set(policy.payeeAllowlist.map((e) => e.toLowerCase()))
    if (!spend.payeeOrgIds.some((id) => listed.has(id.toLowerCase())) && !listed.has(spend.payTo.toLowerCase())) {
      reasons.push("allowlist")
    }
  }
  if (spend.amount <= 0n) reasons.push("spend_non_positive_amount")
  return reasons
}

const DAY_MS = 86_400_000

/** The UTC day holding `nowMs`: [start, end). */
export const utcDay = (nowMs: number) => {
  const start = Math.floor(nowMs / DAY_MS) * DAY_MS
  return { start: new Date(start), end: new Date(start + DAY_MS) }
}

/** The UTC month holding `nowMs`: [start, end). */
export const utcMonth = (nowMs: number) => {
  const d = new Date(nowMs)
  return {
    start: new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1)),
    end: new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1))
  }
}
