/**
 * The email rail's settle caps, per payee organization: at most 10 USDC per settle, 25 per UTC day
 * and 250 per UTC month by default, changed per organization by an operator (`npm run admin --
 * settle-caps`). Settled and settling email-rail payments count. Enforced atomically: the check and
 * the reservation (the settling payment's row) happen in one transaction holding the payee's cap
 * row, so two payments racing for the last of a cap cannot both pass.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"
import { allRows } from "../platform/Rows.js"
import type { CapReason } from "./Failures.js"
import { atomicOf, toAtomic } from "./Money.js"
import { utcDay, utcMonth } from "./Policy.js"

export interface Caps {
  readonly perSettle: bigint
  readonly daily: bigint
  readonly monthly: bigint
}

export const DEFAULT_CAPS: Caps = {
  perSettle: toAtomic("10")!,
  daily: toAtomic("25")!,
  monthly: toAtomic("250")!
}

export const capReasons = (caps: Caps, amount: bigint, usedToday: bigint, usedThisMonth: bigint): ReadonlyArray<CapReason> => {
  const reasons: Array<CapReason> = []
  if (amount > caps.perSettle) reasons.push("amount_exceeds_per_settle_ceiling")
  if (usedToday + amount > caps.daily) reasons.push("settle_daily_cap_exceeded")
  if (usedThisMonth + amount > caps.monthly) reasons.push("settle_monthly_cap_exceeded")
  return reasons
}

/** The caps as text (`numeric`: no float on the way); null is the default. */
const CapsRow = Schema.Struct({
  per_settle: Schema.NullOr(Schema.String),
  daily: Schema.NullOr(Schema.String),
  monthly: Schema.NullOr(Schema.String)
})

/** Rows of "settle cap usage". */
const SettleCapUsageRow = Schema.Struct({ today: Schema.String, month: Schema.String })

export class SettleCaps extends Effect.Service<SettleCaps>()("mailroom/payments/SettleCaps", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const capsOf = (orgId: string, lock: boolean) =>
      Effect.gen(function*() {
        const rows = yield* (lock
          ? sql`SELECT per_settle::text, daily::text, monthly::text FROM settle_caps WHERE org_id = ${orgId} FOR UPDATE`
          : sql`SELECT per_settle::text, daily::text, monthly::text FROM settle_caps WHERE org_id = ${orgId}`)
          .pipe(allRows(CapsRow, "settle caps"))
        const row = rows[0]
        return {
          perSettle: row?.per_settle == null ? DEFAULT_CAPS.perSettle : atomicOf(row.per_settle),
          daily: row?.daily == null ? DEFAULT_CAPS.daily : atomicOf(row.daily),
          monthly: row?.monthly == null ? DEFAULT_CAPS.monthly : atomicOf(row.monthly)
        } satisfies Caps
      })

    /** What the payee received on the email rail (settled and settling) today and this month (UTC). */
    const usage = (orgId: string, nowMs: number) =>
      Effect.gen(function*() {
        const day = utcDay(nowMs)
        const month = utcMonth(nowMs)
        const rows = yield* sql`
          SELECT coalesce(sum(amount) FILTER (WHERE spent_at >= ${day.start} AND spent_at < ${day.end}), 0)::text AS today,
                 coalesce(sum(amount), 0)::text AS month
          FROM payments
          WHERE payee_org_id = ${orgId} AND rail = 'email' AND status IN ('settling', 'settled')
            AND spent_at >= ${month.start} AND spent_at < ${month.end}`
          .pipe(allRows(SettleCapUsageRow, "settle cap usage"))
        return { today: atomicOf(rows[0]?.today ?? "0"), month: atomicOf(rows[0]?.month ?? "0") }
      })

    /** The caps' verdict without reserving anything (a first look, before verification). */
    const check = (orgId: string, amount: bigint, nowMs: number) =>
      Effect.gen(function*() {
        const caps = yield* capsOf(orgId, false)
        const used = yield* usage(orgId, nowMs)
        return capReasons(caps, amount, used.today, used.month)
      }).pipe(Effect.orDie)

    /**
     * The verdict under the payee's cap lock: call inside the transaction that then records the
     * settling payment, so the reservation and the check are one atomic step.
     */
    const checkLocked = (orgId: string, amount: bigint, nowMs: number) =>
      Effect.gen(function*() {
        yield* sql`INSERT INTO settle_caps (org_id) VALUES (${orgId}) ON CONFLICT (org_id) DO NOTHING`
        const caps = yield* capsOf(orgId, true)
        const used = yield* usage(orgId, nowMs)
        return capReasons(caps, amount, used.today, used.month)
      })

    const show = (orgId: string) => Effect.orDie(capsOf(orgId, false))

    /** Operator change: a field left undefined keeps its value, null returns it to the default. */
    const set = (orgId: string, change: { readonly perSettle?: bigint | null; readonly daily?: bigint | null; readonly monthly?: bigint | null }) =>
      Effect.gen(function*() {
        const v = (x: bigint | null | undefined) => (x === undefined || x === null ? null : x.toString())
        yield* sql`
          INSERT INTO settle_caps (org_id, per_settle, daily, monthly) VALUES (${orgId}, ${v(change.perSettle)}::numeric,
            ${v(change.daily)}::numeric, ${v(change.monthly)}::numeric)
          ON CONFLICT (org_id) DO UPDATE SET
            per_settle = CASE WHEN ${change.perSettle !== undefined} THEN EXCLUDED.per_settle ELSE settle_caps.per_settle END,
            daily = CASE WHEN ${change.daily !== undefined} THEN EXCLUDED.daily ELSE settle_caps.daily END,
            monthly = CASE WHEN ${change.monthly !== undefined} THEN EXCLUDED.monthly ELSE settle_caps.monthly END,
            updated_at = now()`
        return yield* capsOf(orgId, false)
      }).pipe(Effect.orDie)

    return { check, checkLocked, show, set } as const
  })
}) {}
