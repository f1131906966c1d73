/** Handlers of the Account area. */
import { HttpApiBuilder } from "@effect/platform"
import { Effect, Layer, Option } from "effect"
import { MailroomApi } from "../Api.js"
import { NotFound } from "../contract/Errors.js"
import { CurrentPrincipal } from "../contract/Security.js"
import { AccountRepo } from "./Repo.js"

export const AccountHttpLive = HttpApiBuilder.group(MailroomApi, "account", (handlers) =>
  Effect.gen(function*() {
    const repo = yield* AccountRepo
    return handlers.handle("get", () =>
      Effect.gen(function*() {
        const principal = yield* CurrentPrincipal
        const account = yield* repo.find(principal.orgId)
        return yield* Option.match(account, {
          onNone: () => Effect.fail(new NotFound({ message: "account not found" })),
          onSome: Effect.succeed
        })
      }))
  })).pipe(Layer.provide(AccountRepo.Default))
