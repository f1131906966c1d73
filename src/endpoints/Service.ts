/**
 * Endpoint rules (creation, update, slots and the endpoint states), shared by the Endpoints
 * handlers and by Routes (which create route-target endpoints for functions).
 */
import { Effect, Option } from "effect"
import { Policy } from "../policy/Policy.js"
import { Conflict, Forbidden, NotFound, ValidationError } from "../contract/Errors.js"
import { LIMITS, upgradeHint } from "../contract/Plans.js"
import { DomainsRepo } from "../domains/Repo.js"
import { Dns } from "../net/Dns.js"
import { checkUrl, PRIVATE_URLS_HINT } from "../net/Ssrf.js"
import { AppConfig } from "../platform/Config.js"
import type { CreateEndpoint, UpdateEndpoint } from "./Api.js"
import { type EndpointRow, EndpointsRepo } from "./Repo.js"

export const invalid = (field: string, reason: string) =>
  new ValidationError({ message: `${field}: ${reason}`, details: { issues: [{ field, reason }] } })

export class EndpointsService extends Effect.Service<EndpointsService>()("mailroom/EndpointsService", {
  effect: Effect.gen(function*() {
    const repo = yield* EndpointsRepo
    const domains = yield* DomainsRepo
    const plans = yield* Policy
    const config = yield* AppConfig
    const dns = yield* Dns

    const checkedUrl = (url: string) =>
      checkUrl(url, { allowPrivate: config.webhookAllowPrivateUrls }).pipe(
        Effect.provideService(Dns, dns),
        Effect.mapError((e) =>
          e.wouldAllowPrivate === true
            ? new ValidationError({
              message: `url: ${e.reason}; ${PRIVATE_URLS_HINT}`,
              details: { issues: [{ field: "url", reason: e.reason }], hint: PRIVATE_URLS_HINT }
            })
            : invalid("url", e.reason)
        ),
        Effect.map((c) => c.url.toString())
      )

    /** A per-domain endpoint: the domain must be the organization's, and the plan a paid one. */
    const checkDomain = (orgId: string, domainId: string | null) =>
      domainId === null ? Effect.void : Effect.gen(function*() {
        const d = yield* domains.find(orgId, domainId)
        if (Option.isNone(d)) return yield* new NotFound({ message: `no domain ${domainId}` })
        yield* plans.require(orgId, "endpoints.perDomain")
      })

    /** The default-destination slot must be free when the endpoint will hold it. */
    const checkSlot = (orgId: string, e: { domainId: string | null; enabled: boolean; isRouteTarget: boolean }, exceptId: string | null) =>
      !e.enabled || e.isRouteTarget ? Effect.void : Effect.flatMap(repo.slotHolder(orgId, e.domainId, exceptId), (holder) =>
        Option.isNone(holder) ? Effect.void : Effect.fail(
          new Conflict({
            message: `endpoint ${holder.value.id} already is the ${e.domainId === null ? "organization fallback" : "default endpoint of this domain"}; ` +
              "disable or delete it first, or use is_route_target: true",
            details: {
              constraint: "slot",
              endpoint_id: holder.value.id,
              hint: "make the new endpoint a route target and route mail to it: `mailroom endpoints add --route-target …` " +
                "then `mailroom routes add …`, or `mailroom functions deploy FILE --name NAME --route PATTERN` for a function"
            }
          })
        ))

    /**
     * `webhooks_max_global` counts enabled organization-wide default webhooks (the fallback slot);
     * route targets hold no slot and never count, on any plan.
     */
    const checkGlobalWebhooks = (
      orgId: string,
      e: { kind: string; domainId: string | null; enabled: boolean; isRouteTarget: boolean },
      exceptId: string | null
    ) =>
      e.kind !== "http" || e.domainId !== null || !e.enabled || e.isRouteTarget ? Effect.void : Effect.gen(function*() {
        const plan = yield* plans.planOf(orgId)
        const max = LIMITS[plan].webhooks_max_global
        if (max === null) return
        const n = yield* repo.countGlobalWebhooks(orgId, exceptId)
        if (n >= max) {
          return yield* new Forbidden({
            message: `the ${plan} plan allows ${max} organization-wide webhook${max === 1 ? "" : "s"}; more need a paid plan`,
            details: {
              required_plan: "pro",
              current_plan: plan,
              feature: "webhooks_max_global",
              limit: max,
              hint: `${upgradeHint(plan, "pro")}; or make the new endpoint a route target (is_route_target: true, ` +
                "`mailroom endpoints add --route-target`) and route mail to it"
            }
          })
        }
      })

    /** Creates an endpoint; for a function that already has one, answers that one (`created: false`). */
    const create = (orgId: string, input: CreateEndpoint) =>
      Effect.gen(function*() {
        const kind = input.kind ?? "http"
        if (kind === "http") {
          if (input.function_id !== undefined) return yield* invalid("function_id", "is only allowed for kind function")
          if (input.url === undefined) return yield* invalid("url", "is required for kind http")
        } else {
          if (input.url !== undefined) return yield* invalid("url", "is only allowed for kind http")
          if (input.function_id === undefined) return yield* invalid("function_id", "is required for kind function")
          if (!(yield* repo.functionExists(orgId, input.function_id))) {
            return yield* new NotFound({ message: `no function ${input.function_id}` })
          }
          const existing = yield* repo.findByFunction(orgId, input.function_id)
          if (Option.isSome(existing)) return { row: existing.value, created: false }
        }
        const url = input.url === undefined ? null : yield* checkedUrl(input.url)
        const e = {
          kind,
          domainId: input.domain_id ?? null,
          enabled: input.enabled ?? true,
          isRouteTarget: input.is_route_target ?? false
        }
        yield* checkDomain(orgId, e.domainId)
        yield* checkSlot(orgId, e, null)
        yield* checkGlobalWebhooks(orgId, e, null)
        const row: { row: EndpointRow; created: boolean } = yield* repo.insert({
          orgId,
          kind,
          url,
          functionId: input.function_id ?? null,
          enabled: e.enabled,
          domainId: e.domainId,
          rules: input.rules ?? {},
          isRouteTarget: e.isRouteTarget
        }).pipe(
          Effect.map((row) => ({ row, created: true })),
          // A concurrent create of the same function's endpoint won the race: answer that one.
          Effect.catchIf(
            (err) => kind === "function" && err.details?.["constraint"] === "function",
            (err) => Effect.flatMap(repo.findByFunction(orgId, input.function_id!), Option.match({
              onNone: () => Effect.fail(err),
              onSome: (row) => Effect.succeed({ row, created: false })
            }))
          )
        )
        return row
      })

    const update = (orgId: string, id: string, patch: UpdateEndpoint) =>
      Effect.gen(function*() {
        const current = yield* Effect.flatMap(repo.find(orgId, id), Option.match({
          onNone: () => Effect.fail(new NotFound({ message: `no endpoint ${id}` })),
          onSome: Effect.succeed
        }))
        if (patch.url !== undefined && current.kind === "function") {
          return yield* invalid("url", "cannot be set on a function endpoint")
        }
        const url = patch.url === undefined ? undefined : yield* checkedUrl(patch.url)
        const next = {
          kind: current.kind,
          domainId: patch.domain_id !== undefined ? patch.domain_id : current.domain_id,
          enabled: patch.enabled ?? current.enabled,
          isRouteTarget: current.is_route_target
        }
        if (patch.domain_id !== undefined && patch.domain_id !== current.domain_id) yield* checkDomain(orgId, next.domainId)
        const movesIntoSlot = (next.enabled && !current.enabled) || next.domainId !== current.domain_id
        if (movesIntoSlot) {
          yield* checkSlot(orgId, next, id)
          yield* checkGlobalWebhooks(orgId, next, id)
        }
        return yield* repo.update(id, {
          ...(url !== undefined ? { url } : {}),
          ...(patch.enabled !== undefined ? { enabled: patch.enabled } : {}),
          ...(patch.domain_id !== undefined ? { domain_id: patch.domain_id } : {}),
          ...(patch.rules !== undefined ? { rules: patch.rules } : {})
        })
      })

    /** The function's endpoint for a route: the existing one, or a new route-target endpoint. */
    const forFunction = (orgId: string, functionId: string): Effect.Effect<EndpointRow, ValidationError | NotFound | Forbidden | Conflict> =>
      Effect.map(create(orgId, { kind: "function", function_id: functionId, is_route_target: true }), (r) => r.row)

    return { create, update, forFunction, checkedUrl } as const
  })
}) {}
