/** POST /agent/accounts: an emailless organization on the `agent` plan with its API key. */
import { HttpServerRequest } from "@effect/platform"
import { Effect, Layer, Option } from "effect"
import { MailroomApi } from "../Api.js"
import { LIMITS } from "../contract/Plans.js"
import * as ApiGroup from "../platform/ApiGroup.js"
import { noStore } from "../platform/HttpHeaders.js"
import { RateLimiter } from "../platform/RateLimiter.js"
import { Provisioning } from "./Provisioning.js"

/** Per client address: account creation is cheap to ask for, so it is metered on its own. */
export const AGENT_ACCOUNTS_PER_HOUR = { limit: 20, windowSeconds: 3600 } as const

export const AgentAccountsHttpLive = ApiGroup.group(MailroomApi, "agentAccounts", (handlers) =>
  Effect.gen(function*() {
    const provisioning = yield* Provisioning
    const limiter = yield* RateLimiter
    return handlers.handle("create", ({ payload }) =>
      Effect.gen(function*() {
        const request = yield* HttpServerRequest.HttpServerRequest
        const client = Option.getOrElse(request.remoteAddress, () => "unknown")
        yield* limiter.enforce(`agent-accounts:ip:${client}`, AGENT_ACCOUNTS_PER_HOUR, "agent account creation")
        yield* noStore
        const { org, key } = yield* provisioning.createAgentAccount(payload.device_name ?? null)
        return {
          api_key: key.apiKey,
          org_id: org.id,
          address: org.managedInboxAddress,
          plan: "agent" as const,
          limits: LIMITS.agent,
          upgrade: {
            plan: "developer" as const,
            description:
              "Claim this account with a person's email to move to the developer plan: same org id, API key " +
              "and managed inbox; the reply-only send cap lifts.",
            claim_path: "/v1/agent/claim/start"
          }
        }
      }))
  })).pipe(Layer.provide(Provisioning.Default))
