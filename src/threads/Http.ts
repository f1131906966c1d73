/** Handlers of Threads. */
import { HttpApiBuilder } from "@effect/platform"
import { Effect, Layer } from "effect"
import { MailroomApi } from "../Api.js"
import { NotFound } from "../contract/Errors.js"
import { decodeCursor, DEFAULT_PAGE_SIZE, encodeCursor } from "../contract/Paging.js"
import { CurrentPrincipal } from "../contract/Security.js"
import { toWatch, WakesRepo } from "../wake/Repo.js"
import { toMessage, toThread } from "./Present.js"
import { type MessageRow, type ThreadRow, ThreadsRepo } from "./Repo.js"


export const ThreadsHttpLive = HttpApiBuilder.group(MailroomApi, "threads", (handlers) =>
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
          const page = rows.slice(0, limit)
          const messages = yield* repo.messagesOf(principal, page.map((t) => t.id), includeWake)
          const byThread = new Map<string, Array<MessageRow>>()
          for (const m of messages) {
            const list = byThread.get(m.thread_id)
            if (list === undefined) byThread.set(m.thread_id, [m])
            else list.push(m)
          }
          const last = page[page.length - 1]
          return {
            items: page.map((t) => toThread(t, byThread.get(t.id) ?? [])),
            meta: {
              total,
              limit,
              cursor: rows.length > limit && last !== undefined ? encodeCursor({ createdAt: last.last_message_at, id: last.id }) : null
            }
          }
        }))
      .handle("get", ({ path }) =>
        Effect.gen(function*() {
          const principal = yield* CurrentPrincipal
          const orgId = principal.orgId
          const messages = yield* repo.messagesOf(principal, [path.id])
          if (messages.length === 0) return yield* new NotFound({ message: "thread not found" })
          const at = messages.map((m) => m.at.getTime())
          const row: ThreadRow = {
            id: path.id,
            message_count: messages.length,
            received_count: messages.filter((m) => m.direction === "received").length,
            sent_count: messages.filter((m) => m.direction === "sent").length,
            first_message_at: new Date(Math.min(...at)),
            last_message_at: new Date(Math.max(...at))
          }
          const watches = yield* wakes.watchesOf(orgId, path.id, false)
          return { ...toThread(row, messages), messages: messages.map(toMessage), watches: watches.map(toWatch) }
        }))
  })).pipe(Layer.provide([ThreadsRepo.Default, WakesRepo.Default]))
