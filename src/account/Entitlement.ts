/** Capability checks: a missing entitlement is 403 `forbidden` naming the plan that grants it. */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { Forbidden } from "../contract/Errors.js"
import { type Entitlement, ENTITLEMENTS, type Plan, upgradeHint } from "../contract/Plans.js"

const PLAN_ORDER: ReadonlyArray<Plan> = ["agent", "developer", "pro"]

/** The cheapest plan whose entitlements include `key`. */
export const planGranting = (key: Entitlement): Plan | undefined => PLAN_ORDER.find((p) => ENTITLEMENTS[p].includes(key))

/** Fails with 403 unless the organization's plan grants `key`. */
export const requireEntitlement = (orgId: string, key: Entitlement, what: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const rows = yield* sql<{ plan: Plan; granted: boolean }>`
      SELECT plan, EXISTS (SELECT 1 FROM organization_entitlements g WHERE g.org_id = o.id AND g.entitlement = ${key}) AS granted
      FROM organizations o WHERE o.id = ${orgId}`.pipe(Effect.orDie)
    const plan = rows[0]?.plan ?? "agent"
    if (ENTITLEMENTS[plan].includes(key) || rows[0]?.granted === true) return
    const required = planGranting(key) ?? "pro"
    return yield* new Forbidden({
      message: `${what} need the ${key} entitlement (plan ${required} or above); this organization is on ${plan}`,
      details: { required_plan: required, missing_entitlement: key, current_plan: plan, hint: upgradeHint(plan, required, key) }
    })
  })
