/** SQL of the Payments area and the mapping of its rows to the API's representations. */
import { SqlClient } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import type { Position } from "../contract/Paging.js"
import { allRows, Count, findAll, findOne, NullableTimestamp, rowsOrDie, single, TextArray, Timestamp } from "../platform/Rows.js"
import type { Challenge, Payment, PaymentRequired, PayoutAddress } from "./Api.js"
import { atomicOf, fromAtomic } from "./Money.js"
import { networkInfo } from "./Networks.js"
import type { SpendPolicy } from "./Policy.js"
import { ChallengeRow, PaymentRow } from "./Rows.js"

export { ChallengeRow, PaymentRow } from "./Rows.js"

export const PolicyRow = Schema.Struct({
  paused: Schema.Boolean,
  per_payment_cap: Schema.NullOr(Schema.String),
  daily_cap: Schema.NullOr(Schema.String),
  payee_allowlist: Schema.NullOr(TextArray),
  updated_at: NullableTimestamp
})
export type PolicyRow = typeof PolicyRow.Type

const PayoutAddressRow = Schema.Struct({
  network: Schema.String,
  address: Schema.String,
  created_at: Timestamp,
  updated_at: Timestamp
})

/** Explicit columns (alias `p`): the amounts as text, so no numeric reaches JavaScript as a float. */
const CHALLENGE_COLUMNS = `p.id, p.org_id, p.amount::text AS amount, p.asset, p.network, p.pay_to, p.payer_address,
  p.description, p.nonce, p.max_timeout_seconds, p.expires_at, p.payment_id, p.paid_at, p.created_at,
  p.deliver_to, p.sent_email_id`
const PAYMENT_COLUMNS = `p.id, p.challenge_id, p.rail, p.payer_org_id, p.payee_org_id, p.status, p.amount::text AS amount,
  p.asset, p.network, p.payer_address, p.pay_to, p.nonce, p.transaction, p.failure_code, p.failure_category,
  p.failure_reasons, p.failure_message, p.spent_at, p.settled_at, p.created_at`

/** A change of a spend policy: a field absent from the request keeps its stored value. */
export interface PolicyPatch {
  readonly paused: boolean | undefined
  readonly perPaymentCap: string | null
  readonly dailyCap: string | null
  readonly payeeAllowlist: ReadonlyArray<string> | null
  readonly has: (field: "paused" | "per_payment_cap" | "daily_cap" | "payee_allowlist") => boolean
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

/** Rows of "spent by payer". */
const SpentByPayerRow = Schema.Struct({ total: Schema.String })

/** Rows of "payout address". */
const PayoutAddress2Row = Schema.Struct({ address: Schema.String })

/** Rows of "payout address owners". */
const PayoutAddressOwnersRow = Schema.Struct({ org_id: Schema.String })

export class PaymentsRepo extends Effect.Service<PaymentsRepo>()("mailroom/payments/PaymentsRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const findChallenge = findOne({
      Request: Schema.String,
      Result: ChallengeRow,
      execute: (id) => sql`SELECT ${sql.literal(CHALLENGE_COLUMNS)} FROM payment_challenges p WHERE p.id = ${id}`
    })

    /** A payment the organization sees (`visibleTo`). */
    const findPayment = (orgId: string, id: string) =>
      findOne({
        Request: Schema.String,
        Result: PaymentRow,
        execute: (id) =>
          sql`SELECT ${sql.literal(PAYMENT_COLUMNS)} FROM payments p WHERE p.id = ${id} AND ${visibleTo(sql, orgId, undefined)}`
      })(id).pipe(rowsOrDie("payment by id"))

    const policyRow = (orgId: string) =>
      findOne({
        Request: Schema.String,
        Result: PolicyRow,
        execute: (orgId) =>
          sql`SELECT paused, per_payment_cap::text, daily_cap::text, payee_allowlist, updated_at
              FROM payment_policies WHERE org_id = ${orgId}`
      })(orgId).pipe(Effect.map(Option.getOrUndefined), rowsOrDie("spend policy"))

    /** Creates or changes an organization's spend policy; caps are atomic amounts as text. */
    const upsertPolicy = (orgId: string, patch: PolicyPatch) =>
      sql`
        INSERT INTO payment_policies (org_id, paused, per_payment_cap, daily_cap, payee_allowlist, updated_at)
        VALUES (${orgId}, ${patch.paused ?? false}, ${patch.perPaymentCap}::numeric,
          ${patch.dailyCap}::numeric, ${patch.payeeAllowlist === null ? null : pgArray(patch.payeeAllowlist)}::text[], now())
        ON CONFLICT (org_id) DO UPDATE SET
          paused = CASE WHEN ${patch.has("paused")} THEN EXCLUDED.paused ELSE payment_policies.paused END,
          per_payment_cap = CASE WHEN ${patch.has("per_payment_cap")} THEN EXCLUDED.per_payment_cap ELSE payment_policies.per_payment_cap END,
          daily_cap = CASE WHEN ${patch.has("daily_cap")} THEN EXCLUDED.daily_cap ELSE payment_policies.daily_cap END,
          payee_allowlist = CASE WHEN ${patch.has("payee_allowlist")} THEN EXCLUDED.payee_allowlist ELSE payment_policies.payee_allowlist END,
          updated_at = now()`.pipe(Effect.asVoid, Effect.orDie)

    /**
     * What a payer's organization committed in [start, end): its settled and settling payments (HTTP)
     * and the signed authorizations it mailed (the email rail).
     */
    const spentBy = (payerOrgId: string, start: Date, end: Date) =>
      sql`
        SELECT (
          (SELECT coalesce(sum(amount), 0) FROM payments
           WHERE payer_org_id = ${payerOrgId} AND status IN ('settling', 'settled') AND spent_at >= ${start} AND spent_at < ${end})
          + (SELECT coalesce(sum(amount), 0) FROM payment_email_spends
             WHERE org_id = ${payerOrgId} AND spent_at >= ${start} AND spent_at < ${end})
        )::text AS total`.pipe(
        allRows(SpentByPayerRow, "spent by payer"),
        Effect.map((rows) => atomicOf(rows[0]?.total ?? "0")),
        Effect.orDie
      )

    const payoutAddress = (orgId: string, network: string) =>
      sql`SELECT address FROM payout_addresses WHERE org_id = ${orgId} AND network = ${network}`.pipe(
        allRows(PayoutAddress2Row, "payout address"),
        Effect.map((rows) => Option.fromNullable(rows[0]?.address)),
        Effect.orDie
      )

    const payoutAddresses = findAll({
      Request: Schema.String,
      Result: PayoutAddressRow,
      execute: (orgId) =>
        sql`SELECT network, address, created_at, updated_at FROM payout_addresses WHERE org_id = ${orgId} ORDER BY network`
    })

    const setPayoutAddress = (orgId: string, network: string, address: string) =>
      single({
        Request: Schema.Void,
        Result: PayoutAddressRow,
        execute: () =>
          sql`INSERT INTO payout_addresses (org_id, network, address) VALUES (${orgId}, ${network}, ${address})
              ON CONFLICT (org_id, network) DO UPDATE SET address = EXCLUDED.address, updated_at = now()
              RETURNING network, address, created_at, updated_at`
      })(undefined).pipe(rowsOrDie("payout address upsert"))

    /** The organizations whose payout address on `network` is `address` (any case). */
    const ownersOf = (network: string, address: string) =>
      sql`SELECT org_id FROM payout_addresses WHERE network = ${network} AND lower(address) = ${address.toLowerCase()}`.pipe(
        allRows(PayoutAddressOwnersRow, "payout address owners"),
        Effect.map((rows) => rows.map((r) => r.org_id)),
        Effect.orDie
      )

    /** A challenge that could not be mailed is not kept. */
    const deleteChallenge = (id: string) => sql`DELETE FROM payment_challenges WHERE id = ${id}`.pipe(Effect.asVoid, Effect.orDie)

    /** A keyset page of the organization's challenges (newest first) and the count the filter matches. */
    const challengePage = (
      orgId: string,
      status: "paid" | "pending" | "expired" | undefined,
      now: Date,
      limit: number,
      after: Position | undefined
    ) => {
      const conds = [sql`p.org_id = ${orgId}`]
      if (status === "paid") conds.push(sql`p.paid_at IS NOT NULL`)
      if (status === "pending") conds.push(sql`p.paid_at IS NULL AND p.expires_at > ${now}`)
      if (status === "expired") conds.push(sql`p.paid_at IS NULL AND p.expires_at <= ${now}`)
      const page = after === undefined ? conds : [...conds, sql`(p.created_at, p.id) < (${after.createdAt}, ${after.id})`]
      return Effect.all([
        findAll({
          Request: Schema.Void,
          Result: ChallengeRow,
          execute: () =>
            sql`SELECT ${sql.literal(CHALLENGE_COLUMNS)} FROM payment_challenges p WHERE ${sql.and(page)}
                ORDER BY p.created_at DESC, p.id DESC LIMIT ${limit + 1}`
        })(undefined),
        countOf(sql`SELECT count(*)::int AS n FROM payment_challenges p WHERE ${sql.and(conds)}`)
      ]).pipe(Effect.map(([rows, total]) => ({ rows, total })), rowsOrDie("challenge page"))
    }

    /** A keyset page of the payments the organization sees (newest first) and the count the filter matches. */
    const paymentPage = (
      orgId: string,
      direction: "in" | "out" | undefined,
      status: PaymentRow["status"] | undefined,
      limit: number,
      after: Position | undefined
    ) => {
      const conds = [visibleTo(sql, orgId, direction)]
      if (status !== undefined) conds.push(sql`p.status = ${status}`)
      const page = after === undefined ? conds : [...conds, sql`(p.created_at, p.id) < (${after.createdAt}, ${after.id})`]
      return Effect.all([
        findAll({
          Request: Schema.Void,
          Result: PaymentRow,
          execute: () =>
            sql`SELECT ${sql.literal(PAYMENT_COLUMNS)} FROM payments p WHERE ${sql.and(page)}
                ORDER BY p.created_at DESC, p.id DESC LIMIT ${limit + 1}`
        })(undefined),
        countOf(sql`SELECT count(*)::int AS n FROM payments p WHERE ${sql.and(conds)}`)
      ]).pipe(Effect.map(([rows, total]) => ({ rows, total })), rowsOrDie("payment page"))
    }

    return {
      findChallenge: (id: string) => findChallenge(id).pipe(rowsOrDie("challenge by id")),
      findPayment,
      policyRow,
      upsertPolicy,
      spentBy,
      payoutAddress,
      payoutAddresses: (orgId: string) => payoutAddresses(orgId).pipe(rowsOrDie("payout addresses")),
      setPayoutAddress,
      ownersOf,
      deleteChallenge,
      challengePage,
      paymentPage
    } as const
  })
}) {}

const CountRow = Schema.Struct({ n: Count })

/** The `n` of a one-row count statement. */
const countOf = <E, R>(statement: Effect.Effect<ReadonlyArray<unknown>, E, R>) =>
  single({ Request: Schema.Void, Result: CountRow, execute: () => statement })(undefined).pipe(
    Effect.map((r) => r.n)
  )

/** A PostgreSQL array literal of plain tokens (ids and addresses). */
const pgArray = (items: ReadonlyArray<string>) => `{${items.map((s) => `"${s.replace(/["\\]/g, "")}"`).join(",")}}`
