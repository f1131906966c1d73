/**
 * The organization half of the policy vocabulary: every named permission an area asks for, what
 * grants it, and the refusal when nothing does. A permission is one of three kinds:
 *
 * - `plan`: a boolean flag of the plan's limits object (per-domain endpoints, filters and spam
 *   thresholds); 403 `forbidden` naming the paid plans, `details.feature`.
 * - `entitlement`: a capability the plan grants or an operator granted the organization; 403
 *   `forbidden` naming the cheapest plan that grants it, `details.missing_entitlement`.
 * - `operator`: a capability only an operator grants (payments); 403 `feature_disabled`.
 *
 * Sending is an entitlement with a refusal of its own (`send_mail`, which every plan grants).
 * The decision is pure over an organization's facts (its plan and its entitlements, granted ones
 * included), so the send path decides from the facts it already read; the `Policy` service
 * (Policy.ts) reads the facts for everyone else. Each refusal's message and details (and their key
 * order) are part of the wire contract: a test holds every one of them (test/policy.test.ts).
 */
import { Effect } from "effect"
import { FeatureDisabled, Forbidden } from "../contract/Errors.js"
import { type Entitlement, ENTITLEMENTS, LIMITS, PAID_PLANS, type Plan, type PlanLimits, upgradeHint } from "../contract/Plans.js"

type PlanFeature = { [K in keyof PlanLimits]: PlanLimits[K] extends boolean ? K : never }[keyof PlanLimits]

type Rule =
  | { readonly kind: "plan"; readonly feature: PlanFeature; readonly what: string }
  | { readonly kind: "entitlement"; readonly entitlement: Entitlement; readonly what: string }
  | { readonly kind: "operator"; readonly entitlement: Entitlement }
  | { readonly kind: "sending" }

/** Every permission, `area.action`; the `what` is how its refusal names the feature. */
export const PERMISSIONS = {
  "emails.send": { kind: "sending" },
  "functions.use": { kind: "entitlement", entitlement: "functions", what: "functions" },
  "wakes.use": { kind: "entitlement", entitlement: "functions", what: "wakes" },
  "memories.use": { kind: "entitlement", entitlement: "functions", what: "function memories" },
  "templates.install": { kind: "entitlement", entitlement: "functions", what: "template installs" },
  "search.use": { kind: "entitlement", entitlement: "search", what: "search" },
  "registries.use": { kind: "entitlement", entitlement: "registries", what: "registries" },
  "registries.publish": { kind: "entitlement", entitlement: "registries", what: "publishing registry entries" },
  "payments.use": { kind: "operator", entitlement: "payments" },
  "endpoints.perDomain": { kind: "plan", feature: "webhooks_per_domain", what: "per-domain endpoints" },
  "filters.perDomain": { kind: "plan", feature: "filters_per_domain", what: "per-domain filters" },
  "domains.spamThresholds": { kind: "plan", feature: "spam_thresholds_per_domain", what: "per-domain spam thresholds" }
} as const satisfies Record<string, Rule>

export type Permission = keyof typeof PERMISSIONS

/** The refusal a permission can raise: only the operator-granted kind is `feature_disabled`. */
export type Refusal<P extends Permission> = (typeof PERMISSIONS)[P] extends { readonly kind: "operator" } ? FeatureDisabled : Forbidden

/** What an organization holds; `entitlements` includes the ones an operator granted. */
export interface OrgFacts {
  readonly plan: Plan
  readonly entitlements: ReadonlyArray<Entitlement>
}

const PLAN_ORDER: ReadonlyArray<Plan> = ["agent", "developer", "pro"]

/** The cheapest plan whose entitlements include `key`. */
export const planGranting = (key: Entitlement): Plan | undefined => PLAN_ORDER.find((p) => ENTITLEMENTS[p].includes(key))

const PAYMENTS_MESSAGE = "payments are not enabled for this organization; an operator grants the payments entitlement on request"

/** The refusal of `rule` for an organization that lacks it (`publicBaseUrl` locates the docs). */
const refuse = (rule: Rule, plan: Plan, publicBaseUrl: string): Forbidden | FeatureDisabled => {
  switch (rule.kind) {
    case "plan":
      return new Forbidden({
        message: `${rule.what} need a paid plan (${PAID_PLANS.join(", ")}); this organization is on ${plan}`,
        details: { required_plan: PAID_PLANS[0]!, current_plan: plan, feature: rule.feature, hint: upgradeHint(plan, PAID_PLANS[0]!) }
      })
    case "entitlement": {
      const required = planGranting(rule.entitlement) ?? "pro"
      return new Forbidden({
        message: `${rule.what} need the ${rule.entitlement} entitlement (plan ${required} or above); this organization is on ${plan}`,
        details: {
          required_plan: required,
          missing_entitlement: rule.entitlement,
          current_plan: plan,
          hint: upgradeHint(plan, required, rule.entitlement)
        }
      })
    }
    case "operator":
      return new FeatureDisabled({
        message: PAYMENTS_MESSAGE,
        details: { missing_entitlement: rule.entitlement, message: PAYMENTS_MESSAGE, docs_url: `${publicBaseUrl}/docs#tag/payments` }
      })
    case "sending":
      return new Forbidden({
        message: "sending needs the send_mail entitlement",
        details: { required_plan: "agent", missing_entitlement: "send_mail", current_plan: plan }
      })
  }
}

const holds = (rule: Rule, facts: OrgFacts): boolean => {
  switch (rule.kind) {
    case "plan":
      return LIMITS[facts.plan][rule.feature]
    case "entitlement":
    case "operator":
      // No plan grants an operator entitlement (Plans.ts), so holding it means it was granted.
      return facts.entitlements.includes(rule.entitlement)
    case "sending":
      return facts.entitlements.includes("send_mail")
  }
}

/** Whether an organization with these facts holds `permission`. */
export const allows = (permission: Permission, facts: OrgFacts): boolean => holds(PERMISSIONS[permission], facts)

/** Succeeds when the organization holds `permission`, fails with its refusal otherwise. */
export const decide = <P extends Permission>(permission: P, facts: OrgFacts, publicBaseUrl: string): Effect.Effect<void, Refusal<P>> => {
  const rule: Rule = PERMISSIONS[permission]
  return holds(rule, facts) ? Effect.void : Effect.fail(refuse(rule, facts.plan, publicBaseUrl) as Refusal<P>)
}
