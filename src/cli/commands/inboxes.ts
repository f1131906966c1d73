/** `inboxes`: the organization's addresses on the managed domain. */
import { Effect, Option } from "effect"
import type { Inbox } from "../../inboxes/Api.js"
import { CliFailure } from "../Failure.js"
import { col, showList, showOne } from "../Output.js"
import { authedClient } from "../Session.js"
import type { Handler } from "../Spec.js"
import type * as S from "../Specs.js"
import { fetchPages, opt, pageParams } from "./common.js"

const inboxColumns = [
  col<Inbox>("id", (i) => i.id),
  col<Inbox>("address", (i) => i.address),
  col<Inbox>("name", (i) => i.display_name ?? ""),
  col<Inbox>("default", (i) => i.is_default),
  col<Inbox>("created", (i) => i.created_at)
]

export const inboxesList: Handler<typeof S.inboxesList> = (p) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const page = yield* fetchPages(p, (cursor) => client.inboxes.list({ urlParams: pageParams(p.limit, cursor) }))
    yield* showList(target.json, page, inboxColumns)
  })

export const inboxesCreate: Handler<typeof S.inboxesCreate> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const inbox = yield* client.inboxes.create({
      payload: { ...opt("username", o.username), ...opt("display_name", o.displayName) },
      headers: {}
    })
    yield* showOne(target.json, inbox)
  })

export const inboxesGet: Handler<typeof S.inboxesGet> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    yield* showOne(target.json, yield* client.inboxes.get({ path: { id: o.id } }))
  })

export const inboxesRename: Handler<typeof S.inboxesRename> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    if (o.clearDisplayName && Option.isSome(o.displayName)) {
      return yield* new CliFailure({ message: "give --display-name or --clear-display-name, not both", usage: true })
    }
    const payload = {
      ...opt("username", o.username),
      ...(o.clearDisplayName ? { display_name: null } : opt("display_name", o.displayName))
    }
    if (Object.keys(payload).length === 0) {
      return yield* new CliFailure({ message: "nothing to change: pass --username, --display-name or --clear-display-name", usage: true })
    }
    yield* showOne(target.json, yield* client.inboxes.update({ path: { id: o.id }, payload }))
  })

export const inboxesDelete: Handler<typeof S.inboxesDelete> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    yield* showOne(target.json, yield* client.inboxes.remove({ path: { id: o.id } }))
  })
