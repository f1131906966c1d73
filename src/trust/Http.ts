/** Handlers of quarantine. */
import { Effect, Layer } from "effect"
import { MailroomApi } from "../Api.js"
import { NotFound } from "../contract/Errors.js"
import { CurrentPrincipal } from "../contract/Security.js"
import { DownloadTokens } from "../emails/DownloadTokens.js"
import { toEmail } from "../emails/Present.js"
import { EmailsRepo } from "../emails/Repo.js"
import * as ApiGroup from "../platform/ApiGroup.js"
import { AppConfig } from "../platform/Config.js"
import { QuarantineRelease } from "./Release.js"

export const QuarantineHttpLive = ApiGroup.group(MailroomApi, "quarantine", (handlers) =>
  Effect.gen(function*() {
    const quarantine = yield* QuarantineRelease
    const repo = yield* EmailsRepo
    const tokens = yield* DownloadTokens
    const config = yield* AppConfig
    return handlers.handle("release", ({ path }) =>
      Effect.gen(function*() {
        const { orgId } = yield* CurrentPrincipal
        yield* quarantine.release(orgId, path.id)
        const row = yield* Effect.flatten(repo.find(orgId, path.id)).pipe(Effect.mapError(() => new NotFound({ message: "email not found" })))
        return yield* toEmail(config.publicBaseUrl, row).pipe(Effect.provideService(DownloadTokens, tokens))
      }))
  })).pipe(Layer.provide([QuarantineRelease.Default, EmailsRepo.Default]))
