/** `registries`: directories of agents addressed by handle. */
import { Console, Effect, Option, Schema } from "effect"
import type { Entry, Registry } from "../../registries/Api.js"
import { CliFailure } from "../Failure.js"
import { col, showList, showOne } from "../Output.js"
import { authedClient } from "../Session.js"
import type { Handler } from "../Spec.js"
import type * as S from "../Specs.js"
import { fetchPages, opt, pageParams, parseJsonOption } from "./common.js"

const registryColumns = [
  col<Registry>("name", (r) => r.name),
  col<Registry>("policy", (r) => r.publish_policy),
  col<Registry>("entries", (r) => r.entry_count),
  col<Registry>("owner", (r) => (r.is_owner ? "you" : "-")),
  col<Registry>("description", (r) => r.description)
]

const entryColumns = [
  col<Entry>("handle", (e) => e.handle),
  col<Entry>("address", (e) => e.address),
  col<Entry>("status", (e) => e.status),
  col<Entry>("publisher", (e) => (e.publisher_is_you ? "you" : "-")),
  col<Entry>("description", (e) => e.description)
]

const Metadata = Schema.Record({ key: Schema.String, value: Schema.Unknown })

/** `--capabilities a,b` → `["a","b"]` (blanks dropped). */
const capabilitiesOf = (value: Option.Option<string>) =>
  Option.map(value, (v) => v.split(",").map((c) => c.trim()).filter((c) => c.length > 0))

export const registriesCreate: Handler<typeof S.registriesCreate> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const r = yield* client.registries.create({
      payload: { name: o.name, ...opt("description", o.description), ...opt("publish_policy", o.policy) },
      headers: {}
    })
    yield* showOne(target.json, r)
  })

export const registriesList: Handler<typeof S.registriesList> = (p) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const page = yield* fetchPages(p, (cursor) =>
      client.registries.list({ urlParams: { ...pageParams(p.limit, cursor), ...(p.owned ? { owned: true } : {}) } }))
    yield* showList(target.json, page, registryColumns)
  })

export const registriesShow: Handler<typeof S.registriesShow> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    yield* showOne(target.json, yield* client.registries.get({ path: { name: o.name } }))
  })

export const registriesUpdate: Handler<typeof S.registriesUpdate> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const payload = {
      ...Option.match(o.description, { onNone: () => ({}), onSome: (d) => ({ description: d === "none" ? null : d }) }),
      ...opt("publish_policy", o.policy)
    }
    if (Object.keys(payload).length === 0) {
      return yield* new CliFailure({ message: "nothing to change: pass --description or --policy", usage: true })
    }
    yield* showOne(target.json, yield* client.registries.update({ path: { name: o.name }, payload }))
  })

export const registriesDelete: Handler<typeof S.registriesDelete> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    yield* showOne(target.json, yield* client.registries.remove({ path: { name: o.name } }))
  })

export const registriesPublish: Handler<typeof S.registriesPublish> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const metadata = yield* parseJsonOption("metadata", Metadata, o.metadata)
    const entry = yield* client.registries.publish({
      path: { name: o.name },
      payload: {
        handle: o.handle,
        address: o.address,
        ...opt("description", o.description),
        ...opt("capabilities", capabilitiesOf(o.capabilities)),
        ...opt("metadata", metadata)
      },
      headers: {}
    })
    yield* showOne(target.json, entry)
    if (!target.json && entry.status === "pending") {
      yield* Console.error("pending: the registry's owner must approve it before others see it")
    }
  })

export const registriesEntries: Handler<typeof S.registriesEntries> = (p) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const page = yield* fetchPages(p, (cursor) =>
      client.registries.entries({
        path: { name: p.name },
        urlParams: { ...pageParams(p.limit, cursor), ...opt("status", p.status) }
      }))
    yield* showList(target.json, page, entryColumns)
  })

export const registriesEntry: Handler<typeof S.registriesEntry> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    yield* showOne(target.json, yield* client.registries.entry({ path: { name: o.name, handle: o.handle } }))
  })

export const registriesUnpublish: Handler<typeof S.registriesUnpublish> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    yield* showOne(target.json, yield* client.registries.removeEntry({ path: { name: o.name, handle: o.handle } }))
  })

export const registriesApprove: Handler<typeof S.registriesApprove> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    yield* showOne(target.json, yield* client.registries.approve({ path: { name: o.name, handle: o.handle }, headers: {} }))
  })

export const registriesReject: Handler<typeof S.registriesReject> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    yield* showOne(target.json, yield* client.registries.reject({ path: { name: o.name, handle: o.handle }, headers: {} }))
  })
