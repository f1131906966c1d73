/** Handlers of the Routes area. */
import { Effect, Layer, Option } from "effect"
import { MailroomApi } from "../Api.js"
import { NotFound } from "../contract/Errors.js"
import { decodeCursor, DEFAULT_PAGE_SIZE, pageOf } from "../contract/Paging.js"
import { CurrentPrincipal } from "../contract/Security.js"
import { DomainsRepo } from "../domains/Repo.js"
import { EndpointsRepo } from "../endpoints/Repo.js"
import { Dns } from "../net/Dns.js"
import * as ApiGroup from "../platform/ApiGroup.js"
import { RoutesRepo, toRoute } from "./Repo.js"
import { RoutesService } from "./Service.js"

export const RoutesHttpLive = ApiGroup.group(MailroomApi, "routes", (handlers) =>
  Effect.gen(function*() {
    const repo = yield* RoutesRepo
    const routes = yield* RoutesService
    const orgId = Effect.map(CurrentPrincipal, (p) => p.orgId)

    const notFound = (id: string) => new NotFound({ message: `no route ${id}` })

    return handlers
      .handle("create", ({ payload }) =>
        Effect.gen(function*() {
          return toRoute(yield* routes.create(yield* orgId, payload))
        }))
      .handle("list", ({ urlParams }) =>
        Effect.gen(function*() {
          const after = yield* decodeCursor(urlParams.cursor)
          const limit = urlParams.limit ?? DEFAULT_PAGE_SIZE
          const { rows, total } = yield* repo.list(yield* orgId, limit, after)
          return pageOf(rows, limit, total, toRoute)
        }))
      .handle("update", ({ path, payload }) =>
        Effect.gen(function*() {
          const org = yield* orgId
          const current = yield* Effect.flatMap(repo.find(org, path.id), Option.match({
            onNone: () => Effect.fail(notFound(path.id)),
            onSome: Effect.succeed
          }))
          const where = payload.pattern !== undefined
            ? yield* routes.domainOfPattern(org, payload.pattern)
            : { pattern: current.pattern, domainId: current.domain_id }
          const endpointId = payload.endpoint_id !== undefined || payload.function_id !== undefined
            ? yield* routes.targetOf(org, payload)
            : current.endpoint_id
          return toRoute(yield* repo.update(current.id, { ...where, endpointId }))
        }))
      .handle("remove", ({ path }) =>
        Effect.flatMap(
          Effect.flatMap(orgId, (org) => repo.remove(org, path.id)),
          Option.match({ onNone: () => Effect.fail(notFound(path.id)), onSome: (r) => Effect.succeed(toRoute(r)) })
        ))
  })).pipe(
    Layer.provide(RoutesService.Default),
    Layer.provide([RoutesRepo.Default, EndpointsRepo.Default, DomainsRepo.Default, Dns.Default])
  )
