/** Handlers of Threads: the repository's rows, shown by ./Present.ts. */
import { Effect, Layer } from "effect"
import { MailroomApi } from "../Api.js"
import { NotFound } from "../contract/Errors.js"
import { decodeCursor, DEFAULT_PAGE_SIZE } from "../contract/Paging.js"
import { CurrentPrincipal } from "../contract/Security.js"
import * as ApiGroup from "../platform/ApiGroup.js"
import { toWatch, WakesRepo } from "../wake/Repo.js"
import { threadRowOf, threadsPage, toMessage, toThread } from "./Present.js"
import { ThreadsRepo } from "./Repo.js"

export const ThreadsHttpLive = ApiGroup.group(MailroomApi, "threads", (handlers) =>
  Effect.gen(function*() {
    const repo = yield* ThreadsRepo
    const wakes = yield* WakesRepo
    return handlers
      .handle("list", ({ urlParams }) =>
        Effect.gen(function*() {
          const principal = yield* CurrentPrincipal
          const limit = urlParams.limit ?? DEFAULT_PAGE_SIZE
          const after = yield* decodeCursor(urlParams.cursor)
          const includeWake = urlParams.include === "wake"
          const { rows, total } = yield* repo.list(principal, {
            limit,
            after,
            participant: urlParams.participant,
            dateFrom: urlParams.date_from,
            dateTo: urlParams.date_to,
            includeWake,
            inboxId: urlParams.inbox_id,
            label: urlParams.label
          })
          const messages = yield* repo.messagesOf(principal, rows.slice(0, limit).map((t) => t.id), includeWake)
          return threadsPage(rows, total, limit, messages)
        }))
      .handle("get", ({ path }) =>
        Effect.gen(function*() {
          const principal = yield* CurrentPrincipal
          const orgId = principal.orgId
          const messages = yield* repo.messagesOf(principal, [path.id])
          if (messages.length === 0) return yield* new NotFound({ message: "thread not found" })
          const watches = yield* wakes.watchesOf(orgId, path.id, false)
          return { ...toThread(threadRowOf(path.id, messages), messages), messages: messages.map(toMessage), watches: watches.map(toWatch) }
        }))
  })).pipe(Layer.provide([ThreadsRepo.Default, WakesRepo.Default]))
