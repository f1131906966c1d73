/** Handlers of the Templates area: public reads, and the install (templates/Install.ts) behind the entitlement. */
import { Effect, Layer } from "effect"
import { MailroomApi } from "../Api.js"
import { NotFound } from "../contract/Errors.js"
import { CurrentPrincipal } from "../contract/Security.js"
import { EndpointsRepo } from "../endpoints/Repo.js"
import { EndpointsService } from "../endpoints/Service.js"
import { FunctionDeployer } from "../functions/Deploy.js"
import { FunctionsRepo } from "../functions/Repo.js"
import { RoutesRepo } from "../routes/Repo.js"
import { RoutesService } from "../routes/Service.js"
import { DomainsRepo } from "../domains/Repo.js"
import { Dns } from "../net/Dns.js"
import * as ApiGroup from "../platform/ApiGroup.js"
import { Policy } from "../policy/Policy.js"
import { WakesRepo } from "../wake/Repo.js"
import { TemplateCatalog } from "./Catalog.js"
import { TemplateInstaller } from "./Install.js"
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

export const TemplatesHttpLive = ApiGroup.group(MailroomApi, "templates", (handlers) =>
  Effect.gen(function*() {
    const catalog = yield* TemplateCatalog
    const installer = yield* TemplateInstaller
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
          return yield* installer.install(orgId, t, payload)
        }))
  })).pipe(
    Layer.provide([TemplateCatalog.Default, TemplateInstaller.Default]),
    Layer.provide([FunctionDeployer.Default, RoutesService.Default, EndpointsService.Default, WakesRepo.Default]),
    Layer.provide([FunctionsRepo.Default, RoutesRepo.Default, EndpointsRepo.Default, DomainsRepo.Default, Dns.Default])
  )
