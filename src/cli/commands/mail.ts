/** `emails list|get|label|read|unread|raw|attachments` and `deliveries list|get|replay`. */
import { Console, Effect, Option } from "effect"
import { writeFileSync } from "node:fs"
import type { WebhookDelivery } from "../../deliveries/Api.js"
import type { EmailSummary } from "../../emails/Api.js"
import { CliFailure } from "../Failure.js"
import { col, done, showList, showOne } from "../Output.js"
import { authedClient } from "../Session.js"
import type { Handler } from "../Spec.js"
import type * as S from "../Specs.js"
import { fetchPages, opt, pageParams, parseDate } from "./common.js"

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

export const emailColumns = [
  col<EmailSummary>("id", (e) => e.id),
  col<EmailSummary>("received", (e) => e.received_at),
  col<EmailSummary>("from", (e) => e.from),
  col<EmailSummary>("to", (e) => e.recipient),
  col<EmailSummary>("subject", (e) => e.subject),
  col<EmailSummary>("status", (e) => e.status)
]

export const emailsList: Handler<typeof S.emailsList> = (o) =>
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
      ...opt("date_to", to),
      ...(o.includeWake ? { include: "wake" as const } : {}),
      ...opt("label", o.label),
      ...(o.unread ? { unread: true } : {}),
      ...opt("inbox_id", o.inboxId)
    }
    const page = yield* fetchPages(o, (cursor) => client.emails.list({ urlParams: { ...filters, ...pageParams(o.limit, cursor) } }))
    yield* showList(target.json, page, emailColumns)
  })

export const emailsQuarantined: Handler<typeof S.emailsQuarantined> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const page = yield* fetchPages(o, (cursor) =>
      client.emails.list({ urlParams: { status: "quarantined" as const, ...pageParams(o.limit, cursor) } }))
    yield* showList(target.json, page, [...emailColumns, col<EmailSummary>("signals", (e) => e.trust.signals.join(",") || "-")])
  })

export const emailsRelease: Handler<typeof S.emailsRelease> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const email = yield* client.quarantine.release({ path: { id: o.id }, headers: {} })
    yield* done(target.json, `Released ${email.id}: delivered as new mail`, email)
  })

export const emailsGet: Handler<typeof S.emailsGet> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const email = yield* client.emails.get({ path: { id: o.id } })
    if (target.json) return yield* showOne(true, email)
    const { attachments, headers: _headers, html: _html, text, ...rest } = email
    yield* showOne(false, { ...rest, attachments: attachments.map((a) => a.filename ?? a.content_type).join(", ") || "-" })
    if (text !== null) yield* Console.log(`\n${text}`)
  })

/** The labels are a set the API replaces whole: the command reads the current set and writes the changed one. */
export const emailsLabel: Handler<typeof S.emailsLabel> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    if (o.add.length === 0 && o.remove.length === 0 && !o.clear) {
      return yield* new CliFailure({ message: "give --add LABEL, --remove LABEL or --clear", usage: true })
    }
    const current = o.clear ? [] : (yield* client.emails.get({ path: { id: o.id } })).labels
    const removed = new Set(o.remove)
    const labels = [...new Set([...current.filter((l) => !removed.has(l)), ...o.add])]
    const email = yield* client.emails.update({ path: { id: o.id }, payload: { labels } })
    yield* done(target.json, `Labels of ${email.id}: ${email.labels.join(", ") || "(none)"}`, email)
  })

const markRead = (id: string, read: boolean) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const email = yield* client.emails.update({ path: { id }, payload: { read } })
    yield* done(target.json, `Marked ${email.id} ${read ? "read" : "unread"}`, email)
  })

export const emailsRead: Handler<typeof S.emailsRead> = (o) => markRead(o.id, true)

export const emailsUnread: Handler<typeof S.emailsUnread> = (o) => markRead(o.id, false)

export const emailsRaw: Handler<typeof S.emailsRaw> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const bytes = yield* client.downloads.raw({ path: { id: o.id }, urlParams: {} })
    yield* writeBytes(bytes, o.out, target.json, "message/rfc822")
  })

export const emailsAttachments: Handler<typeof S.emailsAttachments> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const bytes = yield* Option.match(o.index, {
      onNone: () => client.downloads.attachments({ path: { id: o.id }, urlParams: {} }),
      onSome: (index) => client.downloads.attachment({ path: { id: o.id, index }, urlParams: {} })
    })
    yield* writeBytes(bytes, o.out, target.json, Option.isNone(o.index) ? "attachments.tar.gz" : "attachment")
  })

// --- deliveries --------------------------------------------------------------------------------

export const deliveryColumns = [
  col<WebhookDelivery>("id", (d) => d.id),
  col<WebhookDelivery>("created", (d) => d.created_at),
  col<WebhookDelivery>("status", (d) => d.status),
  col<WebhookDelivery>("attempts", (d) => d.attempt_count),
  col<WebhookDelivery>("error", (d) => d.last_error_code || "-"),
  col<WebhookDelivery>("endpoint", (d) => d.endpoint_url),
  col<WebhookDelivery>("subject", (d) => d.email.subject)
]

export const deliveriesList: Handler<typeof S.deliveriesList> = (o) =>
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
  })

export const deliveriesGet: Handler<typeof S.deliveriesGet> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    yield* showOne(target.json, yield* client.deliveries.get({ path: { id: o.id } }))
  })

export const deliveriesReplay: Handler<typeof S.deliveriesReplay> = (o) =>
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
  })

