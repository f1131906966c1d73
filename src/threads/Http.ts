/** Handlers of Threads. */
import { HttpApiBuilder } from "@effect/platform"
import { Effect, Layer } from "effect"
import { MailroomApi } from "../Api.js"
import { NotFound } from "../contract/Errors.js"
import { decodeCursor, DEFAULT_PAGE_SIZE, encodeCursor } from "../contract/Paging.js"
import { CurrentPrincipal } from "../contract/Security.js"
import { SNIPPET_CHARS, type Thread, type ThreadMessage } from "./Api.js"
import { toWatch, WakesRepo } from "../wake/Repo.js"
import { type MessageRow, type ThreadRow, ThreadsRepo } from "./Repo.js"

/** `Re:`, `Fwd:`, `Fw:` (any case, repeated, with `[n]` counters some clients add) taken off a subject. */
export const baseSubject = (subject: string | null): string | null => {
  if (subject === null) return null
  let s = subject.trim()
  for (;;) {
    const next = s.replace(/^(re|fwd?|aw|wg|sv|vs)(\s*\[\d+\])?\s*:\s*/i, "")
    if (next === s) return s
    s = next
  }
}

/** Whitespace collapsed, at most `SNIPPET_CHARS` characters (never half a surrogate pair). */
export const snippetOf = (text: string | null): string => {
  const flat = (text ?? "").replace(/\s+/g, " ").trim()
  return Array.from(flat).slice(0, SNIPPET_CHARS).join("")
}

/** The address of `addr` or `Name <addr>` (sent mail keeps recipients as written), lowercased. */
export const addressOf = (a: string) => (/<([^<>]+)>\s*$/.exec(a)?.[1] ?? a).trim().toLowerCase()

const lower = (a: string | null) => (a === null ? [] : [addressOf(a)])

export const toMessage = (m: MessageRow): ThreadMessage => ({
  id: m.id,
  direction: m.direction,
  from: m.from_address,
  to: m.to_addresses,
  cc: m.cc_addresses,
  subject: m.subject,
  date: m.at,
  message_id: m.message_id,
  snippet: snippetOf(m.body),
  inbox_id: m.inbox_id ?? null
})

/** A thread from its aggregate row and its messages (oldest first). */
export const toThread = (t: ThreadRow, messages: ReadonlyArray<MessageRow>): Thread => {
  const participants = new Set<string>()
  for (const m of messages) for (const a of [...lower(m.from_address), ...[...m.to_addresses, ...m.cc_addresses].map(addressOf)]) participants.add(a)
  const first = messages[0]
  const newest = messages[messages.length - 1]
  return {
    id: t.id,
    subject: baseSubject(first?.subject ?? null),
    participants: [...participants].sort(),
    message_count: t.message_count,
    received_count: t.received_count,
    sent_count: t.sent_count,
    first_message_at: t.first_message_at,
    last_message_at: t.last_message_at,
    snippet: snippetOf(newest?.body ?? null),
    inbox_id: messages.find((m) => m.inbox_id != null)?.inbox_id ?? null,
    labels: [...new Set(messages.flatMap((m) => m.labels))].sort(),
    unread_count: messages.filter((m) => m.direction === "received" && !m.read).length
  }
}

export const ThreadsHttpLive = HttpApiBuilder.group(MailroomApi, "threads", (handlers) =>
  Effect.gen(function*() {
    const repo = yield* ThreadsRepo
    const wakes = yield* WakesRepo
    return handlers
      .handle("list", ({ urlParams }) =>
        Effect.gen(function*() {
          const principal = yield* CurrentPrincipal
          const limit = urlParams.limit ?? DEFAULT_PAGE_SIZE
          const after = yield* decodeCursor(urlParams.cursor)
          const includeWake = urlParams.include === "wake"
          const { rows, total } = yield* repo.list(principal, {
            limit,
            after,
            participant: urlParams.participant,
            dateFrom: urlParams.date_from,
            dateTo: urlParams.date_to,
            includeWake,
            inboxId: urlParams.inbox_id,
            label: urlParams.label
          })
          const page = rows.slice(0, limit)
          const messages = yield* repo.messagesOf(principal, page.map((t) => t.id), includeWake)
          const byThread = new Map<string, Array<MessageRow>>()
          for (const m of messages) {
            const list = byThread.get(m.thread_id)
            if (list === undefined) byThread.set(m.thread_id, [m])
            else list.push(m)
          }
          const last = page[page.length - 1]
          return {
            items: page.map((t) => toThread(t, byThread.get(t.id) ?? [])),
            meta: {
              total,
              limit,
              cursor: rows.length > limit && last !== undefined ? encodeCursor({ createdAt: last.last_message_at, id: last.id }) : null
            }
          }
        }))
      .handle("get", ({ path }) =>
        Effect.gen(function*() {
          const principal = yield* CurrentPrincipal
          const orgId = principal.orgId
          const messages = yield* repo.messagesOf(principal, [path.id])
          if (messages.length === 0) return yield* new NotFound({ message: "thread not found" })
          const at = messages.map((m) => m.at.getTime())
          const row: ThreadRow = {
            id: path.id,
            message_count: messages.length,
            received_count: messages.filter((m) => m.direction === "received").length,
            sent_count: messages.filter((m) => m.direction === "sent").length,
            first_message_at: new Date(Math.min(...at)),
            last_message_at: new Date(Math.max(...at))
          }
          const watches = yield* wakes.watchesOf(orgId, path.id, false)
          return { ...toThread(row, messages), messages: messages.map(toMessage), watches: watches.map(toWatch) }
        }))
  })).pipe(Layer.provide([ThreadsRepo.Default, WakesRepo.Default]))
