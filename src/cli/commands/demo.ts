/** `demo`: the public sandbox, read without a login, printed like the real commands print. */
import { Console, Effect } from "effect"
import { renderTable, showList, showOne } from "../Output.js"
import { anonymousClient, target } from "../Session.js"
import type { Handler } from "../Spec.js"
import type * as S from "../Specs.js"
import { fetchPages, opt, pageParams, parseDate } from "./common.js"
import { messageColumns, showResults, threadColumns } from "./conversations.js"
import { deliveryColumns, emailColumns } from "./mail.js"

const sandbox = Effect.flatMap(target, (t) => Effect.map(anonymousClient(t), (client) => ({ client, json: t.json })))

export const demoAccount: Handler<typeof S.demoAccount> = () =>
  Effect.gen(function*() {
    const { client, json } = yield* sandbox
    yield* showOne(json, yield* client.demo.account())
  })

export const demoEmails: Handler<typeof S.demoEmails> = (o) =>
  Effect.gen(function*() {
    const { client, json } = yield* sandbox
    const from = yield* parseDate("from", o.from)
    const to = yield* parseDate("to", o.to)
    const filters = { ...opt("sender", o.sender), ...opt("status", o.status), ...opt("date_from", from), ...opt("date_to", to) }
    const page = yield* fetchPages(o, (cursor) => client.demo.emails({ urlParams: { ...filters, ...pageParams(o.limit, cursor) } }))
    yield* showList(json, page, emailColumns)
  })

export const demoEmail: Handler<typeof S.demoEmail> = (o) =>
  Effect.gen(function*() {
    const { client, json } = yield* sandbox
    const email = yield* client.demo.email({ path: { id: o.id } })
    if (json) return yield* showOne(true, email)
    const { attachments: _a, headers: _h, html: _html, text, ...rest } = email
    yield* showOne(false, rest)
    if (text !== null) yield* Console.log(`\n${text}`)
  })

export const demoDeliveries: Handler<typeof S.demoDeliveries> = (o) =>
  Effect.gen(function*() {
    const { client, json } = yield* sandbox
    const page = yield* fetchPages(o, (cursor) =>
      client.demo.deliveries({ urlParams: { ...opt("status", o.status), ...pageParams(o.limit, cursor) } }))
    yield* showList(json, page, deliveryColumns)
  })

export const demoThreads: Handler<typeof S.demoThreads> = (o) =>
  Effect.gen(function*() {
    const { client, json } = yield* sandbox
    const page = yield* fetchPages(o, (cursor) =>
      client.demo.threads({ urlParams: { ...opt("participant", o.participant), ...pageParams(o.limit, cursor) } }))
    yield* showList(json, page, threadColumns)
  })

export const demoThread: Handler<typeof S.demoThread> = (o) =>
  Effect.gen(function*() {
    const { client, json } = yield* sandbox
    const thread = yield* client.demo.thread({ path: { id: o.id } })
    if (json) return yield* showOne(true, thread)
    const { messages, watches, participants, ...rest } = thread
    yield* showOne(false, { ...rest, participants: participants.join(", "), watches: watches.length })
    yield* Console.log(`\n${renderTable(messages, messageColumns)}`)
  })

export const demoSearch: Handler<typeof S.demoSearch> = (o) =>
  Effect.gen(function*() {
    const { client, json } = yield* sandbox
    const answer = yield* client.demo.search({
      urlParams: { q: o.query, ...opt("mode", o.mode), ...opt("scope", o.scope), ...opt("limit", o.limit) }
    })
    yield* showResults(json, answer)
  })
