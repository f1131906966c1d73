/** Handlers of the Account area. */
import { Effect, Layer, Option } from "effect"
import { MailroomApi } from "../Api.js"
import { NotFound } from "../contract/Errors.js"
import { CurrentPrincipal } from "../contract/Security.js"
import * as ApiGroup from "../platform/ApiGroup.js"
import { noStore } from "../platform/HttpHeaders.js"
import { AccountRepo } from "./Repo.js"
import { WebhookSecrets } from "./WebhookSecret.js"

const orNotFound = <A, E, R>(effect: Effect.Effect<Option.Option<A>, E, R>) =>
  Effect.flatMap(effect, Option.match({
    onNone: () => Effect.fail(new NotFound({ message: "account not found" })),
    onSome: Effect.succeed
  }))

export const AccountHttpLive = ApiGroup.group(MailroomApi, "account", (handlers) =>
  Effect.gen(function*() {
    const repo = yield* AccountRepo
    const secrets = yield* WebhookSecrets
    const orgId = Effect.map(CurrentPrincipal, (p) => p.orgId)
    return handlers
      .handle("get", () => orNotFound(Effect.flatMap(orgId, repo.read)))
      .handle("update", ({ payload }) => orNotFound(Effect.flatMap(orgId, (id) => repo.update(id, payload))))
      .handle("storage", () => orNotFound(Effect.flatMap(orgId, repo.storage)))
      .handle("webhookSecret", () =>
        Effect.zipRight(noStore, orNotFound(Effect.flatMap(orgId, secrets.status))))
      .handle("rotateWebhookSecret", () =>
        Effect.zipRight(noStore, orNotFound(Effect.flatMap(orgId, secrets.rotate))))
  })).pipe(Layer.provide([AccountRepo.Default, WebhookSecrets.Default]))
