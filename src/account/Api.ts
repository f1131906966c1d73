/** Contract of the Account area (SPEC.md "Account"). */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { DateTimeString, Ok } from "../contract/Envelope.js"
import { Wire } from "../contract/Errors.js"
import { PlanLimits } from "../contract/Plans.js"
import { Authentication } from "../contract/Security.js"

export const Account = Schema.Struct({
  id: Schema.UUID,
  email: Schema.String,
  plan: Schema.String,
  limits: PlanLimits,
  entitlements: Schema.Array(Schema.String),
  managed_inbox_address: Schema.NullOr(Schema.String),
  created_at: DateTimeString,
  onboarding_completed: Schema.Boolean,
  onboarding_step: Schema.NullOr(Schema.String),
  billing_subscription_status: Schema.NullOr(Schema.String),
  subscription_current_period_end: Schema.NullOr(DateTimeString),
  subscription_cancel_at_period_end: Schema.NullOr(Schema.Boolean),
  spam_threshold: Schema.NullOr(Schema.Number),
  discard_content_on_webhook_confirmed: Schema.Boolean,
  webhook_secret_rotated_at: Schema.NullOr(DateTimeString)
}).annotations({ identifier: "Account" })
export type Account = typeof Account.Type

export class AccountApi extends HttpApiGroup.make("account")
  .add(
    HttpApiEndpoint.get("get", "/account")
      .addSuccess(Ok(Account, "Account"))
      .addError(Wire.NotFound)
      .annotate(OpenApi.Summary, "The caller's organization: plan, limits, entitlements and settings")
  )
  .middleware(Authentication)
  .annotate(OpenApi.Description, "Account settings, storage usage and the webhook signing secret")
{}
