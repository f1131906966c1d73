/**
 * How a conversation is shown: a thread and its messages from the rows of the threads area, shared
 * by GET /threads, GET /threads/{id} and the demo's twins of them, so a thread reads the same
 * wherever it comes from. Pure: no database, no request.
 */
import type { ListMeta } from "../contract/Envelope.js"
import { encodeCursor } from "../contract/Paging.js"
import { SNIPPET_CHARS, type Thread, type ThreadMessage } from "./Api.js"
import type { MessageRow, ThreadRow } from "./Repo.js"

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

/** The aggregate row of one thread from all of its messages (at least one). */
export const threadRowOf = (id: string, messages: ReadonlyArray<MessageRow>): ThreadRow => {
  const at = messages.map((m) => m.at.getTime())
  return {
    id,
    message_count: messages.length,
    received_count: messages.filter((m) => m.direction === "received").length,
    sent_count: messages.filter((m) => m.direction === "sent").length,
    first_message_at: new Date(Math.min(...at)),
    last_message_at: new Date(Math.max(...at))
  }
}

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

/**
 * One page of the threads list: of the `limit + 1` rows listed (last activity first), the first
 * `limit`, each shown with its messages, and the cursor after the last when there are more.
 */
export const threadsPage = (
  rows: ReadonlyArray<ThreadRow>,
  total: number,
  limit: number,
  messages: ReadonlyArray<MessageRow>
): { items: ReadonlyArray<Thread>; meta: ListMeta } => {
  const page = rows.slice(0, limit)
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
}
