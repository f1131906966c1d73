/**
 * Which endpoint receives mail for a recipient (CONTRACT.md "Delivery"): an explicit route (exact
 * before wildcard, most specific wildcard first) → the domain's default endpoint → the organization
 * fallback (`domain_id: null`). Managed inbox addresses (and their `+tag` forms) belong to their
 * organization and use its fallback. Only active, enabled endpoints are chosen; a route whose
 * endpoint is disabled is passed over. Mail for an inactive or unverified domain resolves to nothing.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Option } from "effect"
import { DomainsRepo } from "../domains/Repo.js"
import { type EndpointRow, EndpointsRepo } from "../endpoints/Repo.js"
import { domainOf } from "../filters/Patterns.js"
import { AppConfig } from "../platform/Config.js"
import { compareSpecificity, matchesRoute, parseRoutePattern } from "./Patterns.js"
import { RoutesRepo } from "./Repo.js"

export interface Resolution {
  readonly orgId: string
  /** The recipient's domain row; null for the managed inbox. */
  readonly domainId: string | null
  readonly via: "route" | "domain_default" | "fallback" | "none"
  readonly routeId: string | null
  readonly endpoint: Option.Option<EndpointRow>
}

export class RouteResolver extends Effect.Service<RouteResolver>()("mailroom/RouteResolver", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const config = yield* AppConfig
    const domains = yield* DomainsRepo
    const endpoints = yield* EndpointsRepo
    const routes = yield* RoutesRepo
    const managed = config.managedInboxDomain.toLowerCase()

    /** The organization owning a recipient: by managed inbox address or by verified, active domain. */
    const owner = (address: string) =>
      Effect.gen(function*() {
        const domain = domainOf(address)
        if (domain === undefined) return Option.none<{ orgId: string; domainId: string | null }>()
        if (domain === managed) {
          const local = address.slice(0, address.lastIndexOf("@"))
          const plus = local.indexOf("+")
          const base = plus > 0 ? `${local.slice(0, plus)}@${domain}` : address
          const rows = yield* sql<{ id: string }>`SELECT id FROM organizations
              WHERE managed_inbox_address = ${address} OR managed_inbox_address = ${base} LIMIT 1`.pipe(Effect.orDie)
          return Option.map(Option.fromNullable(rows[0]), (r) => ({ orgId: r.id, domainId: null }))
        }
        const row = yield* domains.findVerifiedByName(domain)
        return Option.flatMap(row, (d) => d.is_active ? Option.some({ orgId: d.org_id, domainId: d.id }) : Option.none())
      })

    const resolve = (recipient: string): Effect.Effect<Option.Option<Resolution>> =>
      Effect.gen(function*() {
        const address = recipient.trim().toLowerCase()
        const found = yield* owner(address)
        if (Option.isNone(found)) return Option.none()
        const { orgId, domainId } = found.value
        const candidates = yield* routes.candidates(orgId, domainId)
        const matching = candidates
          .map((r) => ({ row: r, p: parseRoutePattern(r.pattern) }))
          .filter((c): c is { row: typeof c.row; p: NonNullable<typeof c.p> } => c.p !== undefined && matchesRoute(c.p, address))
          // Array.sort is stable: equal specificity keeps the oldest route first.
          .sort((a, b) => compareSpecificity(a.p, b.p))
        for (const m of matching) {
          const e = yield* endpoints.find(orgId, m.row.endpoint_id)
          if (Option.isSome(e) && e.value.enabled) {
            return Option.some({ orgId, domainId, via: "route" as const, routeId: m.row.id, endpoint: e })
          }
        }
        if (domainId !== null) {
          const d = yield* endpoints.slotHolder(orgId, domainId, null)
          if (Option.isSome(d)) return Option.some({ orgId, domainId, via: "domain_default" as const, routeId: null, endpoint: d })
        }
        const f = yield* endpoints.slotHolder(orgId, null, null)
        return Option.some({
          orgId,
          domainId,
          via: Option.isSome(f) ? "fallback" as const : "none" as const,
          routeId: null,
          endpoint: f
        })
      })

    return { resolve, owner } as const
  })
}) {}
