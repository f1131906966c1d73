/** Plans and their `limits` object. */
import { Schema } from "effect"

export const Plan = Schema.Literal("agent", "developer", "pro")
export type Plan = typeof Plan.Type
export const PAID_PLANS: ReadonlyArray<Plan> = ["pro"]

export const PlanLimits = Schema.Struct({
  storage_mb: Schema.Number,
  send_per_hour: Schema.Number,
  send_per_day: Schema.Number,
  api_per_minute: Schema.Number,
  webhooks_max_global: Schema.NullOr(Schema.Number),
  webhooks_per_domain: Schema.Boolean,
  filters_per_domain: Schema.Boolean,
  spam_thresholds_per_domain: Schema.Boolean,
  inboxes_max: Schema.Number.annotations({ description: "inboxes on the managed domain, the default one included" })
}).annotations({ identifier: "PlanLimits" })
export type PlanLimits = typeof PlanLimits.Type

/**
 * Capability keys an account may hold (the documented entitlements, plus `custom_domains`, which
 * gates claiming a domain). What the limits object already says (webhook slots, per-domain
 * webhooks, filters and spam thresholds) is not repeated here, so the two cannot disagree: an agent
 * may create its one webhook although no entitlement names webhooks.
 */
export const Entitlement = Schema.Literal(
  "custom_domains",
  "functions",
  "payments",
  "registries",
  "search",
  "send_mail",
  "send_to_known_addresses"
)
export type Entitlement = typeof Entitlement.Type

/** Granted by an operator to one organization, never by a plan. */
export const OPERATOR_ENTITLEMENTS: ReadonlyArray<Entitlement> = ["payments"]

interface PlanDefinition {
  readonly limits: PlanLimits
  /** An agent is reply-only (`send_to_known_addresses`) until its account is claimed. */
  readonly entitlements: ReadonlyArray<Entitlement>
}

/** The one table of what each plan grants: the limits object and the entitlements come from it. */
export const PLANS: Record<Plan, PlanDefinition> = {
  agent: {
    limits: {
      storage_mb: 100,
      send_per_hour: 10,
      send_per_day: 50,
      api_per_minute: 120,
      webhooks_max_global: 1,
      webhooks_per_domain: false,
      filters_per_domain: false,
      spam_thresholds_per_domain: false,
      inboxes_max: 1
    },
    entitlements: ["send_mail", "send_to_known_addresses"]
  },
  developer: {
    limits: {
      storage_mb: 1024,
      send_per_hour: 100,
      send_per_day: 1000,
      api_per_minute: 120,
      webhooks_max_global: 1,
      webhooks_per_domain: false,
      filters_per_domain: false,
      spam_thresholds_per_domain: false,
      inboxes_max: 10
    },
    entitlements: ["custom_domains", "functions", "registries", "search", "send_mail"]
  },
  pro: {
    limits: {
      storage_mb: 10240,
      send_per_hour: 1000,
      send_per_day: 10000,
      api_per_minute: 120,
      webhooks_max_global: null,
      webhooks_per_domain: true,
      filters_per_domain: true,
      spam_thresholds_per_domain: true,
      inboxes_max: 100
    },
    entitlements: ["custom_domains", "functions", "registries", "search", "send_mail"]
  }
}

const plans = Plan.literals

export const LIMITS = Object.fromEntries(plans.map((p) => [p, PLANS[p].limits])) as Record<Plan, PlanLimits>

/** The sorted entitlements of a plan, with any an operator granted to the organization. */
export const entitlementsOf = (plan: Plan, granted: ReadonlyArray<Entitlement> = []): ReadonlyArray<Entitlement> =>
  [...new Set([...PLANS[plan].entitlements, ...granted])].sort()

export const ENTITLEMENTS = Object.fromEntries(plans.map((p) => [p, entitlementsOf(p)])) as Record<
  Plan,
  ReadonlyArray<Entitlement>
>

/**
 * `details.hint` of a plan refusal: the way up from `current` to `required`, with the command. An
 * agent account is claimed by a person (developer plan); paid plans and operator-granted
 * entitlements are set by the operator of the service.
 */
export const upgradeHint = (current: Plan, required: Plan, entitlement?: Entitlement): string => {
  const claim = "claim this agent account for a person: `mailroom claim --email you@example.com` " +
    "(POST /v1/agent/claim/start; it moves the organization to the developer plan)"
  const operator = entitlement !== undefined && OPERATOR_ENTITLEMENTS.includes(entitlement)
    ? `ask the operator of this service to grant it: \`npm run admin -- grant <org_id> ${entitlement}\``
    : `ask the operator of this service to change the plan: \`npm run admin -- set-plan <org_id> ${required}\``
  if (current === "agent" && required === "developer") return claim
  if (current === "agent") return `${claim}, then ${operator}`
  return operator
}
