/** Plans and their `limits` object (SPEC.md "Plan limits object", values from CONTRACT.md). */
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
  spam_thresholds_per_domain: Schema.Boolean
}).annotations({ identifier: "PlanLimits" })
export type PlanLimits = typeof PlanLimits.Type

export const LIMITS: Record<Plan, PlanLimits> = {
  agent: {
    storage_mb: 100,
    send_per_hour: 10,
    send_per_day: 50,
    api_per_minute: 120,
    webhooks_max_global: 1,
    webhooks_per_domain: false,
    filters_per_domain: false,
    spam_thresholds_per_domain: false
  },
  developer: {
    storage_mb: 1024,
    send_per_hour: 100,
    send_per_day: 1000,
    api_per_minute: 120,
    webhooks_max_global: 1,
    webhooks_per_domain: false,
    filters_per_domain: false,
    spam_thresholds_per_domain: false
  },
  pro: {
    storage_mb: 10240,
    send_per_hour: 1000,
    send_per_day: 10000,
    api_per_minute: 120,
    webhooks_max_global: null,
    webhooks_per_domain: true,
    filters_per_domain: true,
    spam_thresholds_per_domain: true
  }
}

/** Capability keys granted by each plan (sorted). An emailless agent is reply-only. */
export const ENTITLEMENTS: Record<Plan, ReadonlyArray<string>> = {
  agent: ["send_mail", "send_to_known_addresses"],
  developer: ["custom_domains", "functions", "search", "send_mail", "webhooks"],
  pro: [
    "custom_domains",
    "filters_per_domain",
    "functions",
    "search",
    "send_mail",
    "spam_thresholds_per_domain",
    "webhooks",
    "webhooks_per_domain"
  ]
}
