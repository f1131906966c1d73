/** Handlers of Inboxes: they translate; InboxesService decides. */
import { Effect, Layer } from "effect"
import { MailroomApi } from "../Api.js"
import { CurrentPrincipal } from "../contract/Security.js"
import * as ApiGroup from "../platform/ApiGroup.js"
import { InboxesService } from "./Service.js"

export const InboxesHttpLive = ApiGroup.group(MailroomApi, "inboxes", (handlers) =>
  Effect.gen(function*() {
    const inboxes = yield* InboxesService
    const orgId = Effect.map(CurrentPrincipal, (p) => p.orgId)
    // A key limited to inboxes sees (and changes) only those.
    const scope = CurrentPrincipal

    return handlers
      .handle("create", ({ payload }) => Effect.flatMap(orgId, (org) => inboxes.create(org, payload)))
      .handle("list", ({ urlParams }) => Effect.flatMap(scope, (p) => inboxes.list(p, urlParams)))
      .handle("get", ({ path }) => Effect.flatMap(scope, (p) => inboxes.get(p, path.id)))
      .handle("update", ({ path, payload }) => Effect.flatMap(scope, (p) => inboxes.update(p, path.id, payload)))
      .handle("remove", ({ path }) => Effect.flatMap(scope, (p) => inboxes.remove(p, path.id)))
  })).pipe(Layer.provide(InboxesService.Default))
