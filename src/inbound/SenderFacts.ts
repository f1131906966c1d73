/**
 * The facts about a sender that trust records as mail arrives: taken before the message is stored,
 * so `sender_known` means known before it. Messages arriving together share ONE query (a batch of
 * concurrent SMTP transactions reads the facts of all their senders and organizations at once);
 * alone, a message is one query.
 */
import { SqlClient, type SqlError } from "@effect/sql"
import { Effect, Exit, Schema } from "effect"
import { STILL_SENDABLE } from "../registries/Directory.js"
import { allRows } from "../platform/Rows.js"
import { makeBatcher } from "../platform/Batching.js"

/** The organizations that knew the sender (a `json` array, parsed by the driver or still text) and the registry fact. */
const FactsRow = Schema.Struct({
  ord: Schema.Number,
  org_id: Schema.Union(Schema.Array(Schema.String), Schema.parseJson(Schema.Array(Schema.String))),
  registry: Schema.Boolean
})

export interface SenderFactsInput {
  readonly orgIds: ReadonlyArray<string>
  /** The message's From address; null: nothing to look up. */
  readonly from: string | null
  /** The From as authenticated (DMARC or aligned DKIM), when it is. */
  readonly authenticated: string | null
}

export interface SenderFactsOf {
  /** Organizations that already knew the sender. */
  readonly known: ReadonlySet<string>
  /** The authenticated From is a published registry entry still sendable. */
  readonly registry: boolean
}

const WORKERS = 2
const MAX_BATCH = 128

export class SenderFacts extends Effect.Service<SenderFacts>()("mailroom/SenderFacts", {
  scoped: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const run = (inputs: ReadonlyArray<SenderFactsInput>) =>
      Effect.gen(function*() {
        const asked = inputs.flatMap((m, ord) =>
          m.from === null || m.orgIds.length === 0
            ? []
            : [{ ord, from: m.from.toLowerCase(), authenticated: (m.authenticated ?? "").toLowerCase(), orgs: m.orgIds }]
        )
        const rows = asked.length === 0 ? [] : yield* sql`
          SELECT i.ord,
                 (SELECT coalesce(json_agg(k.org_id), '[]'::json) FROM known_addresses k
                   WHERE k.address = i."from"
                     AND k.org_id IN (SELECT value::uuid FROM jsonb_array_elements_text(i.orgs))) AS org_id,
                 EXISTS (SELECT 1 FROM registry_entries e WHERE e.address = i.authenticated
                           AND e.status = 'published' AND ${sql.literal(STILL_SENDABLE)}) AS registry
            FROM jsonb_to_recordset(${JSON.stringify(asked)}::jsonb) AS i(ord int, "from" text, authenticated text, orgs jsonb)`.pipe(
          allRows(FactsRow, "sender facts")
        )
        const byOrd = new Map(rows.map((r) => [r.ord, r]))
        return inputs.map((m, ord): Exit.Exit<SenderFactsOf, SqlError.SqlError> => {
          const row = byOrd.get(ord)
          return Exit.succeed({
            known: new Set(row?.org_id ?? []),
            registry: m.authenticated !== null && row?.registry === true
          })
        })
      }).pipe(
        Effect.catchAll((e) => Effect.succeed(inputs.map((): Exit.Exit<SenderFactsOf, SqlError.SqlError> => Exit.fail(e))))
      )

    const batched = yield* makeBatcher({ workers: WORKERS, maxBatch: MAX_BATCH, run })

    /** Whether each organization already knew the From, and whether the authenticated From is a published registry entry. */
    const of = (input: SenderFactsInput): Effect.Effect<SenderFactsOf, SqlError.SqlError> =>
      input.from === null || input.orgIds.length === 0
        ? Effect.succeed({ known: new Set<string>(), registry: false })
        : batched(input)

    return { of } as const
  })
}) {}
