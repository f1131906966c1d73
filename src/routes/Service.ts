/**
 * Creating and changing routes, for the Routes handlers and for whatever else lays a route (a
 * template's install): where a pattern may point (the organization's managed inbox or verified
 * domains) and what it points at (an endpoint, or a function's endpoint).
 */
import { SqlClient } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import { NotFound } from "../contract/Errors.js"
import { EndpointsRepo } from "../endpoints/Repo.js"
import { EndpointsService, invalid } from "../endpoints/Service.js"
import { DomainsRepo } from "../domains/Repo.js"
import { AppConfig } from "../platform/Config.js"
import { allRows } from "../platform/Rows.js"
import { parseRoutePattern } from "./Patterns.js"
import { RoutesRepo } from "./Repo.js"

export interface RouteTarget {
  readonly endpoint_id?: string
  readonly function_id?: string
}

/** Rows of "inbox addresses of route". */
const InboxAddressesOfRouteRow = Schema.Struct({ a: Schema.String })

export class RoutesService extends Effect.Service<RoutesService>()("mailroom/RoutesService", {
  effect: Effect.gen(function*() {
    const repo = yield* RoutesRepo
    const endpoints = yield* EndpointsRepo
    const endpointService = yield* EndpointsService
    const domains = yield* DomainsRepo
    const config = yield* AppConfig
    const sql = yield* SqlClient.SqlClient
    const managed = config.managedInboxDomain.toLowerCase()

    /** The pattern's domain: one of the organization's verified domains, or its managed inbox. */
    const domainOfPattern = (org: string, raw: string) =>
      Effect.gen(function*() {
        const p = parseRoutePattern(raw)
        if (p === undefined) return yield* invalid("pattern", "must be an address pattern such as support@acme.com or *@acme.com")
        if (p.domain === managed) {
          const rows = yield* sql`SELECT address AS a FROM inboxes WHERE org_id = ${org}`.pipe(
            allRows(InboxAddressesOfRouteRow, "inbox addresses of route"),
            Effect.orDie
          )
          const locals = rows.map((r) => r.a.split("@")[0]!)
          if (!locals.some((l) => p.local === l || p.local.startsWith(`${l}+`))) {
            return yield* invalid("pattern", `on ${managed} only this organization's inbox addresses (and their +tag forms) can be routed`)
          }
          return { pattern: p.pattern, domainId: null }
        }
        const verified = yield* domains.findVerifiedByName(p.domain)
        if (Option.isNone(verified) || verified.value.org_id !== org) {
          return yield* invalid("pattern", `${p.domain} is not a verified domain of this organization`)
        }
        return { pattern: p.pattern, domainId: verified.value.id }
      })

    /** The endpoint a route points at: the one named, or the function's (a route-target endpoint). */
    const targetOf = (org: string, t: RouteTarget) =>
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

    const create = (org: string, input: RouteTarget & { readonly pattern: string }) =>
      Effect.gen(function*() {
        const { pattern, domainId } = yield* domainOfPattern(org, input.pattern)
        const endpointId = yield* targetOf(org, input)
        return yield* repo.insert({ orgId: org, pattern, domainId, endpointId })
      })

    return { create, domainOfPattern, targetOf } as const
  }),
  dependencies: [EndpointsService.Default]
}) {}
