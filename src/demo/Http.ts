/**
 * Handlers of the demo sandbox over the synthetic dataset, with the real operations' rules: emails and
 * deliveries filtered in memory, then paged by the shared keyset rule (`pageInMemory` + `pageOf`, the
 * order and cursor of the real lists); threads listed by the threads repository's own statement over
 * the demo's messages given inline (read only) and shown by the threads area's presenters; search by
 * the search area's ranking (./Search.ts).
 */
import { HttpApiBuilder } from "@effect/platform"
import { Effect, Layer } from "effect"
import { MailroomApi } from "../Api.js"
import { NotFound } from "../contract/Errors.js"
import { decodeCursor, DEFAULT_PAGE_SIZE, pageOf, type Position } from "../contract/Paging.js"
import { AppConfig } from "../platform/Config.js"
import { pageInMemory } from "../platform/Listing.js"
import { DemoSearch } from "./Search.js"
import { demoSendMail } from "./SendMail.js"
import { threadRowOf, threadsPage, toMessage, toThread } from "../threads/Present.js"
import { ThreadsRepo } from "../threads/Repo.js"
import { demoAccount, demoDeliveries, demoEmailById, demoEmails, type DemoThread, demoThreads } from "./Dataset.js"

const threadOf = (t: DemoThread) => toThread(threadRowOf(t.id, t.messages), t.messages)

/** One page of rows already filtered, as a real list answers it. */
const listed = <R extends { readonly created_at: Date; readonly id: string }, A>(
  rows: ReadonlyArray<R>,
  after: Position | undefined,
  limit: number,
  toItem: (r: R) => A
) => {
  const page = pageInMemory(rows, limit, after)
  return pageOf(page.rows, limit, page.total, toItem)
}

const within = (t: Date, from: Date | undefined, to: Date | undefined) =>
  (from === undefined || t >= from) && (to === undefined || t <= to)

export const DemoHttpLive = HttpApiBuilder.group(MailroomApi, "demo", (handlers) =>
  Effect.gen(function*() {
    const config = yield* AppConfig
    const search = yield* DemoSearch
    const threads = yield* ThreadsRepo
    // The demo's conversations are listed by the real threads statement over its messages given inline.
    const demoMessages = demoThreads.flatMap((t) => t.messages)
    const threadSource = threads.inlineMessages(demoMessages)
    return handlers
      .handle("account", () => Effect.succeed(demoAccount))
      .handle("emails", ({ urlParams: q }) =>
        Effect.gen(function*() {
          const after = yield* decodeCursor(q.cursor)
          const sender = q.sender?.toLowerCase()
          const recipient = q.recipient?.toLowerCase()
          const rows = demoEmails.map((e) => e.summary).filter((e) =>
            (recipient === undefined || e.recipient === recipient) &&
            (sender === undefined || e.from === sender || e.envelope_from === sender) &&
            (q.event_type === undefined || e.event_type === q.event_type) &&
            (q.status === undefined || e.status === q.status) &&
            (q.inbox_id === undefined || e.inbox_id === q.inbox_id) &&
            (q.label === undefined || e.labels.includes(q.label)) &&
            (q.unread === undefined || e.read !== q.unread) &&
            within(e.received_at, q.date_from, q.date_to)
          ).map((e) => ({ ...e, created_at: e.received_at }))
          return listed(rows, after, q.limit ?? DEFAULT_PAGE_SIZE, ({ created_at: _, ...e }) => e)
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
          const after = yield* decodeCursor(q.cursor)
          const rows = demoDeliveries.filter((d) =>
            (q.email_id === undefined || d.email_id === q.email_id) &&
            (q.status === undefined || d.status === q.status) &&
            within(d.created_at, q.date_from, q.date_to)
          )
          return listed(rows, after, q.limit ?? DEFAULT_PAGE_SIZE, (d) => d)
        }))
  })).pipe(Layer.provide([DemoSearch.Default, ThreadsRepo.Default]))
