/** `account show|update|storage` and `secret show|rotate`. */
import { Command, Options } from "@effect/cli"
import { Effect, Option } from "effect"
import { CliFailure } from "../Failure.js"
import { showOne } from "../Output.js"
import { authedClient } from "../Session.js"
import { booleanValue } from "./common.js"

const show = Command.make("show", {}, () =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    yield* showOne(target.json, yield* client.account.get())
  })).pipe(Command.withDescription("Plan, limits, entitlements and settings"))

const update = Command.make("update", {
  spamThreshold: Options.text("spam-threshold").pipe(
    Options.optional,
    Options.withDescription("0 to 15, or `none` to turn spam rejection off")
  ),
  discardContent: booleanValue("discard-content").pipe(
    Options.optional,
    Options.withDescription("drop stored content once a delivery is confirmed (true|false)")
  )
}, (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const threshold = yield* Option.match(o.spamThreshold, {
      onNone: () => Effect.succeed({}),
      onSome: (v) => {
        if (v === "none" || v === "null") return Effect.succeed({ spam_threshold: null })
        const n = Number(v)
        return v.trim() === "" || Number.isNaN(n)
          ? Effect.fail(new CliFailure({ message: `--spam-threshold: not a number: ${v}`, usage: true }))
          : Effect.succeed({ spam_threshold: n })
      }
    })
    const payload = {
      ...threshold,
      ...Option.match(o.discardContent, { onNone: () => ({}), onSome: (v) => ({ discard_content_on_webhook_confirmed: v }) })
    }
    if (Object.keys(payload).length === 0) {
      return yield* new CliFailure({ message: "nothing to change: pass --spam-threshold or --discard-content", usage: true })
    }
    yield* showOne(target.json, yield* client.account.update({ payload }))
  })).pipe(Command.withDescription("Change account settings"))

const storage = Command.make("storage", {}, () =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    yield* showOne(target.json, yield* client.account.storage())
  })).pipe(Command.withDescription("Storage used by stored emails against the plan's quota"))

export const account = Command.make("account").pipe(
  Command.withDescription("The organization's account"),
  Command.withSubcommands([show, update, storage])
)

const secretShow = Command.make("show", {}, () =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    yield* showOne(target.json, yield* client.account.webhookSecret())
  })).pipe(Command.withDescription("The webhook signing secret (created on first read)"))

const secretRotate = Command.make("rotate", {}, () =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    yield* showOne(target.json, yield* client.account.rotateWebhookSecret({ headers: {} }))
  })).pipe(Command.withDescription("Replace the webhook secret (once per hour); the old one stops working at once"))

export const secret = Command.make("secret").pipe(
  Command.withDescription("The webhook signing secret"),
  Command.withSubcommands([secretShow, secretRotate])
)
