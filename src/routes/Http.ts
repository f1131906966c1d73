/** Handlers of the Routes area. */
import { HttpApiBuilder } from "@effect/platform"
import { Effect, Layer, Option } from "effect"
import { MailroomApi } from "../Api.js"
import { PlanGate } from "../account/PlanGate.js"
import { NotFound } from "../contract/Errors.js"
import { decodeCursor, DEFAULT_PAGE_SIZE, pageOf } from "../contract/Paging.js"
import { CurrentPrincipal } from "../contract/Security.js"
import { DomainsRepo } from "../domains/Repo.js"
import { EndpointsRepo } from "../endpoints/Repo.js"
import { EndpointsService, invalid } from "../endpoints/Service.js"
import { Dns } from "../net/Dns.js"
import { AppConfig } from "../platform/Config.js"
import { SqlClient } from "@effect/sql"
import { parseRoutePattern } from "./Patterns.js"
import { RoutesRepo, toRoute } from "./Repo.js"

export const RoutesHttpLive = HttpApiBuilder.group(MailroomApi, "routes", (handlers) =>
  Effect.gen(function*() {
    const repo = yield* RoutesRepo
    const endpoints = yield* EndpointsRepo
    const endpointService = yield* EndpointsService
    const domains = yield* DomainsRepo
    const config = yield* AppConfig
    const sql = yield* SqlClient.SqlClient
    const managed = config.managedInboxDomain.toLowerCase()
    const orgId = Effect.map(CurrentPrincipal, (p) => p.orgId)

    /** The pattern's domain: one of the organization's verified domains, or its managed inbox. */
    const domainOfPattern = (org: string, raw: string) =>
      Effect.gen(function*() {
        const p = parseRoutePattern(raw)!
        if (p.domain === managed) {
          const rows = yield* sql<{ a: string | null }>`SELECT managed_inbox_address AS a FROM organizations WHERE id = ${org}`
            .pipe(Effect.orDie)
          const inboxLocal = (rows[0]?.a ?? "").split("@")[0]!
          if (inboxLocal === "" || !(p.local === inboxLocal || p.local.startsWith(`${inboxLocal}+`))) {
            return yield* invalid("pattern", `on ${managed} only this organization's managed inbox address (and its +tag forms) can be routed`)
          }
          return { pattern: p.pattern, domainId: null }
        }
        const verified = yield* domains.findVerifiedByName(p.domain)
        if (Option.isNone(verified) || verified.value.org_id !== org) {
          return yield* invalid("pattern", `${p.domain} is not a verified domain of this organization`)
        }
        return { pattern: p.pattern, domainId: verified.value.id }
      })

    const targetOf = (org: string, t: { readonly endpoint_id?: string; readonly function_id?: string }) =>
      Effect.gen(function*() {
        if (t.endpoint_id !== undefined && t.function_id !== undefined) {
          return yield* invalid("endpoint_id", "give endpoint_id or function_id, not both")
        }
        if (t.function_id !== undefined) return (yield* endpointService.forFunction(org, t.function_id)).id
        if (t.endpoint_id === undefined) return yield* invalid("endpoint_id", "endpoint_id or function_id is required")
        const e = yield* endpoints.find(org, t.endpoint_id)
        if (Option.isNone(e)) return yield* new NotFound({ message: `no endpoint ${t.endpoint_id}` })
        return e.value.id
      })

    const notFound = (id: string) => new NotFound({ message: `no route ${id}` })

    return handlers
      .handle("create", ({ payload }) =>
        Effect.gen(function*() {
          const org = yield* orgId
          const { pattern, domainId } = yield* domainOfPattern(org, payload.pattern)
          const endpointId = yield* targetOf(org, payload)
          return toRoute(yield* repo.insert({ orgId: org, pattern, domainId, endpointId }))
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
            ? yield* domainOfPattern(org, payload.pattern)
            : { pattern: current.pattern, domainId: current.domain_id }
          const endpointId = payload.endpoint_id !== undefined || payload.function_id !== undefined
            ? yield* targetOf(org, payload)
            : current.endpoint_id
          return toRoute(yield* repo.update(current.id, { ...where, endpointId }))
        }))
      .handle("remove", ({ path }) =>
        Effect.flatMap(
          Effect.flatMap(orgId, (org) => repo.remove(org, path.id)),
          Option.match({ onNone: () => Effect.fail(notFound(path.id)), onSome: (r) => Effect.succeed(toRoute(r)) })
        ))
  })).pipe(
    Layer.provide(EndpointsService.Default),
    Layer.provide([RoutesRepo.Default, EndpointsRepo.Default, DomainsRepo.Default, PlanGate.Default, Dns.Default])
  )

