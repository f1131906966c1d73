/** Capability checks: a missing entitlement is 403 `forbidden` naming the plan that grants it. */
import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import { Forbidden } from "../contract/Errors.js"
import { type Entitlement, ENTITLEMENTS, Plan, upgradeHint } from "../contract/Plans.js"
import { rowsOrDie } from "../platform/RowFields.js"

const PLAN_ORDER: ReadonlyArray<Plan> = ["agent", "developer", "pro"]

/** The cheapest plan whose entitlements include `key`. */
export const planGranting = (key: Entitlement): Plan | undefined => PLAN_ORDER.find((p) => ENTITLEMENTS[p].includes(key))

const PlanGrant = Schema.Struct({ plan: Plan, granted: Schema.Boolean })

/** Fails with 403 unless the organization's plan grants `key`. */
export const requireEntitlement = (orgId: string, key: Entitlement, what: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const row = yield* SqlSchema.findOne({
      Request: Schema.String,
      Result: PlanGrant,
      execute: (orgId) =>
        sql`SELECT plan, EXISTS (SELECT 1 FROM organization_entitlements g WHERE g.org_id = o.id AND g.entitlement = ${key}) AS granted
            FROM organizations o WHERE o.id = ${orgId}`
    })(orgId).pipe(rowsOrDie("plan of an organization"))
    const plan = Option.match(row, { onNone: (): Plan => "agent", onSome: (r) => r.plan })
    if (ENTITLEMENTS[plan].includes(key) || Option.exists(row, (r) => r.granted)) return
    const required = planGranting(key) ?? "pro"
    return yield* new Forbidden({
      message: `${what} need the ${key} entitlement (plan ${required} or above); this organization is on ${plan}`,
      details: { required_plan: required, missing_entitlement: key, current_plan: plan, hint: upgradeHint(plan, required, key) }
    })
  })

/** `requireEntitlement` with the database captured, for handlers (which hold no SqlClient). */
export class Entitlements extends Effect.Service<Entitlements>()("mailroom/account/Entitlements", {
  effect: Effect.map(SqlClient.SqlClient, (sql) => ({
    require: (orgId: string, key: Entitlement, what: string) =>
      requireEntitlement(orgId, key, what).pipe(Effect.provideService(SqlClient.SqlClient, sql))
  }))
}) {}
