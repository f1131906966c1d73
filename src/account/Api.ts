/** Contract of the Account area. */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { DateTimeString, IdempotencyHeaders, Ok, strict } from "../contract/Envelope.js"
import { Wire } from "../contract/Errors.js"
import { PlanLimits } from "../contract/Plans.js"
import { Authentication } from "../contract/Security.js"
import { AttachmentPolicy } from "./AttachmentPolicy.js"

/** Which sends wait for a person's approval: none, those to a new recipient, or every send. */
export const SendApproval = Schema.Literal("none", "new_recipients", "all").annotations({
  description: "none (default); new_recipients: a send to an address this organization never sent to or received from " +
    "waits for approval; all: every send waits (POST /drafts/{id}/approve)"
})
export type SendApproval = typeof SendApproval.Type

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
  attachment_policy: Schema.NullOr(AttachmentPolicy),
  webhook_secret_rotated_at: Schema.NullOr(DateTimeString),
  send_approval: SendApproval
}).annotations({ identifier: "Account" })
export type Account = typeof Account.Type

export const AccountUpdateResult = Schema.Struct({
  id: Schema.UUID,
  email: Schema.String,
  plan: Schema.String,
  spam_threshold: Schema.optionalWith(Schema.NullOr(Schema.Number), { exact: true }),
  discard_content_on_webhook_confirmed: Schema.Boolean,
  attachment_policy: Schema.optionalWith(Schema.NullOr(AttachmentPolicy), { exact: true }),
  send_approval: Schema.optionalWith(SendApproval, { exact: true }).annotations({ description: "present when the request set it" })
}).annotations({ identifier: "AccountUpdate" })
export type AccountUpdateResult = typeof AccountUpdateResult.Type

export const SpamThreshold = Schema.Number.pipe(Schema.between(0, 15)).annotations({
  description: "0 to 15 inclusive; mail scoring above it is rejected",
  message: () => "must be a number from 0 to 15, or null"
})

export const UpdateAccount = strict(Schema.Struct({
  spam_threshold: Schema.optionalWith(Schema.NullOr(SpamThreshold), { exact: true }).annotations({
    description: "0 to 15; null disables spam rejection"
  }),
  discard_content_on_webhook_confirmed: Schema.optionalWith(Schema.Boolean, { exact: true }),
  attachment_policy: Schema.optionalWith(Schema.NullOr(AttachmentPolicy), { exact: true }).annotations({
    description: "limits on received attachments; null removes the policy"
  }),
  send_approval: Schema.optionalWith(SendApproval, { exact: true })
})).pipe(
  Schema.filter((b) => Object.keys(b).length > 0 || "at least one property is required"),
  Schema.annotations({ identifier: "UpdateAccount" })
)

export const StorageStatistics = Schema.Struct({
  used_bytes: Schema.Int,
  used_kb: Schema.Number.annotations({ description: "one decimal" }),
  used_mb: Schema.Number.annotations({ description: "two decimals" }),
  quota_mb: Schema.Number.annotations({ description: "from the plan" }),
  percentage: Schema.Number.annotations({ description: "percent of the quota used, one decimal" }),
  emails_count: Schema.Int
}).annotations({ identifier: "StorageStatistics" })
export type StorageStatistics = typeof StorageStatistics.Type

export const WebhookSecret = Schema.Struct({
  secret: Schema.String.annotations({
    description: "HMAC-SHA256 key for Mailroom-Signature; looks base64 but is used as the UTF-8 string itself"
  }),
  previous_expires_at: Schema.NullOr(DateTimeString).annotations({
    description: "after a rotation: until when the replaced secret still signs every delivery as a second `v1` " +
      "(24 hours after the rotation); null when no replaced secret signs any more"
  })
}).annotations({ identifier: "WebhookSecret" })

export class AccountApi extends HttpApiGroup.make("account")
  .add(
    HttpApiEndpoint.get("get", "/account")
      .addSuccess(Ok(Account, "Account"))
      .addError(Wire.NotFound)
      .annotate(OpenApi.Summary, "The caller's organization: plan, limits, entitlements and settings")
  )
  .add(
    HttpApiEndpoint.patch("update", "/account")
      .setPayload(UpdateAccount)
      .addSuccess(Ok(AccountUpdateResult, "AccountUpdate"))
      .addError(Wire.NotFound)
      .annotate(OpenApi.Summary, "Change account settings: spam_threshold, discard_content_on_webhook_confirmed, attachment_policy, send_approval")
  )
  .add(
    HttpApiEndpoint.get("storage", "/account/storage")
      .addSuccess(Ok(StorageStatistics, "StorageStatistics"))
      .addError(Wire.NotFound)
      .annotate(OpenApi.Summary, "Storage used by received and sent mail and memories, against the plan's quota")
  )
  .add(
    HttpApiEndpoint.get("webhookSecret", "/account/webhook-secret")
      .addSuccess(Ok(WebhookSecret, "WebhookSecret"))
      .addError(Wire.NotFound)
      .annotate(OpenApi.Summary, "The webhook signing secret (created on first read)")
  )
  .add(
    HttpApiEndpoint.post("rotateWebhookSecret", "/account/webhook-secret/rotate")
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Ok(WebhookSecret, "WebhookSecret"))
      .addError(Wire.NotFound)
      .addError(Wire.RateLimitExceeded)
      .annotate(OpenApi.Summary, "Replace the webhook secret (once per 60 minutes); for 24 hours deliveries carry a signature with each")
      .annotate(
        OpenApi.Description,
        "Deliveries, endpoint tests and replays are then signed `t=…,v1=<new>,v1=<old>` until `previous_expires_at`, " +
          "so a receiver verifying with either secret keeps accepting them (a verifier accepts a header when any `v1` " +
          "matches); afterwards only the new secret signs. Rotating again drops a secret replaced earlier."
      )
  )
  .middleware(Authentication)
  .annotate(OpenApi.Description, "Account settings, storage usage and the webhook signing secret")
{}
