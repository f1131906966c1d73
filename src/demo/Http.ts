/** Handlers of the demo sandbox: the synthetic dataset, filtered and paged like the real lists. */
import { HttpApiBuilder } from "@effect/platform"
import { Effect, Layer } from "effect"
import { MailroomApi } from "../Api.js"
import { NotFound } from "../contract/Errors.js"
import { decodeCursor, DEFAULT_PAGE_SIZE, pageOf, type Position } from "../contract/Paging.js"
import { AppConfig } from "../platform/Config.js"
import { DemoSearch } from "./Search.js"
import { demoSendMail } from "./SendMail.js"
import { toMessage, toThread } from "../threads/Present.js"
import { demoAccount, demoDeliveries, demoEmailById, demoEmails, type DemoThread, demoThreads } from "./Dataset.js"

const threadOf = (t: DemoThread) => {
  const at = t.messages.map((m) => m.at.getTime())
  return toThread({
    id: t.id,
    message_count: t.messages.length,
    received_count: t.messages.filter((m) => m.direction === "received").length,
    sent_count: t.messages.filter((m) => m.direction === "sent").length,
    first_message_at: new Date(Math.min(...at)),
    last_message_at: new Date(Math.max(...at))
  }, t.messages)
}

/** Newest first by (time, id), after the cursor's position: the order of the real keyset lists. */
const page = <R extends { readonly created_at: Date; readonly id: string }, A>(
  rows: ReadonlyArray<R>,
  after: Position | undefined,
  limit: number,
  toItem: (r: R) => A
) => {
  const sorted = [...rows].sort((a, b) => b.created_at.getTime() - a.created_at.getTime() || (a.id < b.id ? 1 : -1))
  const rest = after === undefined
    ? sorted
    : sorted.filter((r) =>
      r.created_at.getTime() < after.createdAt.getTime() || (r.created_at.getTime() === after.createdAt.getTime() && r.id < after.id)
    )
  return pageOf(rest.slice(0, limit + 1), limit, rows.length, toItem)
}

const within = (t: Date, from: Date | undefined, to: Date | undefined) =>
  (from === undefined || t >= from) && (to === undefined || t <= to)

export const DemoHttpLive = HttpApiBuilder.group(MailroomApi, "demo", (handlers) =>
  Effect.gen(function*() {
    const config = yield* AppConfig
    const search = yield* DemoSearch
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
          return page(rows, after, q.limit ?? DEFAULT_PAGE_SIZE, ({ created_at: _, ...e }) => e)
        }))
      .handle("email", ({ path }) => {
        const found = demoEmailById(path.id)
        return found === undefined
          ? Effect.fail(new NotFound({ message: "email not found in the demo mailbox (GET /v1/demo/emails lists it)" }))
          : Effect.succeed(found.detail(config.publicBaseUrl))
      })
      .handle("threads", ({ urlParams: q }) =>
        Effect.gen(function*() {
          const after = yield* decodeCursor(q.cursor)
          const participant = q.participant?.toLowerCase()
          const rows = demoThreads.map(threadOf).filter((t) =>
            (participant === undefined || t.participants.includes(participant)) &&
            (q.inbox_id === undefined || t.inbox_id === q.inbox_id) &&
            (q.label === undefined || t.labels.includes(q.label)) &&
            within(t.last_message_at, q.date_from, q.date_to)
          ).map((t) => ({ ...t, created_at: t.last_message_at }))
          return page(rows, after, q.limit ?? DEFAULT_PAGE_SIZE, ({ created_at: _, ...t }) => t)
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
          return page(rows, after, q.limit ?? DEFAULT_PAGE_SIZE, (d) => d)
        }))
  })).pipe(Layer.provide(DemoSearch.Default))
