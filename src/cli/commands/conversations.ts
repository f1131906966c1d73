/** `threads list|get` and `search`. */
import { Console, Effect } from "effect"
import type { SearchResult } from "../../search/Api.js"
import type { Thread, ThreadMessage } from "../../threads/Api.js"
import { col, printJson, renderTable, showList, showOne } from "../Output.js"
import { authedClient } from "../Session.js"
import type { Handler } from "../Spec.js"
import type * as S from "../Specs.js"
import { fetchPages, opt, pageParams, parseDate } from "./common.js"

const cut = (s: string | null, n: number) => (s === null ? null : s.length > n ? `${s.slice(0, n - 1)}…` : s)

export const threadColumns = [
  col<Thread>("id", (t) => t.id),
  col<Thread>("subject", (t) => cut(t.subject, 40)),
  col<Thread>("messages", (t) => `${t.message_count} (${t.received_count} in, ${t.sent_count} out)`),
  col<Thread>("last activity", (t) => t.last_message_at),
  col<Thread>("participants", (t) => cut(t.participants.join(", "), 60))
]

export const messageColumns = [
  col<ThreadMessage>("date", (m) => m.date),
  col<ThreadMessage>("direction", (m) => m.direction),
  col<ThreadMessage>("from", (m) => m.from),
  col<ThreadMessage>("subject", (m) => cut(m.subject, 40)),
  col<ThreadMessage>("id", (m) => m.id)
]

export const resultColumns = [
  col<SearchResult>("subject", (r) => cut(r.subject, 40)),
  col<SearchResult>("from", (r) => r.from),
  col<SearchResult>("date", (r) => r.date),
  col<SearchResult>("score", (r) => r.score.toFixed(4)),
  col<SearchResult>("legs", (r) => r.matched.join("+")),
  col<SearchResult>("kind", (r) => r.kind),
  col<SearchResult>("id", (r) => r.id)
]

export const threadsList: Handler<typeof S.threadsList> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const from = yield* parseDate("from", o.from)
    const to = yield* parseDate("to", o.to)
    const filters = {
      ...opt("participant", o.participant),
      ...opt("date_from", from),
      ...opt("date_to", to),
      ...(o.includeWake ? { include: "wake" as const } : {}),
      ...opt("inbox_id", o.inboxId)
    }
    const page = yield* fetchPages(o, (cursor) => client.threads.list({ urlParams: { ...filters, ...pageParams(o.limit, cursor) } }))
    yield* showList(target.json, page, threadColumns)
  })

export const threadsGet: Handler<typeof S.threadsGet> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const thread = yield* client.threads.get({ path: { id: o.id } })
    if (target.json) return yield* showOne(true, thread)
    const { messages, participants, watches, ...rest } = thread
    const active = watches.filter((w) => w.status === "active")
    yield* showOne(false, {
      ...rest,
      participants: participants.join(", "),
      watches: active.length === 0 ? "-" : active.map((w) => `${w.command.type} at ${w.due_at.toISOString()} (${w.id})`).join("; ")
    })
    yield* Console.log(`\n${renderTable(messages, messageColumns)}`)
  })

export const search: Handler<typeof S.search> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const dateFrom = yield* parseDate("date-from", o.dateFrom)
    const dateTo = yield* parseDate("date-to", o.dateTo)
    const answer = yield* client.search.search({
      urlParams: {
        q: o.query,
        ...opt("mode", o.mode),
        ...opt("scope", o.scope),
        ...opt("limit", o.limit),
        ...opt("from", o.from),
        ...opt("to", o.to),
        ...opt("date_from", dateFrom),
        ...opt("date_to", dateTo),
        ...opt("thread_id", o.thread),
        ...opt("inbox_id", o.inboxId)
      }
    })
    yield* showResults(target.json, answer)
  })

/** A search answer: JSON as the API gives it, or a table and a summary line. */
export const showResults = (json: boolean, answer: { readonly data: { readonly results: ReadonlyArray<SearchResult> }; readonly meta: { readonly mode: string; readonly took_ms: number; readonly embedding_model: string | null } }) =>
  Effect.gen(function*() {
    if (json) return yield* printJson({ data: answer.data, meta: answer.meta })
    const { meta, data } = answer
    if (data.results.length === 0) yield* Console.log("no results")
    else yield* Console.log(renderTable(data.results, resultColumns))
    const model = meta.embedding_model === null ? "" : `, model ${meta.embedding_model}`
    yield* Console.error(`${data.results.length} results (${meta.mode}, ${meta.took_ms} ms${model})`)
  })
