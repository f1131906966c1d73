/**
 * How threads and their messages are shown: the base subject, snippets and participants are derived
 * here from the repository's rows, for the threads handlers and every other area that lists threads.
 */
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
