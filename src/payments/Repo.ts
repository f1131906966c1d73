/** SQL of the Payments area and the mapping of its rows to the API's representations. */
import { SqlClient } from "@effect/sql"
import { Effect, Option } from "effect"
import type { Challenge, Payment, PaymentRequired, PayoutAddress } from "./Api.js"
import { atomicOf, fromAtomic } from "./Money.js"
import { networkInfo } from "./Networks.js"
import type { SpendPolicy } from "./Policy.js"

export interface ChallengeRow {
  readonly id: string
  readonly org_id: string
  readonly amount: string
  readonly asset: string
  readonly network: string
  readonly pay_to: string
  readonly payer_address: string | null
  readonly description: string | null
  readonly nonce: string
  readonly max_timeout_seconds: number
  readonly expires_at: Date
  readonly payment_id: string | null
  readonly paid_at: Date | null
  readonly created_at: Date
  /** The email rail: where the challenge was mailed, and the sent email. */
  readonly deliver_to: string | null
  readonly sent_email_id: string | null
}

export interface PaymentRow {
  readonly id: string
  readonly challenge_id: string
  readonly rail: "http" | "email"
  readonly payer_org_id: string | null
  readonly payee_org_id: string
  readonly status: "settling" | "settled" | "failed"
  readonly amount: string
  readonly asset: string
  readonly network: string
  readonly payer_address: string | null
  readonly pay_to: string
  readonly nonce: string | null
  readonly transaction: string | null
  readonly failure_code: string | null
  readonly failure_category: "declined" | "cap" | "verification" | "settlement" | null
  readonly failure_reasons: ReadonlyArray<string> | null
  readonly failure_message: string | null
  readonly spent_at: Date
  readonly settled_at: Date | null
  readonly created_at: Date
}

export interface PolicyRow {
  readonly paused: boolean
  readonly per_payment_cap: string | null
  readonly daily_cap: string | null
  readonly payee_allowlist: ReadonlyArray<string> | null
  readonly updated_at: Date | null
}

export const policyOf = (row: PolicyRow | undefined): SpendPolicy => ({
  paused: row?.paused ?? false,
  perPaymentCap: row?.per_payment_cap == null ? null : atomicOf(row.per_payment_cap),
  dailyCap: row?.daily_cap == null ? null : atomicOf(row.daily_cap),
  payeeAllowlist: row?.payee_allowlist ?? null
})

/** The x402 PaymentRequired of a challenge: one `exact` requirement, the EIP-712 domain in `extra`. */
export const paymentRequiredOf = (c: ChallengeRow, publicBaseUrl: string): PaymentRequired => {
  const info = networkInfo(c.network)
  return {
    x402Version: 2,
    resource: {
      url: `${publicBaseUrl}/v1/payments/challenges/${c.id}`,
      ...(c.description !== null ? { description: c.description } : {}),
      mimeType: "application/json"
    },
    accepts: [{
      scheme: "exact",
      network: c.network,
      asset: c.asset,
      amount: atomicOf(c.amount).toString(),
      payTo: c.pay_to,
      maxTimeoutSeconds: c.max_timeout_seconds,
      extra: {
        name: info?.assetName ?? "USDC",
        version: info?.assetVersion ?? "2",
        chainId: info?.chainId ?? Number(c.network.split(":")[1]),
        nonce: c.nonce,
        challengeId: c.id
      }
    }]
  }
}

export const challengeStatus = (c: ChallengeRow, nowMs: number): Challenge["status"] =>
  c.paid_at !== null ? "paid" : c.expires_at.getTime() <= nowMs ? "expired" : "pending"

export const toChallenge = (c: ChallengeRow, callerOrgId: string, nowMs: number, publicBaseUrl: string): Challenge => ({
  id: c.id,
  status: challengeStatus(c, nowMs),
  amount: fromAtomic(atomicOf(c.amount)),
  asset: c.asset,
  network: c.network,
  pay_to: c.pay_to,
  payer_address: c.payer_address,
  description: c.description,
  expires_at: c.expires_at,
  created_at: c.created_at,
  paid_at: c.paid_at,
  payment_id: c.paid_at !== null ? c.payment_id : null,
  is_payee: c.org_id === callerOrgId,
  deliver_to: c.org_id === callerOrgId ? c.deliver_to : null,
  sent_email_id: c.org_id === callerOrgId ? c.sent_email_id : null,
  payment_required: paymentRequiredOf(c, publicBaseUrl)
})

export const toPayment = (p: PaymentRow, callerOrgId: string): Payment => ({
  id: p.id,
  challenge_id: p.challenge_id,
  direction: p.payer_org_id === callerOrgId ? "out" : "in",
  rail: p.rail,
  status: p.status,
  amount: fromAtomic(atomicOf(p.amount)),
  asset: p.asset,
  network: p.network,
  payer_address: p.payer_address,
  pay_to: p.pay_to,
  transaction: p.transaction,
  settled_at: p.settled_at,
  failure: p.status === "failed" && p.failure_category !== null
    ? {
      code: p.failure_code ?? "settlement_failed",
      category: p.failure_category,
      reasons: p.failure_reasons ?? [],
      message: p.failure_message ?? ""
    }
    : null,
  created_at: p.created_at
})

/** The `payment` object of `payment.settled` and `payment.failed`, as one side (`direction`) sees it. */
export const paymentEventData = (p: PaymentRow, direction: "in" | "out") => ({
  payment: {
    id: p.id,
    challenge_id: p.challenge_id,
    direction,
    rail: p.rail,
    status: p.status,
    amount: fromAtomic(atomicOf(p.amount)),
    asset: p.asset,
    network: p.network,
    payer_address: p.payer_address,
    pay_to: p.pay_to,
    ...(p.status === "settled" ? { transaction: p.transaction, settled_at: p.settled_at?.toISOString() ?? null } : {}),
    ...(p.status === "failed"
      ? {
        failure_category: p.failure_category,
        reasons: p.failure_reasons ?? [],
        code: p.failure_code,
        message: p.failure_message
      }
      : {})
  }
})

export const toPayoutAddress = (r: PayoutAddress): PayoutAddress => r

/**
 * Which payments an organization sees: all it made (`out`), and those made to it (`in`) except the
 * ones its payer's own policy declined (they never reached the payee).
 */
export const visibleTo = (sql: SqlClient.SqlClient, orgId: string, direction: "in" | "out" | undefined) => {
  const out = sql`p.payer_org_id = ${orgId}`
  const inbound = sql`(p.payee_org_id = ${orgId} AND p.failure_category IS DISTINCT FROM 'declined')`
  return direction === "out" ? out : direction === "in" ? inbound : sql`(${out} OR ${inbound})`
}

export class PaymentsRepo extends Effect.Service<PaymentsRepo>()("mailroom/payments/PaymentsRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const findChallenge = (id: string) =>
      sql<ChallengeRow>`SELECT * FROM payment_challenges WHERE id = ${id}`.pipe(
        Effect.map((rows) => Option.fromNullable(rows[0])),
        Effect.orDie
      )

    const findPayment = (orgId: string, id: string) =>
      sql<PaymentRow>`SELECT * FROM payments p WHERE p.id = ${id} AND ${visibleTo(sql, orgId, undefined)}`.pipe(
        Effect.map((rows) => Option.fromNullable(rows[0])),
        Effect.orDie
      )

    const policyRow = (orgId: string) =>
      sql<PolicyRow>`SELECT paused, per_payment_cap::text, daily_cap::text, payee_allowlist, updated_at
                     FROM payment_policies WHERE org_id = ${orgId}`.pipe(Effect.map((rows) => rows[0]), Effect.orDie)

    /**
     * What a payer's organization committed in [start, end): its settled and settling payments (HTTP)
     * and the signed authorizations it mailed (the email rail).
     */
    const spentBy = (payerOrgId: string, start: Date, end: Date) =>
      sql<{ total: string }>`
        SELECT (
          (SELECT coalesce(sum(amount), 0) FROM payments
           WHERE payer_org_id = ${payerOrgId} AND status IN ('settling', 'settled') AND spent_at >= ${start} AND spent_at < ${end})
          + (SELECT coalesce(sum(amount), 0) FROM payment_email_spends
             WHERE org_id = ${payerOrgId} AND spent_at >= ${start} AND spent_at < ${end})
        )::text AS total`.pipe(
        Effect.map((rows) => atomicOf(rows[0]?.total ?? "0")),
        Effect.orDie
      )

    const payoutAddress = (orgId: string, network: string) =>
      sql<{ address: string }>`SELECT address FROM payout_addresses WHERE org_id = ${orgId} AND network = ${network}`.pipe(
        Effect.map((rows) => Option.fromNullable(rows[0]?.address)),
        Effect.orDie
      )

    /** The organizations whose payout address on `network` is `address` (any case). */
    const ownersOf = (network: string, address: string) =>
      sql<{ org_id: string }>`SELECT org_id FROM payout_addresses WHERE network = ${network} AND lower(address) = ${address.toLowerCase()}`.pipe(
        Effect.map((rows) => rows.map((r) => r.org_id)),
        Effect.orDie
      )

    return { findChallenge, findPayment, policyRow, spentBy, payoutAddress, ownersOf } as const
  })
}) {}
