/** `account show|update|storage` and `secret show|rotate`. */
import { Effect, Option } from "effect"
import { CliFailure } from "../Failure.js"
import { showOne } from "../Output.js"
import { authedClient } from "../Session.js"
import type { Handler } from "../Spec.js"
import type * as S from "../Specs.js"

export const show: Handler<typeof S.accountShow> = () =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    yield* showOne(target.json, yield* client.account.get())
  })

export const update: Handler<typeof S.accountUpdate> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const threshold = yield* Option.match(o.spamThreshold, {
      onNone: () => Effect.succeed({}),
      onSome: (v) => {
        if (v === "none" || v === "null") return Effect.succeed({ spam_threshold: null })
        const n = Number(v)
        return v.trim() === "" || Number.isNaN(n)
          ? Effect.fail(new CliFailure({ message: `--spam-threshold: "${v}" is not a number (0 to 15, or none)`, usage: true }))
          : Effect.succeed({ spam_threshold: n })
      }
    })
    const payload = {
      ...threshold,
      ...Option.match(o.discardContent, { onNone: () => ({}), onSome: (v) => ({ discard_content_on_webhook_confirmed: v }) }),
      ...Option.match(o.sendApproval, { onNone: () => ({}), onSome: (v) => ({ send_approval: v }) })
    }
    if (Object.keys(payload).length === 0) {
      return yield* new CliFailure({ message: "nothing to change: pass --spam-threshold, --discard-content or --send-approval", usage: true })
    }
    yield* showOne(target.json, yield* client.account.update({ payload }))
  })

export const storage: Handler<typeof S.accountStorage> = () =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    yield* showOne(target.json, yield* client.account.storage())
  })

export const secretShow: Handler<typeof S.secretShow> = () =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    yield* showOne(target.json, yield* client.account.webhookSecret())
  })

export const secretRotate: Handler<typeof S.secretRotate> = () =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    yield* showOne(target.json, yield* client.account.rotateWebhookSecret({ headers: {} }))
  })
