/**
 * Handlers of the demo sandbox over the synthetic dataset, with the real operations' rules: emails,
 * deliveries and threads listed by their repositories' own list statements over the demo's rows given
 * inline (read only: nothing is stored), emails and threads shown by their areas' presenters; search
 * by the search area's ranking (./Search.ts).
 */
import { Effect, Layer } from "effect"
import { MailroomApi } from "../Api.js"
import { NotFound } from "../contract/Errors.js"
import { decodeCursor, DEFAULT_PAGE_SIZE, pageOf } from "../contract/Paging.js"
import { DeliveriesRepo } from "../deliveries/Repo.js"
import { toSummaryPage } from "../emails/Present.js"
import { emailListQuery, EmailsRepo } from "../emails/Repo.js"
import * as ApiGroup from "../platform/ApiGroup.js"
import { AppConfig } from "../platform/Config.js"
import { DemoSearch } from "./Search.js"
import { demoSendMail } from "./SendMail.js"
import { threadRowOf, threadsPage, toMessage, toThread } from "../threads/Present.js"
import { ThreadsRepo } from "../threads/Repo.js"
import {
  demoAccount,
  demoDeliveries,
  demoEmailById,
  demoListedDeliveries,
  demoSummaryRows,
  type DemoThread,
  demoThreads
} from "./Dataset.js"

const threadOf = (t: DemoThread) => toThread(threadRowOf(t.id, t.messages), t.messages)

const deliveryById = new Map(demoDeliveries.map((d) => [d.id, d]))

export const DemoHttpLive = ApiGroup.group(MailroomApi, "demo", (handlers) =>
  Effect.gen(function*() {
    const config = yield* AppConfig
    const search = yield* DemoSearch
    const threads = yield* ThreadsRepo
    // The demo's conversations are listed by the real threads statement over its messages given inline.
    const demoMessages = demoThreads.flatMap((t) => t.messages)
    const threadSource = threads.inlineMessages(demoMessages)
    // Emails and deliveries likewise: the real list statements over the demo's rows given inline.
    const emails = yield* EmailsRepo
    const emailSource = emails.inlineEmails(demoSummaryRows)
    const deliveries = yield* DeliveriesRepo
    const deliverySource = deliveries.inlineDeliveries(demoListedDeliveries)
    return handlers
      .handle("account", () => Effect.succeed(demoAccount))
      .handle("emails", ({ urlParams: q }) =>
        Effect.gen(function*() {
          const limit = q.limit ?? DEFAULT_PAGE_SIZE
          const page = yield* emails.listOver(emailSource, emailListQuery(q, limit, yield* decodeCursor(q.cursor)))
          return toSummaryPage(page, limit)
        }))
      .handle("email", ({ path }) => {
        const found = demoEmailById(path.id)
        return found === undefined
          ? Effect.fail(new NotFound({ message: "email not found in the demo mailbox (GET /v1/demo/emails lists it)" }))
          : Effect.succeed(found.detail(config.publicBaseUrl))
      })
      .handle("threads", ({ urlParams: q }) =>
        Effect.gen(function*() {
          const limit = q.limit ?? DEFAULT_PAGE_SIZE
          const { rows, total } = yield* threads.listOver(threadSource, {
            limit,
            after: yield* decodeCursor(q.cursor),
            participant: q.participant,
            dateFrom: q.date_from,
            dateTo: q.date_to,
            inboxId: q.inbox_id,
            label: q.label
          })
          const shown = new Set(rows.slice(0, limit).map((t) => t.id))
          return threadsPage(rows, total, limit, demoMessages.filter((m) => shown.has(m.thread_id)))
        }))
      .handle("thread", ({ path }) => {
        const found = demoThreads.find((t) => t.id === path.id)
        return found === undefined
          ? Effect.fail(new NotFound({ message: "thread not found in the demo mailbox (GET /v1/demo/threads lists them)" }))
          : Effect.succeed({ ...threadOf(found), messages: found.messages.map(toMessage), watches: found.watches })
      })
      .handle("search", ({ urlParams }) => search.search(urlParams))
      .handle("sendMail", ({ payload }) => demoSendMail(payload))
      .handle("deliveries", ({ urlParams: q }) =>
        Effect.gen(function*() {
          const limit = q.limit ?? DEFAULT_PAGE_SIZE
          const { rows, total } = yield* deliveries.listOver(deliverySource, {
            orgId: demoAccount.id,
            status: q.status,
            emailId: q.email_id,
            dateFrom: q.date_from,
            dateTo: q.date_to,
            limit,
            after: yield* decodeCursor(q.cursor)
          })
          // The demo's deliveries are shown as written; the statement chose and ordered them.
          return pageOf(rows, limit, total, (r) => deliveryById.get(r.id)!)
        }))
  })).pipe(Layer.provide([DemoSearch.Default, ThreadsRepo.Default, EmailsRepo.Default, DeliveriesRepo.Default]))
