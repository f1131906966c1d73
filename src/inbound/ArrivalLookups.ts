/**
 * What an arriving message reads before it is stored: the thread it joins in each organization it
 * reaches (src/mail/Threading.ts) and what those organizations know of its sender
 * (src/inbound/SenderFacts.ts). Both are read by ONE statement, shared by every message arriving at
 * once (a batch of concurrent SMTP transactions, local deliveries and wake firings); alone, a
 * message is one statement, or none when it names no message and has no From.
 */
import { SqlClient, type SqlError, type Statement } from "@effect/sql"
import { Effect, Exit, Schema } from "effect"
import { makeBatcher } from "../platform/Batching.js"
import { allRows } from "../platform/Rows.js"
import { type Found, type ThreadAssignment, Threading, type ThreadingInput } from "../mail/Threading.js"
import { askedOf, factsOf, NO_FACTS, type SenderFactsInput, type SenderFactsOf, senderFactsQuery } from "./SenderFacts.js"

export interface ArrivalInput {
  /** One per organization the message reaches. */
  readonly threads: ReadonlyArray<ThreadingInput>
  readonly sender: SenderFactsInput
}

export interface Arrival {
  /** In the order of `threads`. */
  readonly threads: ReadonlyArray<ThreadAssignment>
  readonly sender: SenderFactsOf
}

/**
 * A row of either part: a stored thread of the flattened thread input `ord`, or the sender facts
 * of message `ord` (its `org_id` a `json` array, parsed by the driver or still text).
 */
const ArrivalRow = Schema.Struct({
  kind: Schema.Literal("thread", "sender"),
  ord: Schema.Number,
  thread_id: Schema.NullOr(Schema.String),
  org_id: Schema.NullOr(Schema.Union(Schema.Array(Schema.String), Schema.parseJson(Schema.Array(Schema.String)))),
  registry: Schema.NullOr(Schema.Boolean)
})

const WORKERS = 2
const MAX_BATCH = 128

export class ArrivalLookups extends Effect.Service<ArrivalLookups>()("mailroom/ArrivalLookups", {
  scoped: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const threading = yield* Threading

    const run = (inputs: ReadonlyArray<ArrivalInput>) =>
      Effect.gen(function*() {
        const flat = inputs.flatMap((m) => m.threads)
        const asked = askedOf(inputs.map((m) => m.sender))
        const parts: Array<Statement.Fragment> = []
        if (threading.needsLookup(flat)) {
          parts.push(sql`SELECT 'thread' AS kind, t.ord, t.thread_id::text AS thread_id, NULL::json AS org_id, NULL::boolean AS registry
            FROM (${threading.lookup(flat)}) t`)
        }
        if (asked.length > 0) {
          parts.push(sql`SELECT 'sender' AS kind, f.ord, NULL::text AS thread_id, f.org_id, f.registry
            FROM (${senderFactsQuery(sql, asked)}) f`)
        }
        const rows = parts.length === 0
          ? []
          : yield* sql`${sql.join(" UNION ALL ", false)(parts)}`.pipe(allRows(ArrivalRow, "arrival lookups"))
        const found: Array<Found> = []
        const facts = new Map<number, { org_id: ReadonlyArray<string> | null; registry: boolean | null }>()
        for (const row of rows) {
          if (row.kind === "sender") facts.set(row.ord, row)
          else if (row.thread_id !== null) found.push({ ord: row.ord, thread_id: row.thread_id })
        }
        const assigned = threading.assignFound(flat, found)
        let at = 0
        return inputs.map((m, ord): Exit.Exit<Arrival, SqlError.SqlError> => {
          const threads = assigned.slice(at, at + m.threads.length)
          at += m.threads.length
          return Exit.succeed({ threads, sender: factsOf(m.sender, facts.get(ord)) })
        })
      })

    const batched = yield* makeBatcher({ workers: WORKERS, maxBatch: MAX_BATCH, run })

    /** The threads of one message in each organization it reaches, and the facts of its sender. */
    const of = (input: ArrivalInput): Effect.Effect<Arrival, SqlError.SqlError> =>
      input.threads.length === 0 ? Effect.succeed({ threads: [], sender: NO_FACTS }) : batched(input)

    return { of } as const
  })
}) {}
