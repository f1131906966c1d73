/** Handlers of the Filters area. */
import { Effect, Layer, Option } from "effect"
import { MailroomApi } from "../Api.js"
import { Policy } from "../policy/Policy.js"
import { NotFound } from "../contract/Errors.js"
import { decodeCursor, DEFAULT_PAGE_SIZE, pageOf } from "../contract/Paging.js"
import { CurrentPrincipal } from "../contract/Security.js"
import { DomainsRepo } from "../domains/Repo.js"
import { RegistriesRepo } from "../registries/Repo.js"
import { FiltersRepo, toFilter } from "./Repo.js"
import { normalizePattern } from "../mail/SenderPatterns.js"
import * as ApiGroup from "../platform/ApiGroup.js"

export const FiltersHttpLive = ApiGroup.group(MailroomApi, "filters", (handlers) =>
  Effect.gen(function*() {
    const repo = yield* FiltersRepo
    const domains = yield* DomainsRepo
    const plans = yield* Policy
    const registries = yield* RegistriesRepo
    const orgId = Effect.map(CurrentPrincipal, (p) => p.orgId)
    const notFound = (id: string) => new NotFound({ message: `no filter ${id}` })
    return handlers
      .handle("create", ({ payload }) =>
        Effect.gen(function*() {
          const org = yield* orgId
          const domainId = payload.domain_id ?? null
          if (domainId !== null) {
            if (Option.isNone(yield* domains.find(org, domainId))) {
              return yield* new NotFound({ message: `no domain ${domainId}` })
            }
            yield* plans.require(org, "filters.perDomain")
          }
          const pattern = normalizePattern(payload.pattern ?? "")
          if (payload.type === "registry" && Option.isNone(yield* registries.find(pattern))) {
            return yield* new NotFound({ message: `no registry ${pattern}` })
          }
          const row = yield* repo.insert({
            orgId: org,
            type: payload.type,
            pattern,
            domainId,
            ...(payload.signals !== undefined ? { signals: payload.signals } : {})
          })
          return toFilter(row)
        }))
      .handle("list", ({ urlParams }) =>
        Effect.gen(function*() {
          const after = yield* decodeCursor(urlParams.cursor)
          const limit = urlParams.limit ?? DEFAULT_PAGE_SIZE
          const { rows, total } = yield* repo.list(yield* orgId, limit, after)
          return pageOf(rows, limit, total, toFilter)
        }))
      .handle("update", ({ path, payload }) =>
        Effect.flatMap(
          Effect.flatMap(orgId, (org) => repo.setEnabled(org, path.id, payload.enabled)),
          Option.match({ onNone: () => Effect.fail(notFound(path.id)), onSome: (r) => Effect.succeed(toFilter(r)) })
        ))
      .handle("remove", ({ path }) =>
        Effect.flatMap(
          Effect.flatMap(orgId, (org) => repo.remove(org, path.id)),
          Option.match({ onNone: () => Effect.fail(notFound(path.id)), onSome: (r) => Effect.succeed(toFilter(r)) })
        ))
  })).pipe(Layer.provide([FiltersRepo.Default, DomainsRepo.Default, RegistriesRepo.Default]))
