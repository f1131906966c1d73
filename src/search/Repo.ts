/**
 * SQL of Search: the lexical leg, the documents a filter allows, and hits read back for display. The
 * lexical ranking (`lexicalOver`) also ranks documents given inline (`inlineDocuments`, the demo's).
 * Rows are decoded, so a renamed or retyped column dies naming the statement; SQL errors (a
 * statement timeout) stay for the caller.
 */
import { SqlClient, type Statement } from "@effect/sql"
import { Effect, Schema } from "effect"
import { allRows, Enum, JsonColumn, Timestamp } from "../platform/Rows.js"
import type { SearchScope } from "./Api.js"
import { parseQuery } from "./Query.js"

export interface SearchFilters {
  readonly scope: SearchScope
  readonly from?: string | undefined
  readonly to?: string | undefined
  readonly dateFrom?: Date | undefined
  readonly dateTo?: Date | undefined
  readonly threadId?: string | undefined
  readonly inboxId?: string | undefined
  /** A key limited to inboxes: only mail received at or sent from one of them. */
  readonly inboxIds?: ReadonlyArray<string> | undefined
}

export interface Ranked {
  readonly id: string
  readonly score: number
}

/** A lexical hit: `Ranked` with the time it ranks ties by. */
const RankedRow = Schema.Struct({ id: Schema.String, at: Timestamp, score: Schema.Number })

export const HitRow = Schema.Struct({
  id: Schema.String,
  kind: Enum("received", "sent"),
  thread_id: Schema.NullOr(Schema.String),
  inbox_id: Schema.NullOr(Schema.String),
  subject: Schema.NullOr(Schema.String),
  from_address: Schema.NullOr(Schema.String),
  to_addresses: JsonColumn(Schema.Array(Schema.String)),
  at: Timestamp,
  body: Schema.NullOr(Schema.String)
})
export type HitRow = typeof HitRow.Type

const IdRow = Schema.Struct({ id: Schema.String })

/** word_similarity above which a subject or sender word counts as a misspelling of the query (0.6 missed `invoce`). */
const TRIGRAM_THRESHOLD = 0.5
/** Typo-only hits rank below every full-text hit: their score is scaled into (0, 0.01]. */
const TRIGRAM_SCALE = 0.01

/**
 * Full-text hits (websearch syntax, weighted subject > reply text and sender > body) then, below them,
 * subject or sender words within trigram distance of the query (misspellings), excluded terms honoured
 * by both, among the documents of `source` (aliased `d`, with `id`, `at`, `tsv` and `names`) that
 * `where` allows. The trigram leg runs only when the full-text hits do not fill the list: a word common
 * enough to have that many exact hits is spelled right, and on a large mailbox the trigram scan of a
 * common word costs more than the full-text search itself. One transaction: the trigram threshold and
 * the statement timeout are set for it alone.
 */
export const lexicalOver = (
  sql: SqlClient.SqlClient,
  source: Statement.Fragment,
  where: Statement.Fragment,
  q: string,
  k: number,
  timeoutMs: number
) =>
  Effect.gen(function*() {
    const parsed = parseQuery(q)
    const excluded = parsed.excluded.length === 0
      ? sql`true`
      : sql`NOT (d.tsv @@ websearch_to_tsquery('english', ${parsed.excluded.join(" or ")}))`
    const trigram = parsed.positive.length >= 3
    yield* sql`SELECT set_config('statement_timeout', ${String(Math.max(1, Math.ceil(timeoutMs)))}, true),
                      set_config('pg_trgm.word_similarity_threshold', ${String(TRIGRAM_THRESHOLD)}, true)`
    return yield* sql`
      WITH fts AS (
        SELECT d.id, d.at, ts_rank_cd(d.tsv, query, 32) AS score
          FROM ${source} d, websearch_to_tsquery('english', ${q}) query
         WHERE ${where} AND d.tsv @@ query
         ORDER BY score DESC, d.at DESC, d.id DESC LIMIT ${k}),
      trg AS (
        SELECT d.id, d.at, word_similarity(${parsed.positive}, d.names) * ${TRIGRAM_SCALE} AS score
          FROM ${source} d
         WHERE ${trigram ? sql`true` : sql`false`} AND (SELECT count(*) FROM fts) < ${k}
           AND ${where} AND ${parsed.positive} <% d.names AND ${excluded}
           AND d.id NOT IN (SELECT id FROM fts)
         ORDER BY score DESC, d.at DESC, d.id DESC LIMIT ${k})
      SELECT id, at, score::float8 AS score FROM (SELECT * FROM fts UNION ALL SELECT * FROM trg) hits
       ORDER BY score DESC, at DESC, id DESC LIMIT ${k}`.pipe(allRows(RankedRow, "lexical search"))
  }).pipe(sql.withTransaction)

/** A document held in memory (the demo's), with the columns `search_documents` is written with. */
export interface InlineDocument {
  readonly id: string
  readonly at: Date
  readonly subject: string | null
  readonly extracted: string | null
  readonly from_name: string | null
  readonly from_address: string | null
  readonly body: string | null
}

/**
 * Documents given inline as a `lexicalOver` source: `tsv` and `names` computed as the generated
 * columns of `search_documents` are (migrations 0061 and 0190), so they rank as stored ones would;
 * test/demo-parity.test.ts holds the two to the same answers. Nothing is stored.
 */
export const inlineDocuments = (sql: SqlClient.SqlClient, docs: ReadonlyArray<InlineDocument>): Statement.Fragment =>
  sql`(SELECT x.id, x.at,
              search_tsv(x.subject, x.extracted, x.from_name, x.from_address, x.body) AS tsv,
              lower(coalesce(x.subject, '') || ' ' || coalesce(x.from_name, '') || ' ' || coalesce(x.from_address, '')) AS names
         FROM jsonb_to_recordset(${JSON.stringify(docs)}::jsonb)
           AS x(id text, at timestamptz, subject text, extracted text, from_name text, from_address text, body text))`

export class SearchRepo extends Effect.Service<SearchRepo>()("mailroom/SearchRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const filtersOf = (orgId: string, f: SearchFilters): Statement.Fragment => {
      const conds = [sql`d.org_id = ${orgId}`]
      if (f.scope !== "all") conds.push(sql`d.kind = ${f.scope}`)
      if (f.from !== undefined) conds.push(sql`d.from_address = ${f.from.toLowerCase()}`)
      if (f.to !== undefined) conds.push(sql`d.recipients @> jsonb_build_array(${f.to.toLowerCase()}::text)`)
      if (f.dateFrom !== undefined) conds.push(sql`d.at >= ${f.dateFrom}`)
      if (f.dateTo !== undefined) conds.push(sql`d.at <= ${f.dateTo}`)
      if (f.threadId !== undefined) {
        conds.push(sql`(EXISTS (SELECT 1 FROM emails e WHERE e.id = d.email_id AND e.thread_id = ${f.threadId})
          OR EXISTS (SELECT 1 FROM sent_emails s WHERE s.id = d.sent_email_id AND s.thread_id = ${f.threadId}))`)
      }
      if (f.inboxId !== undefined) {
        conds.push(sql`(EXISTS (SELECT 1 FROM emails e WHERE e.id = d.email_id AND e.inbox_id = ${f.inboxId})
          OR EXISTS (SELECT 1 FROM sent_emails s WHERE s.id = d.sent_email_id AND s.inbox_id = ${f.inboxId}))`)
      }
      if (f.inboxIds !== undefined) {
        conds.push(f.inboxIds.length === 0 ? sql`false` : sql`(EXISTS (SELECT 1 FROM emails e WHERE e.id = d.email_id AND e.inbox_id IN ${sql.in(f.inboxIds)})
          OR EXISTS (SELECT 1 FROM sent_emails s WHERE s.id = d.sent_email_id AND s.inbox_id IN ${sql.in(f.inboxIds)}))`)
      }
      return sql.and(conds)
    }

    /** Full-text and typo hits (`lexicalOver`) among the organization's stored documents a filter allows. */
    const lexical = (orgId: string, q: string, f: SearchFilters, k: number, timeoutMs: number) =>
      lexicalOver(sql, sql`search_documents`, filtersOf(orgId, f), q, k, timeoutMs)

    /** Every document of the organization a filter allows (the semantic leg ranks only those). */
    const allowed = (orgId: string, f: SearchFilters) =>
      Effect.map(
        sql`SELECT d.id FROM search_documents d WHERE ${filtersOf(orgId, f)}`.pipe(allRows(IdRow, "search allowed")),
        (rows) => new Set(rows.map((r) => r.id))
      )

    /** The hits to show, in any order; ids no longer there (deleted) are simply absent. */
    const hydrate = (orgId: string, ids: ReadonlyArray<string>) =>
      ids.length === 0 ? Effect.succeed<ReadonlyArray<HitRow>>([]) : sql`
        SELECT d.id, d.kind, coalesce(e.thread_id, s.thread_id) AS thread_id,
               coalesce(e.inbox_id, s.inbox_id) AS inbox_id, d.subject, d.from_address,
               coalesce(e.to_addresses, s.to_addresses, '[]'::jsonb) AS to_addresses, d.at, left(d.body, 1000) AS body
          FROM search_documents d LEFT JOIN emails e ON e.id = d.email_id LEFT JOIN sent_emails s ON s.id = d.sent_email_id
         WHERE d.org_id = ${orgId} AND d.id IN ${sql.in(ids)}`.pipe(allRows(HitRow, "search hits"))

    /** Which of these documents still have a vector of this model. */
    const embedded = (orgId: string, model: string, ids: ReadonlyArray<string>) =>
      ids.length === 0 ? Effect.succeed(new Set<string>()) : Effect.map(
        sql`SELECT id FROM search_embeddings WHERE org_id = ${orgId} AND model = ${model} AND id IN ${sql.in(ids)}`.pipe(
          allRows(IdRow, "search embedded")
        ),
        (rows) => new Set(rows.map((r) => r.id))
      )

    return { lexical, allowed, hydrate, embedded } as const
  })
}) {}
