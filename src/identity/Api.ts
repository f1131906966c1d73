/** Contract of the CLI and agent authentication area (SPEC.md "CLI and agent authentication"). */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { IdempotencyHeaders, Ok, strict } from "../contract/Envelope.js"
import { Wire } from "../contract/Errors.js"
import { PlanLimits } from "../contract/Plans.js"

export const DeviceName = Schema.String.pipe(Schema.minLength(1), Schema.maxLength(80))

export const TermsAccepted = Schema.Literal(true).annotations({
  description: "must be true",
  message: () => "must be true (accept the terms of service)"
})

export const CreateAgentAccount = strict(Schema.Struct({
  terms_accepted: TermsAccepted,
  device_name: Schema.optional(DeviceName)
})).annotations({ identifier: "CreateAgentAccount" })

export const AgentAccount = Schema.Struct({
  api_key: Schema.String.annotations({ description: "shown once" }),
  org_id: Schema.UUID,
  address: Schema.NullOr(Schema.String).annotations({ description: "managed inbox FQDN; null if publish deferred" }),
  plan: Schema.Literal("agent"),
  limits: PlanLimits,
  upgrade: Schema.Struct({
    plan: Schema.Literal("developer"),
    description: Schema.String,
    claim_path: Schema.String
  })
}).annotations({ identifier: "AgentAccount" })

export class AgentAccountsApi extends HttpApiGroup.make("agentAccounts")
  .add(
    HttpApiEndpoint.post("create", "/agent/accounts")
      .setPayload(CreateAgentAccount)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Ok(AgentAccount, "AgentAccount"), { status: 200 })
      .addError(Wire.RateLimitExceeded)
      .annotate(OpenApi.Summary, "Create an emailless agent account (agent plan, reply-only) and its API key")
  )
  .annotate(OpenApi.Description, "Emailless agent accounts")
{}
