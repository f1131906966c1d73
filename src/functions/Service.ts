/**
 * Use cases of the Functions handlers that take more than one step: the functions entitlement, a
 * function created together with its endpoint (and route) in one transaction, and a manual invoke
 * signed as a delivery would be. Loading a module in workerd takes a process, so it happens before
 * the transaction, never inside it.
 */
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Option } from "effect"
import { WebhookSecrets } from "../account/WebhookSecret.js"
import { EndpointsRepo } from "../endpoints/Repo.js"
import { EndpointsService } from "../endpoints/Service.js"
import { AppConfig } from "../platform/Config.js"
import { Policy } from "../policy/Policy.js"
import { RoutesService } from "../routes/Service.js"
import { newEventId, serializeEvent, syntheticEmailReceived, truncateUtf8 } from "../webhooks/Payload.js"
import type { CreateFunction, InvokeFunction } from "./Api.js"
import { FunctionDeployer } from "./Deploy.js"
import { FunctionInvoker } from "./Invoker.js"
import { type FunctionRow, FunctionsRepo, toFunction } from "./Repo.js"
import { busyAsRateLimited, QUEUE_TIMEOUT_MS } from "./Runtime.js"

const RESPONSE_BODY_LIMIT = 2048

export class FunctionsService extends Effect.Service<FunctionsService>()("mailroom/FunctionsService", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const repo = yield* FunctionsRepo
    const endpointsRepo = yield* EndpointsRepo
    const deployer = yield* FunctionDeployer
    const invoker = yield* FunctionInvoker
    const webhookSecrets = yield* WebhookSecrets
    const config = yield* AppConfig
    const endpoints = yield* EndpointsService
    const routes = yield* RoutesService
    const policy = yield* Policy

    /** Fails unless the organization holds the functions entitlement. */
    const requireEntitled = (orgId: string) =>
      policy.require(orgId, "functions.use")

    const create = (org: string, payload: CreateFunction) =>
      Effect.gen(function*() {
        const input = { name: payload.name, code: payload.code, secrets: payload.secrets ?? {} }
        if (payload.endpoint === undefined && payload.route === undefined) return toFunction(yield* deployer.create(org, input))
        // With its endpoint (and route): all in one transaction, so a refused endpoint or route leaves no function.
        yield* deployer.check(org, input.code, input.secrets)
        return yield* sql.withTransaction(Effect.gen(function*() {
          const fn = yield* repo.insert(org, input)
          const { row: endpoint } = yield* endpoints.create(org, {
            kind: "function",
            function_id: fn.id,
            is_route_target: payload.route !== undefined || (payload.endpoint?.is_route_target ?? true)
          })
          if (payload.route !== undefined) yield* routes.create(org, { pattern: payload.route.pattern, endpoint_id: endpoint.id })
          return toFunction({ ...fn, endpoint_id: endpoint.id })
        })).pipe(Effect.catchTag("SqlError", Effect.die))
      })

    /** Runs the function once on the given event, or a synthetic `email.received` to the managed inbox. */
    const invoke = (org: string, fn: FunctionRow, payload: InvokeFunction) =>
      Effect.gen(function*() {
        // Reading the secret creates it on first use; then sign as a delivery would.
        yield* webhookSecrets.get(org)
        const signing = yield* webhookSecrets.signing(org)
        const now = new Date(yield* Clock.currentTimeMillis)
        const inbox = yield* endpointsRepo.managedInboxOf(org)
        const event = payload.event ?? syntheticEmailReceived({
          publicBaseUrl: config.publicBaseUrl,
          recipient: inbox ?? `function@${config.managedInboxDomain}`,
          now
        })
        const body = payload.event === undefined ? serializeEvent(event as ReturnType<typeof syntheticEmailReceived>) : JSON.stringify(event)
        const eventId = typeof event["id"] === "string" ? event["id"] : newEventId()
        const eventType = typeof event["event"] === "string" ? event["event"] : "email.received"
        const ran = yield* invoker.invoke(fn, {
          payload: body,
          eventId,
          event: eventType,
          deliveryId: null,
          signingSecrets: Option.getOrElse(signing, () => []),
          attempt: 1,
          // The organization's slots busy for this long: 429 rather than an open request for minutes.
          maxWaitMs: QUEUE_TIMEOUT_MS
        }).pipe(Effect.catchTag("SlotsBusy", busyAsRateLimited))
        // Only a delivery passes `onStart`: an invoke always runs.
        const outcome = Option.getOrThrow(ran)
        return {
          invocation_id: outcome.invocationId,
          status: outcome.status,
          status_code: outcome.statusCode,
          response_body: truncateUtf8(outcome.responseBody, RESPONSE_BODY_LIMIT).value,
          duration_ms: outcome.durationMs,
          logs: outcome.logs,
          error: outcome.error
        }
      })

    return { requireEntitled, create, invoke } as const
  })
}) {}
