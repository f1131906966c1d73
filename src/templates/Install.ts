/**
 * Installing a template: its function, an endpoint for it (and a route when asked) and its wakes,
 * created in ONE transaction across the functions, endpoints, routes and wake areas, so a failed
 * install leaves nothing behind. The module is loaded in workerd before the transaction (it takes a process).
 */
import { SqlClient } from "@effect/sql"
import { Clock, Effect } from "effect"
import { toEndpoint } from "../endpoints/Repo.js"
import { EndpointsService } from "../endpoints/Service.js"
import { FunctionDeployer, invalidFunction } from "../functions/Deploy.js"
import { FunctionsRepo, toFunction } from "../functions/Repo.js"
import { toRoute } from "../routes/Repo.js"
import { RoutesService } from "../routes/Service.js"
import { toWake, WakesRepo } from "../wake/Repo.js"
import { checkSchedule } from "../wake/Schedule.js"
import type { InstallTemplate, TemplateDetail } from "./Api.js"

export class TemplateInstaller extends Effect.Service<TemplateInstaller>()("mailroom/templates/TemplateInstaller", {
  effect: Effect.gen(function*() {
    const deployer = yield* FunctionDeployer
    const functions = yield* FunctionsRepo
    const endpoints = yield* EndpointsService
    const routes = yield* RoutesService
    const wakes = yield* WakesRepo
    const sql = yield* SqlClient.SqlClient

    /** Installs template `t` for the organization (whose entitlement the caller checked). */
    const install = (orgId: string, t: TemplateDetail, payload: InstallTemplate) =>
      Effect.gen(function*() {
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
      })

    return { install } as const
  })
}) {}
