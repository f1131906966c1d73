/** Plan checks shared by the resource areas: paid-only features are 403 `forbidden` with `details.required_plan`. */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { Forbidden } from "../contract/Errors.js"
import { LIMITS, PAID_PLANS, type Plan, type PlanLimits, upgradeHint } from "../contract/Plans.js"

type BooleanLimit = { [K in keyof PlanLimits]: PlanLimits[K] extends boolean ? K : never }[keyof PlanLimits]

export class PlanGate extends Effect.Service<PlanGate>()("mailroom/PlanGate", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const planOf = (orgId: string) =>
      sql<{ plan: Plan }>`SELECT plan FROM organizations WHERE id = ${orgId}`.pipe(
        Effect.map((rows) => rows[0]?.plan ?? "agent"),
        Effect.orDie
      )

    const limitsOf = (orgId: string) => Effect.map(planOf(orgId), (plan) => ({ plan, limits: LIMITS[plan] }))

    /** Fails with 403 unless the organization's plan has the `limits` flag. */
    const require = (orgId: string, flag: BooleanLimit, what: string) =>
      Effect.flatMap(planOf(orgId), (plan) =>
        LIMITS[plan][flag] ? Effect.void : Effect.fail(
          new Forbidden({
            message: `${what} need a paid plan (${PAID_PLANS.join(", ")}); this organization is on ${plan}`,
            details: { required_plan: PAID_PLANS[0]!, current_plan: plan, feature: flag, hint: upgradeHint(plan, PAID_PLANS[0]!) }
          })
        ))

    return { planOf, limitsOf, require } as const
  })
}) {}
