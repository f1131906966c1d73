/** `send`, `send-batch`, `reply`, `forward`, `sent list|get|cancel|reschedule`, `suppressions list|rm` and `outbound status`. */
import { Console, Effect, Option } from "effect"
import { readFileSync } from "node:fs"
import { basename } from "node:path"
import type { Draft } from "../../drafts/Api.js"
import type { SentEmail } from "../../sending/Api.js"
import { CliFailure } from "../Failure.js"
import { col, done, renderDetail, renderTable, showList, showOne } from "../Output.js"
import { authedClient } from "../Session.js"
import type { Handler } from "../Spec.js"
import type * as S from "../Specs.js"
import { fetchPages, opt, pageParams, parseDate } from "./common.js"

const cut = (s: string, n: number) => (s.length > n ? `${s.slice(0, n - 1)}…` : s)

const sentColumns = [
  col<SentEmail>("id", (s) => s.id),
  col<SentEmail>("status", (s) => s.status),
  col<SentEmail>("when", (s) => s.sent_at ?? s.send_at ?? s.created_at),
  col<SentEmail>("to", (s) => cut([...s.to, ...s.cc, ...s.bcc].join(", "), 40)),
  col<SentEmail>("subject", (s) => cut(s.subject, 40))
]

const readFile = (flag: string, path: string) =>
  Effect.try({
    try: () => (path === "-" ? readFileSync(0) : readFileSync(path)),
    catch: (e) => new CliFailure({ message: `--${flag}: cannot read ${path}: ${e instanceof Error ? e.message : String(e)}`, usage: true })
  })

const DELAY = /^(\d+)(s|m|h|d)$/
const UNIT_MS = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const

/** `--at`: an ISO 8601 time, or a delay from now (`30s`, `15m`, `2h`, `1d`). */
const parseAt = (value: string) =>
  Effect.gen(function*() {
    const delay = DELAY.exec(value.trim())
    if (delay !== null) return new Date(Date.now() + Number(delay[1]) * UNIT_MS[delay[2] as keyof typeof UNIT_MS])
    const d = new Date(value)
    if (Number.isNaN(d.getTime()) || !/^\d{4}-\d{2}-\d{2}/.test(value.trim())) {
      return yield* new CliFailure({ message: `--at: not a time: ${value} (ISO 8601, e.g. 2026-12-01T08:00:00Z, or 15m, 2h)`, usage: true })
    }
    return d
  })

const optionalAt = (value: Option.Option<string>) =>
  Option.match(value, { onNone: () => Effect.succeed(Option.none<Date>()), onSome: (v) => Effect.map(parseAt(v), Option.some) })

/** `--attach FILE…` as the API takes them: name and base64 content (the type is guessed by the service). */
const attachments = (files: ReadonlyArray<string>) =>
  Effect.forEach(files, (file) =>
    Effect.map(readFile("attach", file), (bytes) => ({ filename: basename(file), content_base64: bytes.toString("base64") })))

/** The body flags: `--text` or `--text-file` (not both), `--html-file`. */
const body = (o: { readonly text: Option.Option<string>; readonly textFile?: Option.Option<string>; readonly htmlFile?: Option.Option<string> }) =>
  Effect.gen(function*() {
    const textFile = o.textFile ?? Option.none()
    if (Option.isSome(o.text) && Option.isSome(textFile)) {
      return yield* new CliFailure({ message: "give --text or --text-file, not both", usage: true })
    }
    const text = Option.isSome(textFile) ? Option.some((yield* readFile("text-file", textFile.value)).toString("utf8")) : o.text
    const htmlFile = o.htmlFile ?? Option.none()
    const html = Option.isSome(htmlFile) ? Option.some((yield* readFile("html-file", htmlFile.value)).toString("utf8")) : Option.none<string>()
    return { ...opt("text", text), ...opt("html", html) }
  })

const needsBody = (b: { readonly text?: string; readonly html?: string }, flags: string) =>
  b.text === undefined && b.html === undefined
    ? Effect.fail(new CliFailure({ message: `a body is required: ${flags}`, usage: true }))
    : Effect.void

const needsRecipient = (to: ReadonlyArray<string>) =>
  to.length === 0 ? Effect.fail(new CliFailure({ message: "--to: at least one recipient is required", usage: true })) : Effect.void

const idempotency = (key: Option.Option<string>) => opt("idempotency-key", key)

/** What happened to a send: sent (with the relay's answer) or scheduled. */
const outcome = (json: boolean, verb: string, s: SentEmail | Draft) => {
  if ("reason" in s) {
    const waiting = `Held for approval: draft ${s.id} (\`mailroom drafts approve ${s.id}\` sends it)`
    return done(json, waiting, s)
  }
  const to = [...s.to, ...s.cc, ...s.bcc].join(", ")
  const message = s.status === "scheduled"
    ? `Scheduled ${s.id} to ${to} for ${s.send_at?.toISOString() ?? "-"} (\`mailroom sent cancel ${s.id}\` cancels it)`
    : `${verb} ${s.id} to ${to}${s.relay_response !== null ? ` (relay: ${s.relay_response})` : ""}`
  return done(json, message, s)
}

export const send: Handler<typeof S.send> = (o) =>
  Effect.gen(function*() {
    yield* needsRecipient(o.to)
    const b = yield* body(o)
    yield* needsBody(b, "--text, --text-file or --html-file")
    const files = yield* attachments(o.attach)
    const at = yield* optionalAt(o.at)
    const { client, target } = yield* authedClient
    const sent = yield* client.sending.send({
      payload: {
        ...opt("from", o.from),
        to: o.to,
        ...(o.cc.length > 0 ? { cc: o.cc } : {}),
        ...(o.bcc.length > 0 ? { bcc: o.bcc } : {}),
        ...opt("reply_to", o.replyTo),
        subject: o.subject,
        ...b,
        ...(files.length > 0 ? { attachments: files } : {}),
        ...opt("send_at", at)
      },
      headers: idempotency(o.idempotencyKey)
    })
    yield* outcome(target.json, "Sent", sent)
  })

export const sendBatch: Handler<typeof S.sendBatch> = (o) =>
  Effect.gen(function*() {
    const raw = (yield* readFile("file", o.file)).toString("utf8")
    const parsed = yield* Effect.try({
      try: () => JSON.parse(raw) as unknown,
      catch: (e) => new CliFailure({ message: `--file: not JSON: ${e instanceof Error ? e.message : String(e)}`, usage: true })
    })
    const messages = Array.isArray(parsed)
      ? parsed
      : typeof parsed === "object" && parsed !== null && Array.isArray((parsed as { messages?: unknown }).messages)
      ? (parsed as { messages: Array<unknown> }).messages
      : undefined
    if (messages === undefined) {
      return yield* new CliFailure({ message: "--file: expected a JSON array of messages, or {\"messages\": [...]}", usage: true })
    }
    const { client, target } = yield* authedClient
    const r = yield* client.sending.sendBatch({
      payload: { messages: messages as Array<{ readonly [x: string]: unknown }> },
      headers: idempotency(o.idempotencyKey)
    })
    if (target.json) return yield* showOne(true, r)
    const rows = r.results.map((x) =>
      "email" in x
        ? { index: x.index, outcome: x.email.status, detail: `${x.email.id} to ${[...x.email.to, ...x.email.cc, ...x.email.bcc].join(", ")}` }
        : "draft" in x
        ? { index: x.index, outcome: "pending_approval", detail: `draft ${x.draft.id}: mailroom drafts approve ${x.draft.id}` }
        : { index: x.index, outcome: x.error.code, detail: x.error.message }
    )
    yield* Console.log(renderTable(rows, [col("index", (x) => x.index), col("outcome", (x) => x.outcome), col("detail", (x) => cut(x.detail, 80))]))
    const failed = r.results.filter((x) => "error" in x).length
    const held = r.results.filter((x) => "draft" in x).length
    yield* Console.log(
      `\n${r.results.length - failed - held} of ${r.results.length} sent or scheduled` +
        `${held > 0 ? `, ${held} held for approval` : ""}${failed > 0 ? `, ${failed} refused` : ""}`
    )
  })

export const suppressionsList: Handler<typeof S.suppressionsList> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const page = yield* fetchPages(o, (cursor) => client.suppressions.list({ urlParams: pageParams(o.limit, cursor) }))
    yield* showList(target.json, page, [
      col("address", (s) => s.address),
      col("reason", (s) => s.reason),
      col("status", (s) => s.status ?? "-"),
      col("since", (s) => s.created_at)
    ])
  })

export const suppressionsRm: Handler<typeof S.suppressionsRm> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const removed = yield* client.suppressions.remove({ path: { address: o.address } })
    yield* done(target.json, `Removed ${removed.address} from the suppression list: it can be mailed again`, removed)
  })

export const reply: Handler<typeof S.reply> = (o) =>
  Effect.gen(function*() {
    const b = yield* body(o)
    yield* needsBody(b, "--text, --text-file or --html-file")
    const files = yield* attachments(o.attach)
    const at = yield* optionalAt(o.at)
    const { client, target } = yield* authedClient
    const sent = yield* client.sending.reply({
      path: { id: o.id },
      payload: {
        ...b,
        ...(o.all ? { reply_all: true } : {}),
        ...opt("from", o.from),
        ...(files.length > 0 ? { attachments: files } : {}),
        ...opt("send_at", at)
      },
      headers: idempotency(o.idempotencyKey)
    })
    yield* outcome(target.json, "Replied", sent)
  })

export const forward: Handler<typeof S.forward> = (o) =>
  Effect.gen(function*() {
    yield* needsRecipient(o.to)
    const { client, target } = yield* authedClient
    const sent = yield* client.sending.forward({
      path: { id: o.id },
      payload: { to: o.to, ...opt("text", o.text), ...opt("from", o.from) },
      headers: idempotency(o.idempotencyKey)
    })
    yield* outcome(target.json, "Forwarded", sent)
  })

export const sentList: Handler<typeof S.sentList> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const dateFrom = yield* parseDate("date-from", o.dateFrom)
    const dateTo = yield* parseDate("date-to", o.dateTo)
    const filters = { ...opt("status", o.status), ...opt("to", o.to), ...opt("date_from", dateFrom), ...opt("date_to", dateTo), ...opt("inbox_id", o.inboxId) }
    const page = yield* fetchPages(o, (cursor) => client.sending.list({ urlParams: { ...filters, ...pageParams(o.limit, cursor) } }))
    yield* showList(target.json, page, sentColumns)
  })

export const sentGet: Handler<typeof S.sentGet> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const sent = yield* client.sending.get({ path: { id: o.id } })
    if (target.json) return yield* showOne(true, sent)
    const { text, html, attachments: files, error, bounce, ...rest } = sent
    yield* Console.log(renderDetail({
      ...rest,
      to: rest.to.join(", "),
      cc: rest.cc.join(", ") || null,
      bcc: rest.bcc.join(", ") || null,
      error: error === null ? null : `${error.code}: ${error.message}`,
      bounce: bounce === null ? null : `${bounce.type} ${bounce.status ?? ""}${bounce.recipient !== null ? ` for ${bounce.recipient}` : ""}: ${bounce.diagnostic ?? "-"}`,
      html: html === null ? null : `${html.length} characters (--json shows it)`
    }))
    if (files.length > 0) yield* Console.log(`\n${renderTable(files, [col("filename", (a) => a.filename), col("type", (a) => a.content_type), col("bytes", (a) => a.size_bytes)])}`)
    yield* Console.log(text === null ? (sent.content_discarded ? "\n(content discarded)" : "") : `\n${text}`)
  })

export const sentCancel: Handler<typeof S.sentCancel> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const sent = yield* client.sending.cancel({ path: { id: o.id }, headers: {} })
    yield* done(target.json, `Canceled ${sent.id} ("${sent.subject}"); it will not be sent`, sent)
  })

export const sentReschedule: Handler<typeof S.sentReschedule> = (o) =>
  Effect.gen(function*() {
    const at = yield* parseAt(o.at)
    const { client, target } = yield* authedClient
    const sent = yield* client.sending.reschedule({ path: { id: o.id }, payload: { send_at: at } })
    yield* done(target.json, `Rescheduled ${sent.id} for ${sent.send_at?.toISOString() ?? "-"}`, sent)
  })

export const outboundStatus: Handler<typeof S.outboundStatus> = () =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const s = yield* client.sending.outboundStatus()
    if (target.json) return yield* showOne(true, s)
    yield* Console.log(renderDetail({
      relay: s.relay === "smtp" ? "smtp (OUTBOUND_SMTP_URL)" : "outbox (no relay configured: mail is written to the dev outbox)",
      reachable: s.reachable,
      checked_at: s.checked_at,
      "sent last hour": `${s.usage.last_hour} of ${s.limits.send_per_hour} (${s.remaining.hour} left)`,
      "sent last 24 h": `${s.usage.today} of ${s.limits.send_per_day} (${s.remaining.day} left)`,
      scheduled: s.scheduled
    }))
  })
