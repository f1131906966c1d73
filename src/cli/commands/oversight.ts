/** `api-keys create|list|revoke` and `drafts list|get|approve|reject`. */
import { Console, Effect, Option } from "effect"
import type { ApiKey } from "../../apikeys/Api.js"
import type { Draft } from "../../drafts/Api.js"
import type { Scope } from "../../contract/Security.js"
import { CliFailure } from "../Failure.js"
import { col, done, renderTable, showOne } from "../Output.js"
import { authedClient } from "../Session.js"
import type { Handler } from "../Spec.js"
import type * as S from "../OversightSpecs.js"

const keyColumns = [
  col<ApiKey>("id", (k) => k.id),
  col<ApiKey>("name", (k) => k.name ?? "-"),
  col<ApiKey>("scopes", (k) => k.scopes.join(" ")),
  col<ApiKey>("created", (k) => k.created_at),
  col<ApiKey>("last used", (k) => k.last_used_at ?? "never")
]

export const apiKeysCreate: Handler<typeof S.apiKeysCreate> = (o) =>
  Effect.gen(function*() {
    if (o.scope.length === 0) return yield* new CliFailure({ message: "give at least one --scope", usage: true })
    const { client, target } = yield* authedClient
    const key = yield* client.apiKeys.create({ payload: { name: o.name, scopes: o.scope as ReadonlyArray<Scope> }, headers: {} })
    if (target.json) return yield* showOne(true, key)
    yield* Console.log(`Created API key ${key.id} (${key.scopes.join(" ")}). Its secret, shown only now:\n\n  ${key.api_key}\n`)
  })

export const apiKeysList: Handler<typeof S.apiKeysList> = () =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const keys = yield* client.apiKeys.list()
    if (target.json) return yield* showOne(true, keys)
    yield* Console.log(keys.length === 0 ? "No API keys." : renderTable(keys, keyColumns))
  })

export const apiKeysRevoke: Handler<typeof S.apiKeysRevoke> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const key = yield* client.apiKeys.revoke({ path: { id: o.id } })
    yield* done(target.json, `Revoked API key ${key.id}; it is refused from now on`, key)
  })

const draftColumns = [
  col<Draft>("id", (d) => d.id),
  col<Draft>("status", (d) => d.status),
  col<Draft>("created", (d) => d.created_at),
  col<Draft>("to", (d) => [...d.to, ...d.cc, ...d.bcc].join(", ")),
  col<Draft>("subject", (d) => d.subject)
]

export const draftsList: Handler<typeof S.draftsList> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const drafts = yield* client.drafts.list({ urlParams: Option.match(o.status, { onNone: () => ({}), onSome: (status) => ({ status }) }) })
    if (target.json) return yield* showOne(true, drafts)
    yield* Console.log(drafts.length === 0 ? "No drafts." : renderTable(drafts, draftColumns))
  })

export const draftsGet: Handler<typeof S.draftsGet> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    yield* showOne(target.json, yield* client.drafts.get({ path: { id: o.id } }))
  })

export const draftsApprove: Handler<typeof S.draftsApprove> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const d = yield* client.drafts.approve({ path: { id: o.id }, headers: {} })
    const text = d.status === "sent"
      ? `Approved ${d.id}: sent as ${d.sent_email_id}`
      : `Approved ${d.id}, but the send was refused: ${d.error?.code ?? "-"} ${d.error?.message ?? ""}`
    yield* done(target.json, text, d)
  })

export const draftsReject: Handler<typeof S.draftsReject> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const d = yield* client.drafts.reject({ path: { id: o.id }, headers: {} })
    yield* done(target.json, `Rejected ${d.id}; it will not be sent`, d)
  })
