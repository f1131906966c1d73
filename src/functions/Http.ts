/** Handlers of the Functions area. */
import { Effect, Layer, Option } from "effect"
import { MailroomApi } from "../Api.js"
import { WebhookSecrets } from "../account/WebhookSecret.js"
import { NotFound } from "../contract/Errors.js"
import { decodeCursor, DEFAULT_PAGE_SIZE, pageOf } from "../contract/Paging.js"
import { CurrentPrincipal } from "../contract/Security.js"
import { noStore } from "../platform/HttpHeaders.js"

import { DomainsRepo } from "../domains/Repo.js"
import { EndpointsRepo } from "../endpoints/Repo.js"
import { EndpointsService } from "../endpoints/Service.js"
import { Dns } from "../net/Dns.js"
import * as ApiGroup from "../platform/ApiGroup.js"
import { RoutesRepo } from "../routes/Repo.js"
import { RoutesService } from "../routes/Service.js"
import { FunctionDeployer } from "./Deploy.js"
import { FunctionsRepo, toFunction, toFunctionWithCode, toInvocation } from "./Repo.js"
import { FunctionsService } from "./Service.js"

export const FunctionsHttpLive = ApiGroup.group(MailroomApi, "functions", (handlers) =>
  Effect.gen(function*() {
    const repo = yield* FunctionsRepo
    const deployer = yield* FunctionDeployer
    const service = yield* FunctionsService

    /** The caller's organization, entitled to functions. */
    const entitledOrg = Effect.gen(function*() {
      const { orgId } = yield* CurrentPrincipal
      yield* service.requireEntitled(orgId)
      return orgId
    })

    const found = (orgId: string, id: string) =>
      Effect.flatMap(repo.find(orgId, id), Option.match({
        onNone: () => Effect.fail(new NotFound({ message: `no function ${id}` })),
        onSome: Effect.succeed
      }))

    return handlers
      .handle("create", ({ payload }) => Effect.flatMap(entitledOrg, (org) => service.create(org, payload)))
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
          return yield* service.invoke(org, yield* found(org, path.id), payload)
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
    Layer.provide(FunctionsService.Default),
    Layer.provide([FunctionDeployer.Default, RoutesService.Default, EndpointsService.Default]),
    Layer.provide([FunctionsRepo.Default, WebhookSecrets.Default, RoutesRepo.Default, EndpointsRepo.Default, DomainsRepo.Default]),
    Layer.provide([Dns.Default])
  )
