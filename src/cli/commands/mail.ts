/** `emails list|get|raw|attachments` and `deliveries list|get|replay`. */
import { Command, Options } from "@effect/cli"
import { Console, Effect, Option } from "effect"
import { writeFileSync } from "node:fs"
import type { WebhookDelivery } from "../../deliveries/Api.js"
import type { EmailSummary } from "../../emails/Api.js"
import { CliFailure } from "../Failure.js"
import { col, done, showList, showOne } from "../Output.js"
import { authedClient } from "../Session.js"
import { fetchPages, idArg, opt, pageParams, paging, parseDate } from "./common.js"

const dateRange = {
  from: Options.text("from").pipe(Options.optional, Options.withDescription("created at or after (ISO 8601)")),
  to: Options.text("to").pipe(Options.optional, Options.withDescription("created at or before (ISO 8601)"))
}

const out = Options.text("out").pipe(
  Options.withAlias("o"),
  Options.optional,
  Options.withDescription("write to this file instead of stdout")
)

/** Bytes to a file (`--out`) or to stdout, flushed before the process exits. */
const writeBytes = (bytes: Uint8Array, file: Option.Option<string>, json: boolean, what: string) =>
  Option.match(file, {
    onSome: (path) =>
      Effect.try({
        try: () => writeFileSync(path, bytes),
        catch: (e) => new CliFailure({ message: `cannot write ${path}: ${String(e)}` })
      }).pipe(Effect.zipRight(done(json, `Wrote ${bytes.length} bytes (${what}) to ${path}`, { path, bytes: bytes.length }))),
    onNone: () =>
      process.stdout.isTTY === true && what !== "message/rfc822"
        ? Effect.fail(new CliFailure({ message: "binary output: pass --out FILE or redirect stdout", usage: true }))
        : Effect.async<void>((resume) => {
          process.stdout.write(bytes, () => resume(Effect.void))
        })
  })

// --- emails ------------------------------------------------------------------------------------

const emailColumns = [
  col<EmailSummary>("id", (e) => e.id),
  col<EmailSummary>("received", (e) => e.received_at),
  col<EmailSummary>("from", (e) => e.from),
  col<EmailSummary>("to", (e) => e.recipient),
  col<EmailSummary>("subject", (e) => e.subject),
  col<EmailSummary>("status", (e) => e.status)
]

const emailsList = Command.make("list", {
  ...paging,
  ...dateRange,
  recipient: Options.text("recipient").pipe(Options.optional, Options.withDescription("recipient address")),
  sender: Options.text("sender").pipe(Options.optional, Options.withDescription("sender address")),
  eventType: Options.text("event-type").pipe(Options.optional, Options.withDescription("e.g. email.received")),
  status: Options.choice("status", ["accepted", "rejected"]).pipe(Options.optional)
}, (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const from = yield* parseDate("from", o.from)
    const to = yield* parseDate("to", o.to)
    const filters = {
      ...opt("recipient", o.recipient),
      ...opt("sender", o.sender),
      ...opt("event_type", o.eventType),
      ...opt("status", o.status),
      ...opt("date_from", from),
      ...opt("date_to", to)
    }
    const page = yield* fetchPages(o, (cursor) => client.emails.list({ urlParams: { ...filters, ...pageParams(o.limit, cursor) } }))
    yield* showList(target.json, page, emailColumns)
  })).pipe(Command.withDescription("Received emails, newest first"))

const emailsGet = Command.make("get", { id: idArg("email") }, (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const email = yield* client.emails.get({ path: { id: o.id } })
    if (target.json) return yield* showOne(true, email)
    const { attachments, headers: _headers, html: _html, text, ...rest } = email
    yield* showOne(false, { ...rest, attachments: attachments.map((a) => a.filename ?? a.content_type).join(", ") || "-" })
    if (text !== null) yield* Console.log(`\n${text}`)
  })).pipe(Command.withDescription("One email with its text; --json for everything (headers, html, links)"))

const emailsRaw = Command.make("raw", { id: idArg("email"), out }, (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const bytes = yield* client.downloads.raw({ path: { id: o.id }, urlParams: {} })
    yield* writeBytes(bytes, o.out, target.json, "message/rfc822")
  })).pipe(Command.withDescription("The raw MIME message (stdout, or --out FILE)"))

const emailsAttachments = Command.make("attachments", {
  id: idArg("email"),
  index: Options.integer("index").pipe(Options.optional, Options.withDescription("one attachment by its index (0-based)")),
  out
}, (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const bytes = yield* Option.match(o.index, {
      onNone: () => client.downloads.attachments({ path: { id: o.id }, urlParams: {} }),
      onSome: (index) => client.downloads.attachment({ path: { id: o.id, index }, urlParams: {} })
    })
    yield* writeBytes(bytes, o.out, target.json, Option.isNone(o.index) ? "attachments.tar.gz" : "attachment")
  })).pipe(Command.withDescription("Every attachment as .tar.gz, or one with --index (to --out FILE or a redirect)"))

export const emails = Command.make("emails").pipe(
  Command.withDescription("Received mail"),
  Command.withSubcommands([emailsList, emailsGet, emailsRaw, emailsAttachments])
)

// --- deliveries --------------------------------------------------------------------------------

const deliveryColumns = [
  col<WebhookDelivery>("id", (d) => d.id),
  col<WebhookDelivery>("created", (d) => d.created_at),
  col<WebhookDelivery>("status", (d) => d.status),
  col<WebhookDelivery>("attempts", (d) => d.attempt_count),
  col<WebhookDelivery>("error", (d) => d.last_error_code || "-"),
  col<WebhookDelivery>("endpoint", (d) => d.endpoint_url),
  col<WebhookDelivery>("subject", (d) => d.email.subject)
]

const deliveriesList = Command.make("list", {
  ...paging,
  ...dateRange,
  emailId: Options.text("email-id").pipe(Options.optional, Options.withDescription("one email's deliveries")),
  status: Options.choice("status", ["pending", "delivered", "header_confirmed", "failed"]).pipe(Options.optional)
}, (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const from = yield* parseDate("from", o.from)
    const to = yield* parseDate("to", o.to)
    const filters = { ...opt("email_id", o.emailId), ...opt("status", o.status), ...opt("date_from", from), ...opt("date_to", to) }
    const page = yield* fetchPages(
      o,
      (cursor) => client.deliveries.list({ urlParams: { ...filters, ...pageParams(o.limit, cursor) } })
    )
    yield* showList(target.json, page, deliveryColumns)
  })).pipe(Command.withDescription("Webhook deliveries, newest first"))

const deliveriesGet = Command.make("get", { id: idArg("delivery") }, (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    yield* showOne(target.json, yield* client.deliveries.get({ path: { id: o.id } }))
  })).pipe(Command.withDescription("One delivery"))

const deliveriesReplay = Command.make("replay", { id: idArg("delivery") }, (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const result = yield* client.deliveries.replay({ path: { id: o.id }, headers: {} })
    yield* done(
      target.json,
      `${result.delivered === 1 ? "Delivered" : "Failed"}: replay recorded as delivery ${result.delivery_id}`,
      result
    )
    if (result.delivered !== 1) {
      return yield* new CliFailure({ message: `the replay was not delivered (see mailroom deliveries get ${result.delivery_id})` })
    }
  })).pipe(Command.withDescription("Send the stored payload again with a fresh signature (exit 1 when not delivered)"))

export const deliveries = Command.make("deliveries").pipe(
  Command.withDescription("Webhook deliveries"),
  Command.withSubcommands([deliveriesList, deliveriesGet, deliveriesReplay])
)

