/** Handlers of the Templates area: public reads, and the install (function, endpoint, route) in one transaction. */
import { HttpApiBuilder } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Layer } from "effect"
import { MailroomApi } from "../Api.js"
import { NotFound } from "../contract/Errors.js"
import { CurrentPrincipal } from "../contract/Security.js"
import { EndpointsRepo, toEndpoint } from "../endpoints/Repo.js"
import { EndpointsService } from "../endpoints/Service.js"
import { FunctionDeployer, invalidFunction } from "../functions/Deploy.js"
import { FunctionsRepo, toFunction } from "../functions/Repo.js"
import { RoutesRepo, toRoute } from "../routes/Repo.js"
import { RoutesService } from "../routes/Service.js"
import { DomainsRepo } from "../domains/Repo.js"
import { Dns } from "../net/Dns.js"
import { Policy } from "../policy/Policy.js"
import { toWake, WakesRepo } from "../wake/Repo.js"
import { checkSchedule } from "../wake/Schedule.js"
import { TemplateCatalog } from "./Catalog.js"
import type { Template, TemplateDetail } from "./Api.js"

const summary = (t: TemplateDetail): Template => ({
  slug: t.slug,
  name: t.name,
  description: t.description,
  event_types: t.event_types,
  required_secrets: t.required_secrets,
  optional_secrets: t.optional_secrets,
  version: t.version
})

export const TemplatesHttpLive = HttpApiBuilder.group(MailroomApi, "templates", (handlers) =>
  Effect.gen(function*() {
    const catalog = yield* TemplateCatalog
    const deployer = yield* FunctionDeployer
    const functions = yield* FunctionsRepo
    const endpoints = yield* EndpointsService
    const routes = yield* RoutesService
    const wakes = yield* WakesRepo
    const sql = yield* SqlClient.SqlClient
    const policy = yield* Policy

    const found = (slug: string) => {
      const t = catalog.find(slug)
      return t === undefined ? Effect.fail(new NotFound({ message: `no template ${slug} (GET /v1/templates lists them)` })) : Effect.succeed(t)
    }

    return handlers
      .handle("list", () =>
        Effect.succeed({
          items: catalog.all.map(summary),
          meta: { total: catalog.all.length, limit: catalog.all.length, cursor: null }
        }))
      .handle("get", ({ path }) => found(path.slug))
      .handle("install", ({ path, payload }) =>
        Effect.gen(function*() {
          const { orgId } = yield* CurrentPrincipal
          yield* policy.require(orgId, "templates.install")
          const t = yield* found(path.slug)
          const secrets = payload.secrets ?? {}
          const missing = t.required_secrets.filter((name) => (secrets[name] ?? "") === "")
          if (missing.length > 0) {
            return yield* invalidFunction(missing.map((name) => ({
              field: `secrets.${name}`,
              reason: `is required by the ${t.slug} template`
            })))
          }
          // Loading the module in workerd takes a process: before the transaction, not inside it.
          yield* deployer.check(orgId, t.code, secrets)
          return yield* sql.withTransaction(Effect.gen(function*() {
            const fn = yield* functions.insert(orgId, { name: payload.name ?? t.slug, code: t.code, secrets })
            const { row: endpoint } = yield* endpoints.create(orgId, {
              kind: "function",
              function_id: fn.id,
              rules: { event_types: [...t.event_types] },
              ...(payload.route !== undefined ? { is_route_target: true } : {})
            })
            const route = payload.route === undefined
              ? null
              : yield* routes.create(orgId, { pattern: payload.route.pattern, endpoint_id: endpoint.id })
            const now = new Date(yield* Clock.currentTimeMillis)
            const scheduled = yield* Effect.forEach(t.wakes, (w) => {
              const checked = checkSchedule({ every: w.every, cron: w.cron }, now)
              // The catalogue's own schedules: a bad one is a defect of the release, not of the request.
              if ("problem" in checked) return Effect.dieMessage(`template ${t.slug}: wake ${w.command.type}: ${checked.problem}`)
              return wakes.insert({
                orgId,
                functionId: fn.id,
                type: w.command.type,
                payload: w.command.payload === undefined ? null : JSON.stringify(w.command.payload),
                kind: checked.schedule.kind,
                value: checked.schedule.value,
                nextRunAt: checked.first
              })
            })
            return {
              function: toFunction({ ...fn, endpoint_id: endpoint.id }),
              endpoint: toEndpoint(endpoint),
              route: route === null ? null : toRoute(route),
              wakes: scheduled.map(toWake)
            }
          })).pipe(Effect.catchTag("SqlError", Effect.die))
        }))
  })).pipe(
    Layer.provide([TemplateCatalog.Default, FunctionDeployer.Default, RoutesService.Default, EndpointsService.Default, WakesRepo.Default]),
    Layer.provide([FunctionsRepo.Default, RoutesRepo.Default, EndpointsRepo.Default, DomainsRepo.Default, Dns.Default])
  )
