/** Handlers of the Functions area. */
import { HttpApiBuilder } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Layer, Option } from "effect"
import { MailroomApi } from "../Api.js"
import { Policy } from "../policy/Policy.js"
import { WebhookSecrets } from "../account/WebhookSecret.js"
import { NotFound } from "../contract/Errors.js"
import { decodeCursor, DEFAULT_PAGE_SIZE, pageOf } from "../contract/Paging.js"
import { CurrentPrincipal } from "../contract/Security.js"
import { AppConfig } from "../platform/Config.js"
import { noStore } from "../platform/HttpHeaders.js"
import { newEventId, serializeEvent, syntheticEmailReceived, truncateUtf8 } from "../webhooks/Payload.js"
import { DomainsRepo } from "../domains/Repo.js"
import { EndpointsRepo } from "../endpoints/Repo.js"
import { EndpointsService } from "../endpoints/Service.js"
import { Dns } from "../net/Dns.js"
import { RoutesRepo } from "../routes/Repo.js"
import { RoutesService } from "../routes/Service.js"
import { FunctionDeployer } from "./Deploy.js"
import { FunctionInvoker } from "./Invoker.js"
import { FunctionsRepo, toFunction, toFunctionWithCode, toInvocation } from "./Repo.js"
import { busyAsRateLimited, QUEUE_TIMEOUT_MS } from "./Runtime.js"

const RESPONSE_BODY_LIMIT = 2048

export const FunctionsHttpLive = HttpApiBuilder.group(MailroomApi, "functions", (handlers) =>
  Effect.gen(function*() {
    const repo = yield* FunctionsRepo
    const deployer = yield* FunctionDeployer
    const invoker = yield* FunctionInvoker
    const webhookSecrets = yield* WebhookSecrets
    const config = yield* AppConfig
    const sql = yield* SqlClient.SqlClient
    const policy = yield* Policy
    const endpoints = yield* EndpointsService
    const routes = yield* RoutesService

    /** The caller's organization, entitled to functions. */
    const entitledOrg = Effect.gen(function*() {
      const { orgId } = yield* CurrentPrincipal
      yield* policy.require(orgId, "functions.use")
      return orgId
    })

    const found = (orgId: string, id: string) =>
      Effect.flatMap(repo.find(orgId, id), Option.match({
        onNone: () => Effect.fail(new NotFound({ message: `no function ${id}` })),
        onSome: Effect.succeed
      }))

    return handlers
      .handle("create", ({ payload }) =>
        Effect.gen(function*() {
          const org = yield* entitledOrg
          const input = { name: payload.name, code: payload.code, secrets: payload.secrets ?? {} }
          if (payload.endpoint === undefined && payload.route === undefined) return toFunction(yield* deployer.create(org, input))
          // With its endpoint (and route): all in one transaction, so a refused endpoint or route leaves no function.
          // Loading the module in workerd takes a process: before the transaction, not inside it.
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
        }))
      .handle("list", ({ urlParams }) =>
        Effect.gen(function*() {
          const org = yield* entitledOrg
          const after = yield* decodeCursor(urlParams.cursor)
          const limit = urlParams.limit ?? DEFAULT_PAGE_SIZE
          const { rows, total } = yield* repo.list(org, limit, after)
          return pageOf(rows, limit, total, toFunction)
        }))
      .handle("get", ({ path }) =>
        Effect.gen(function*() {
          const org = yield* entitledOrg
          return toFunctionWithCode(yield* found(org, path.id))
        }))
      .handle("update", ({ path, payload }) =>
        Effect.gen(function*() {
          const org = yield* entitledOrg
          const current = yield* found(org, path.id)
          yield* deployer.check(org, payload.code, payload.secrets, current.secret_names)
          return toFunction(yield* repo.update(current, payload))
        }))
      .handle("remove", ({ path }) =>
        Effect.gen(function*() {
          const org = yield* entitledOrg
          const fn = yield* found(org, path.id)
          const removed = yield* repo.remove(org, fn.id)
          if (Option.isNone(removed)) return yield* new NotFound({ message: `no function ${path.id}` })
          return toFunction({ ...removed.value, endpoint_id: null })
        }))
      .handle("invoke", ({ path, payload }) =>
        Effect.gen(function*() {
          const org = yield* entitledOrg
          // Every invoke runs the function again: never answered from a derived idempotency key.
          yield* noStore
          const fn = yield* found(org, path.id)
          // Reading the secret creates it on first use; then sign as a delivery would.
          yield* webhookSecrets.get(org)
          const signing = yield* webhookSecrets.signing(org)
          const now = new Date(yield* Clock.currentTimeMillis)
          const inbox = yield* sql<{ a: string | null }>`SELECT managed_inbox_address AS a FROM organizations WHERE id = ${org}`
            .pipe(Effect.orDie)
          const event = payload.event ?? syntheticEmailReceived({
            publicBaseUrl: config.publicBaseUrl,
            recipient: inbox[0]?.a ?? `function@${config.managedInboxDomain}`,
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
        }))
      .handle("invocations", ({ path, urlParams }) =>
        Effect.gen(function*() {
          const org = yield* entitledOrg
          const fn = yield* found(org, path.id)
          const after = yield* decodeCursor(urlParams.cursor)
          const limit = urlParams.limit ?? DEFAULT_PAGE_SIZE
          const { rows, total } = yield* repo.invocations(fn.id, limit, after)
          return pageOf(rows, limit, total, toInvocation)
        }))
  })).pipe(
    Layer.provide([FunctionDeployer.Default, RoutesService.Default, EndpointsService.Default]),
    Layer.provide([FunctionsRepo.Default, WebhookSecrets.Default, RoutesRepo.Default, EndpointsRepo.Default, DomainsRepo.Default]),
    Layer.provide([Dns.Default])
  )
