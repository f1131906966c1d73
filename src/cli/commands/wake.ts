/** `wake add|list|cancel|run` and `wake allowlist get|set`. */
import { Console, Effect, Option } from "effect"
import type { Wake } from "../../wake/Api.js"
import { CliFailure } from "../Failure.js"
import { col, done, showList, showOne } from "../Output.js"
import { authedClient, type Client } from "../Session.js"
import type { Handler } from "../Spec.js"
import type * as S from "../Specs.js"
import { fetchPages, opt, pageParams } from "./common.js"
import { functionId, optionalFunctionId } from "./refs.js"

const wakeColumns = [
  col<Wake>("id", (w) => w.id),
  col<Wake>("type", (w) => w.command.type),
  col<Wake>("schedule", (w) => Object.entries(w.schedule).map(([k, v]) => `${k} ${v}`).join("")),
  col<Wake>("status", (w) => w.status),
  col<Wake>("next run", (w) => w.next_run_at),
  col<Wake>("runs", (w) => w.run_count)
]

const parsePayload = (payload: Option.Option<string>) =>
  Option.match(payload, {
    onNone: () => Effect.succeed(Option.none<unknown>()),
    onSome: (text) =>
      Effect.try({
        try: () => Option.some(JSON.parse(text) as unknown),
        catch: () => new CliFailure({ message: `--payload: not JSON: ${text}`, usage: true })
      })
  })

export const watch: Handler<typeof S.wakeWatch> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const fn = yield* functionId(client, o.fn)
    const payload = yield* parsePayload(o.payload)
    const w = yield* client.wakes.watchThread({
      path: { id: o.thread },
      payload: {
        within: o.within,
        wake: { function_id: fn, command: { type: o.type, ...Option.match(payload, { onNone: () => ({}), onSome: (p) => ({ payload: p }) }) } }
      },
      headers: {}
    })
    yield* showOne(target.json, w)
  })

export const add: Handler<typeof S.wakeAdd> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const fn = yield* functionId(client, o.fn)
    const payload = yield* parsePayload(o.payload)
    const at = yield* Option.match(o.at, {
      onNone: () => Effect.succeed(Option.none<Date>()),
      onSome: (text) => {
        const d = new Date(text)
        return Number.isNaN(d.getTime())
          ? Effect.fail(new CliFailure({ message: `--at: not a time: ${text} (ISO 8601, e.g. 2026-12-01T08:00:00Z)`, usage: true }))
          : Effect.succeed(Option.some(d))
      }
    })
    const wake = yield* client.wakes.create({
      payload: {
        function_id: fn,
        command: { type: o.type, ...opt("payload", payload) },
        ...opt("at", at),
        ...opt("in", o.in),
        ...opt("every", o.every),
        ...opt("cron", o.cron)
      },
      headers: {}
    })
    yield* done(target.json, `Scheduled ${wake.command.type} (wake ${wake.id}); first run ${wake.next_run_at?.toISOString() ?? "-"}`, wake)
  })

export const list: Handler<typeof S.wakeList> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const filters = { ...opt("function_id", yield* optionalFunctionId(client, o.function)), ...opt("status", o.status) }
    const page = yield* fetchPages(o, (cursor) => client.wakes.list({ urlParams: { ...filters, ...pageParams(o.limit, cursor) } }))
    yield* showList(target.json, page, wakeColumns)
  })

export const cancel: Handler<typeof S.wakeCancel> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const wake = yield* client.wakes.cancel({ path: { id: o.id } })
    yield* done(target.json, `Canceled wake ${wake.id} (${wake.command.type})`, wake)
  })

export const run: Handler<typeof S.wakeRun> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const wake = yield* client.wakes.run({ path: { id: o.id }, headers: {} })
    yield* done(target.json, `Fired wake ${wake.id} (${wake.command.type}); runs so far: ${wake.run_count}`, wake)
  })

export const allowlistGet: Handler<typeof S.wakeAllowlistGet> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const list = yield* client.wakes.getAllowlist({ path: { id: yield* functionId(client, o.fn) } })
    if (target.json) return yield* showOne(true, list)
    yield* Console.log(`wake address: ${list.wake_address}`)
    yield* Console.log(list.senders.length === 0 ? "no sender may mail commands" : list.senders.join("\n"))
  })

export const allowlistSet: Handler<typeof S.wakeAllowlistSet> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const list = yield* client.wakes.putAllowlist({
      path: { id: yield* functionId(client, o.fn) },
      payload: { senders: o.sender }
    })
    yield* done(target.json, `${list.wake_address} takes commands from: ${list.senders.join(", ") || "nobody"}`, list)
  })
