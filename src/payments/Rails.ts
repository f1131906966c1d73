/**
 * The two rails a payment travels, as the pipeline sees them: who guards it (the payer's spend policy
 * on the HTTP rail, the payee's settle caps on the email rail) and who hears of it.
 */
import { type SqlClient } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import { capped, declined, type PaymentFailure } from "./Failures.js"
import { evaluatePolicy, utcDay } from "./Policy.js"
import { findOne, rowsOrDieOnParse } from "../platform/Rows.js"
import { type ChallengeRow, type PaymentsRepo, PolicyRow, policyOf } from "./Repo.js"
import type { SettleCaps } from "./SettleCaps.js"

/** The side of a flow that decides, guards and hears about a payment. */
export interface Rail {
  readonly rail: "http" | "email"
  readonly payerOrgId: string | null
  /** The first look (no lock): every refusal reason, or none. */
  readonly guard: (amount: bigint, nowMs: number) => Effect.Effect<PaymentFailure | null>
  /** The same verdict under the guard's lock, inside the claiming transaction. */
  readonly guardLocked: (amount: bigint, nowMs: number) => Effect.Effect<PaymentFailure | null, unknown>
  /** Organizations told of a failure, and of a settlement (with the direction each sees). */
  readonly failedTo: ReadonlyArray<string>
  readonly settledTo: ReadonlyArray<{ readonly orgId: string; readonly direction: "in" | "out" }>
}

/**
 * A payer's policy row, created when missing and held `FOR UPDATE` (inside a transaction): every pay
 * of one payer, on either rail and in any process, passes through this lock, so the daily cap's check
 * and the reservation it counts are one step.
 */
export const lockedPolicy = (sql: SqlClient.SqlClient, orgId: string) =>
  Effect.gen(function*() {
    yield* sql`INSERT INTO payment_policies (org_id) VALUES (${orgId}) ON CONFLICT (org_id) DO NOTHING`
    const row = yield* findOne({
      Request: Schema.String,
      Result: PolicyRow,
      execute: (orgId) =>
        sql`SELECT paused, per_payment_cap::text, daily_cap::text, payee_allowlist, updated_at
            FROM payment_policies WHERE org_id = ${orgId} FOR UPDATE`
    })(orgId).pipe(rowsOrDieOnParse("locked spend policy"))
    return Option.getOrUndefined(row)
  })

export const makeRails = (deps: { readonly sql: SqlClient.SqlClient; readonly repo: PaymentsRepo; readonly caps: SettleCaps }) => {
  const { caps, repo, sql } = deps

  const policyVerdict = (payerOrgId: string, challenge: ChallengeRow, amount: bigint, nowMs: number, lock: boolean) =>
    Effect.gen(function*() {
      const row = lock ? yield* lockedPolicy(sql, payerOrgId) : yield* repo.policyRow(payerOrgId)
      const day = utcDay(nowMs)
      const spentToday = yield* repo.spentBy(payerOrgId, day.start, day.end)
      // Verification then requires the authorization to pay exactly this address.
      const reasons = evaluatePolicy(policyOf(row), { amount, spentToday, payeeOrgIds: [challenge.org_id], payTo: challenge.pay_to })
      return reasons.length === 0 ? null : declined(reasons)
    })

  const httpRail = (payerOrgId: string, challenge: ChallengeRow): Rail => ({
    rail: "http",
    payerOrgId,
    guard: (amount, nowMs) => Effect.orDie(policyVerdict(payerOrgId, challenge, amount, nowMs, false)),
    guardLocked: (amount, nowMs) => policyVerdict(payerOrgId, challenge, amount, nowMs, true),
    failedTo: [payerOrgId],
    settledTo: payerOrgId === challenge.org_id
      ? [{ orgId: payerOrgId, direction: "out" }]
      : [{ orgId: payerOrgId, direction: "out" }, { orgId: challenge.org_id, direction: "in" }]
  })

  const emailRail = (challenge: ChallengeRow): Rail => ({
    rail: "email",
    payerOrgId: null,
    guard: (amount, nowMs) => Effect.map(caps.check(challenge.org_id, amount, nowMs), (r) => (r.length === 0 ? null : capped(r))),
    guardLocked: (amount, nowMs) =>
      Effect.map(caps.checkLocked(challenge.org_id, amount, nowMs), (r) => (r.length === 0 ? null : capped(r))),
    failedTo: [challenge.org_id],
    settledTo: [{ orgId: challenge.org_id, direction: "in" }]
  })

  return { httpRail, emailRail } as const
}
