/**
 * Which thread a message belongs to, for any message of an organization (received or sent).
 *
 * A message joins the thread of every stored message of its organization that it names
 * (`In-Reply-To`, `References`), that names it (a reply that arrived first), or that is another
 * copy of it (same `Message-ID`). When those are several threads they merge into the oldest: thread
 * ids are time-ordered (UUID version 7 layout), so the oldest is the smallest id. Nothing links
 * across organizations: every lookup is keyed by the organization.
 *
 * Ingestion is group-committed, so lookups are too: messages arriving together share ONE indexed
 * query, and messages of one batch that name each other are linked among themselves before any of
 * them is stored. Assignments of the last minute are remembered in memory, so a reply stored by the
 * statement after its parent's (the parent not yet committed when the reply was looked up) still
 * finds it in this process.
 */
import { SqlClient, type SqlError, type Statement } from "@effect/sql"
import { Effect, Exit } from "effect"
import { randomBytes } from "node:crypto"
import { makeBatcher } from "../platform/Batching.js"

export interface ThreadingInput {
  readonly orgId: string
  readonly messageId: string | null
  readonly inReplyTo: string | null
  readonly references: ReadonlyArray<string>
}

export interface ThreadAssignment {
  readonly threadId: string
  /** Younger threads this message links to `threadId`: their messages move into it (`mergeStatements`). */
  readonly merged: ReadonlyArray<string>
}

/** A time-ordered UUID: 48 bits of Unix milliseconds, version 7, variant 10, random rest. */
export const uuid7 = (at: number = Date.now()): string => {
  const b = randomBytes(16)
  const ms = BigInt(Math.max(0, Math.floor(at)))
  for (let i = 0; i < 6; i++) b[i] = Number((ms >> BigInt(8 * (5 - i))) & 0xffn)
  b[6] = (b[6]! & 0x0f) | 0x70
  b[8] = (b[8]! & 0x3f) | 0x80
  const h = b.toString("hex")
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`
}

/** The Message-IDs a message names. */
export const namedIds = (m: ThreadingInput): ReadonlyArray<string> => {
  const ids = new Set<string>(m.references)
  if (m.inReplyTo !== null) ids.add(m.inReplyTo)
  if (m.messageId !== null) ids.delete(m.messageId)
  return [...ids]
}

/**
 * Tables whose rows carry a `thread_id` and the message's identifiers (columns `org_id`,
 * `message_id`, `in_reply_to`, `"references"` as a JSON array): received and sent mail.
 */
export const THREADED_TABLES: ReadonlyArray<string> = ["emails", "sent_emails"]

const LOOKUP_WORKERS = 2
const MAX_LOOKUP_BATCH = 128
const RECENT_MS = 60_000
const RECENT_MAX = 20_000

const smallest = (ids: Iterable<string>): string | undefined => {
  let best: string | undefined
  for (const id of ids) if (best === undefined || id < best) best = id
  return best
}

/** A stored thread linked to the input at `ord`. */
export interface Found {
  readonly ord: number
  readonly thread_id: string
}

export class Threading extends Effect.Service<Threading>()("mailroom/Threading", {
  scoped: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    // org + Message-ID → thread, for messages assigned lately (stored, or about to be).
    const recent = new Map<string, { thread: string; at: number }>()
    // A merged-away thread → the thread it went into, so a remembered id is followed to where it lives now.
    const movedTo = new Map<string, { thread: string; at: number }>()
    const current = (thread: string) => {
      let t = thread
      for (let hops = 0; hops < 64; hops++) {
        const next = movedTo.get(t)
        if (next === undefined) return t
        t = next.thread
      }
      return t
    }
    const prune = (map: Map<string, { at: number }>, now: number) => {
      if (map.size < RECENT_MAX) return
      for (const [k, v] of map) if (now - v.at > RECENT_MS || map.size > RECENT_MAX) map.delete(k)
    }
    const remember = (m: ThreadingInput, a: ThreadAssignment, now: number) => {
      prune(recent, now)
      prune(movedTo, now)
      for (const id of [m.messageId, ...namedIds(m)]) if (id !== null) recent.set(`${m.orgId}\n${id}`, { thread: a.threadId, at: now })
      for (const t of a.merged) movedTo.set(t, { thread: a.threadId, at: now })
    }
    const recalled = (m: ThreadingInput, now: number): Array<string> => {
      const out: Array<string> = []
      for (const id of [m.messageId, ...namedIds(m)]) {
        if (id === null) continue
        const hit = recent.get(`${m.orgId}\n${id}`)
        if (hit !== undefined && now - hit.at <= RECENT_MS) out.push(current(hit.thread))
      }
      return out
    }

    /** Threads of stored messages linked to each input (by index), in one statement. */
    const lookup = (inputs: ReadonlyArray<ThreadingInput>) => {
      const rows = inputs.map((m, ord) => ({ ord, org_id: m.orgId, message_id: m.messageId, named: namedIds(m) }))
      const parts = THREADED_TABLES.map((table) =>
        sql`SELECT i.ord, t.thread_id FROM i JOIN ${sql(table)} t
              ON t.org_id = i.org_id AND (t.message_id = i.message_id OR t.message_id = ANY (i.named))
            UNION SELECT i.ord, t.thread_id FROM i JOIN ${sql(table)} t
              ON t.org_id = i.org_id AND t.in_reply_to = i.message_id
            UNION SELECT i.ord, t.thread_id FROM i JOIN ${sql(table)} t
              ON t.org_id = i.org_id AND i.message_id IS NOT NULL AND t."references" @> jsonb_build_array(i.message_id)`
      )
      return sql<Found>`
        WITH i AS (
          SELECT ord, org_id, message_id, ARRAY(SELECT jsonb_array_elements_text(named)) AS named
            FROM jsonb_to_recordset(${JSON.stringify(rows)}::jsonb) AS x(ord int, org_id uuid, message_id text, named jsonb))
        ${sql.join(" UNION ", false)(parts)}`
    }

    /** Whether any input names a message, so that stored threads must be looked up. */
    const needsLookup = (inputs: ReadonlyArray<ThreadingInput>) =>
      inputs.some((m) => m.messageId !== null || namedIds(m).length > 0)

    /**
     * The threads of `inputs`, given the stored threads `found` for them (rows of `lookup`, or of a
     * statement that embeds it): links within the batch and to recent assignments, then one thread
     * per conversation, remembered for the next minute.
     */
    const assignFound = (inputs: ReadonlyArray<ThreadingInput>, found: ReadonlyArray<Found>): ReadonlyArray<ThreadAssignment> => {
      const now = Date.now()
      // Union-find over the batch: stored threads found for each message, and the messages of
      // this batch that name each other (or are copies of each other) in one organization.
      const parent = inputs.map((_, i) => i)
      const root = (i: number): number => {
        while (parent[i] !== i) i = parent[i] = parent[parent[i]!]!
        return i
      }
      const byId = new Map<string, number>()
      inputs.forEach((m, i) => {
        if (m.messageId === null) return
        const key = `${m.orgId}\n${m.messageId}`
        const other = byId.get(key)
        if (other === undefined) byId.set(key, i)
        else parent[root(i)] = root(other)
      })
      inputs.forEach((m, i) => {
        for (const id of namedIds(m)) {
          const other = byId.get(`${m.orgId}\n${id}`)
          if (other !== undefined) parent[root(i)] = root(other)
        }
      })
      // Two messages that reach the same stored thread are one conversation too.
      const firstWith = new Map<string, number>()
      const link = (i: number, thread: string) => {
        const other = firstWith.get(thread)
        if (other === undefined) firstWith.set(thread, i)
        else parent[root(i)] = root(other)
      }
      for (const row of found) link(row.ord, row.thread_id)
      const remembered = inputs.map((m) => recalled(m, now))
      remembered.forEach((ts, i) => ts.forEach((t) => link(i, t)))
      const threadsOf = new Map<number, Set<string>>()
      const add = (i: number, thread: string) => {
        const r = root(i)
        const set = threadsOf.get(r) ?? new Set<string>()
        set.add(thread)
        threadsOf.set(r, set)
      }
      for (const row of found) add(row.ord, row.thread_id)
      remembered.forEach((ts, i) => ts.forEach((t) => add(i, t)))
      const chosen = new Map<number, ThreadAssignment>()
      return inputs.map((m, i): ThreadAssignment => {
        const r = root(i)
        let a = chosen.get(r)
        if (a === undefined) {
          const threads = threadsOf.get(r) ?? new Set<string>()
          const threadId = smallest(threads) ?? uuid7(now)
          a = { threadId, merged: [...threads].filter((t) => t !== threadId).sort() }
          chosen.set(r, a)
        }
        remember(m, a, now)
        return a
      })
    }

    const assignBatch = (inputs: ReadonlyArray<ThreadingInput>) =>
      Effect.gen(function*() {
        const found = needsLookup(inputs) ? yield* lookup(inputs) : []
        return assignFound(inputs, found).map((a): Exit.Exit<ThreadAssignment, SqlError.SqlError> => Exit.succeed(a))
      })

    const batched = yield* makeBatcher({ workers: LOOKUP_WORKERS, maxBatch: MAX_LOOKUP_BATCH, run: assignBatch })

    /** The thread of one message; merges are applied by the statement that stores it (`mergeStatements`). */
    const assign = (input: ThreadingInput): Effect.Effect<ThreadAssignment, SqlError.SqlError> => batched(input)

    /**
     * Statements moving the messages of `merged` threads into `threadId`, for every threaded table;
     * run them with (or in the same statement as) the message that linked them. Thread watches
     * (`wakes.watch_thread_id`) follow their thread, and when the message is received mail
     * (`received`) the active watches of every thread it joins end as `replied`. That is ONE statement
     * on wakes: two statements of one group updating the same row would keep only one of the updates.
     */
    const mergeStatements = (orgId: string, a: ThreadAssignment, received = false): ReadonlyArray<Statement.Fragment> => [
      ...(a.merged.length === 0 ? [] : THREADED_TABLES.map((table) =>
        sql`UPDATE ${sql(table)} SET thread_id = ${a.threadId}
             WHERE org_id = ${orgId} AND thread_id IN ${sql.in(a.merged)}`)),
      ...(received
        ? [sql`UPDATE wakes SET watch_thread_id = ${a.threadId},
                 cancel_reason = CASE WHEN status = 'scheduled' THEN 'replied' ELSE cancel_reason END,
                 next_run_at = CASE WHEN status = 'scheduled' THEN NULL ELSE next_run_at END,
                 updated_at = CASE WHEN status = 'scheduled' THEN now() ELSE updated_at END,
                 status = CASE WHEN status = 'scheduled' THEN 'canceled' ELSE status END
               WHERE org_id = ${orgId} AND watch_thread_id IN ${sql.in([a.threadId, ...a.merged])}`]
        : a.merged.length === 0 ? [] : [sql`UPDATE wakes SET watch_thread_id = ${a.threadId}
               WHERE org_id = ${orgId} AND watch_thread_id IN ${sql.in(a.merged)}`])
    ]

    return { assign, mergeStatements, lookup, needsLookup, assignFound } as const
  })
}) {}
