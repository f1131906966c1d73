/** Handlers of the suppression list. */
import { Effect, Layer, Option } from "effect"
import { MailroomApi } from "../Api.js"
import { NotFound } from "../contract/Errors.js"
import { decodeCursor, DEFAULT_PAGE_SIZE, pageOf } from "../contract/Paging.js"
import { CurrentPrincipal } from "../contract/Security.js"
import * as ApiGroup from "../platform/ApiGroup.js"
import { type SuppressionRow, SuppressionsRepo } from "./Repo.js"

const toSuppression = (r: SuppressionRow) => ({
  id: r.id,
  address: r.address,
  reason: r.reason,
  sent_email_id: r.sent_email_id,
  status: r.status,
  diagnostic: r.diagnostic,
  created_at: r.created_at
})

export const SuppressionsHttpLive = ApiGroup.group(MailroomApi, "suppressions", (handlers) =>
  Effect.gen(function*() {
    const repo = yield* SuppressionsRepo
    const caller = Effect.map(CurrentPrincipal, (p) => p.orgId)
    return handlers
      .handle("list", ({ urlParams }) =>
        Effect.gen(function*() {
          const org = yield* caller
          const after = yield* decodeCursor(urlParams.cursor)
          const limit = urlParams.limit ?? DEFAULT_PAGE_SIZE
          const { rows, total } = yield* repo.list(org, limit, after)
          return pageOf(rows, limit, total, toSuppression)
        }))
      .handle("remove", ({ path }) =>
        Effect.gen(function*() {
          const org = yield* caller
          const address = path.address.trim().toLowerCase()
          const removed = yield* repo.remove(org, address)
          if (Option.isNone(removed)) return yield* new NotFound({ message: `${address} is not on the suppression list` })
          return toSuppression(removed.value)
        }))
  })).pipe(Layer.provide(SuppressionsRepo.Default))
