/**
 * Search over the demo mailbox, with the real search's legs: the same weighted full-text ranking
 * and trigram typo matching (run by the database over the demo's documents given inline, never over
 * stored mail), the configured embedding model for the semantic leg (the demo's vectors computed once
 * per process) with the same relevance floor, normalised reciprocal rank fusion, and the same time budget.
 */
import { SqlClient } from "@effect/sql"
import { Clock, Duration, Effect, Option, Schedule } from "effect"
import { SearchTimeout, ServiceUnavailable } from "../contract/Errors.js"
import { AppConfig } from "../platform/Config.js"
import type { SearchMode, SearchQuery, SearchResult, SearchScope } from "../search/Api.js"
import { DEFAULT_SEARCH_LIMIT } from "../search/Api.js"
import { embeddingText } from "../search/Document.js"
import { Embedder } from "../search/Embedder.js"
import { parseQuery } from "../search/Query.js"
import type { Ranked } from "../search/Repo.js"
import { fuse } from "../search/Search.js"
import { demoEmails } from "./Dataset.js"

interface DemoDocument {
  readonly kind: "received" | "sent"
  readonly id: string
  readonly thread_id: string
  readonly inbox_id: string | null
  readonly subject: string | null
  readonly from_name: string | null
  readonly from: string | null
  readonly to: ReadonlyArray<string>
  readonly date: Date
  readonly body: string
}

const documents: ReadonlyArray<DemoDocument> = demoEmails
  .filter((e) => e.summary.status === "accepted")
  .map((e) => ({
    kind: "received",
    id: e.summary.id,
    thread_id: e.summary.thread_id,
    inbox_id: e.summary.inbox_id,
    subject: e.summary.subject,
    from_name: e.summary.from_name,
    from: e.summary.from,
    to: [...e.summary.to, ...e.summary.cc],
    date: e.summary.received_at,
    body: e.text
  }))

/** What hybrid keeps of the budget for the lexical leg and the answer when the semantic leg is slow. */
const HYBRID_MARGIN_MS = 500
const TRIGRAM_THRESHOLD = 0.5
const TRIGRAM_SCALE = 0.01

const snippet = (body: string) => Array.from(body.replace(/\s+/g, " ").trim()).slice(0, 200).join("")

export class DemoSearch extends Effect.Service<DemoSearch>()("mailroom/DemoSearch", {
  scoped: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const embedder = yield* Embedder
    const config = yield* AppConfig
    const budgetMs = Duration.toMillis(config.searchTimeout)
    const floor = Option.getOrElse(config.searchMinSimilarity, () => embedder.minSimilarity)
    // The demo's vectors, computed in the background from the first demo search on (the model may
    // take seconds to load, and a service nobody demos never loads it for the demo); until they exist
    // the demo's messages are found lexically, like stored mail the embedding backlog has not reached.
    // Warming outlives the search that starts it, not the service: it runs in the service's scope.
    const scope = yield* Effect.scope
    let vectors: ReadonlyArray<Float32Array> | undefined
    let warming = false
    const warm = embedder.embed(documents.map((d) => embeddingText(d.subject, d.body)), { priority: "backlog" }).pipe(
      Effect.tap((v) => Effect.sync(() => { vectors = v })),
      Effect.retry(Schedule.spaced("30 seconds").pipe(Schedule.compose(Schedule.recurs(10)))),
      Effect.ignore
    )
    const startWarming = Effect.suspend(() => {
      if (warming) return Effect.void
      warming = true
      return Effect.asVoid(Effect.forkIn(warm, scope))
    })

    const allowed = (q: SearchQuery, scope: SearchScope) =>
      documents.filter((d) =>
        (scope === "all" || d.kind === scope) &&
        (q.from === undefined || d.from === q.from.toLowerCase()) &&
        (q.to === undefined || d.to.includes(q.to.toLowerCase())) &&
        (q.date_from === undefined || d.date >= q.date_from) &&
        (q.date_to === undefined || d.date <= q.date_to) &&
        (q.thread_id === undefined || d.thread_id === q.thread_id) &&
        (q.inbox_id === undefined || d.inbox_id === q.inbox_id)
      )

    const lexical = (q: string, docs: ReadonlyArray<DemoDocument>, k: number) =>
      Effect.gen(function*() {
        if (docs.length === 0) return [] as ReadonlyArray<Ranked>
        const parsed = parseQuery(q)
        const rows = JSON.stringify(docs.map((d) => ({ id: d.id, at: d.date.toISOString(), subject: d.subject, from_name: d.from_name, from_address: d.from, body: d.body })))
        const excluded = parsed.excluded.length === 0 ? sql`true` : sql`NOT (d.tsv @@ websearch_to_tsquery('english', ${parsed.excluded.join(" or ")}))`
        return yield* sql<Ranked>`
          WITH d AS (
            SELECT x.id, x.at,
                   setweight(to_tsvector('english', coalesce(x.subject, '')), 'A') ||
                   setweight(to_tsvector('english', coalesce(x.from_name, '') || ' ' || coalesce(x.from_address, '')), 'B') ||
                   setweight(to_tsvector('english', coalesce(x.body, '')), 'C') AS tsv,
                   lower(coalesce(x.subject, '') || ' ' || coalesce(x.from_name, '') || ' ' || coalesce(x.from_address, '')) AS names
              FROM jsonb_to_recordset(${rows}::jsonb) AS x(id text, at timestamptz, subject text, from_name text, from_address text, body text)),
          fts AS (
            SELECT d.id, d.at, ts_rank_cd(d.tsv, query, 32) AS score
              FROM d, websearch_to_tsquery('english', ${q}) query WHERE d.tsv @@ query),
          trg AS (
            SELECT d.id, d.at, word_similarity(${parsed.positive}, d.names) * ${TRIGRAM_SCALE} AS score
              FROM d WHERE ${parsed.positive.length >= 3 ? sql`true` : sql`false`}
               AND word_similarity(${parsed.positive}, d.names) >= ${TRIGRAM_THRESHOLD} AND ${excluded}
               AND d.id NOT IN (SELECT id FROM fts))
          SELECT id, score::float8 AS score FROM (SELECT * FROM fts UNION ALL SELECT * FROM trg) hits
           ORDER BY score DESC, at DESC, id DESC LIMIT ${k}`
      })

    const semantic = (q: string, mode: SearchMode, docs: ReadonlyArray<DemoDocument>, k: number) =>
      Effect.gen(function*() {
        const docVectors = vectors
        if (docVectors === undefined) return [] as ReadonlyArray<Ranked>
        const query = yield* Effect.either(embedder.embed([q], { priority: "query" }))
        if (query._tag === "Left") {
          if (mode === "semantic") {
            return yield* new ServiceUnavailable({
              message: "semantic search is unavailable: the embedding model failed",
              details: { embedding_model: embedder.model }
            })
          }
          return [] as ReadonlyArray<Ranked>
        }
        const qv = query.right[0]!
        const ids = new Set(docs.map((d) => d.id))
        return documents
          .map((d, i) => {
            const v = docVectors[i]!
            let dot = 0
            for (let j = 0; j < v.length; j++) dot += v[j]! * qv[j]!
            return { id: d.id, score: dot }
          })
          .filter((r) => ids.has(r.id) && r.score >= floor)
          .map((r) => ({ id: r.id, score: Math.min(1, r.score) }))
          .sort((a, b) => b.score - a.score || (a.id < b.id ? -1 : 1))
          .slice(0, k)
      })

    const search = (q: SearchQuery) =>
      Effect.gen(function*() {
        const started = yield* Clock.currentTimeMillis
        yield* startWarming
        const mode = q.mode ?? "hybrid"
        const limit = q.limit ?? DEFAULT_SEARCH_LIMIT
        const docs = allowed(q, q.scope ?? "all")
        const k = Math.max(50, limit * 2)
        const [lex, sem] = yield* Effect.all([
          mode === "semantic" ? Effect.succeed<ReadonlyArray<Ranked>>([]) : lexical(q.q, docs, k),
          mode === "lexical"
            ? Effect.succeed<ReadonlyArray<Ranked>>([])
            : mode === "semantic"
            ? semantic(q.q, mode, docs, k)
            // Hybrid answers with its lexical leg when the query's embedding is late (a cold model).
            : semantic(q.q, mode, docs, k).pipe(
              Effect.timeoutTo({ duration: Math.max(0, budgetMs - HYBRID_MARGIN_MS), onSuccess: (r) => r, onTimeout: () => [] as ReadonlyArray<Ranked> })
            )
        ], { concurrency: "unbounded" })
        const ranked = mode === "lexical"
          ? lex.map((x) => ({ id: x.id, score: x.score, matched: ["lexical" as const] }))
          : mode === "semantic"
          ? sem.map((x) => ({ id: x.id, score: x.score, matched: ["semantic" as const] }))
          : fuse([{ leg: "lexical", ranked: lex }, { leg: "semantic", ranked: sem }], () => 0)
        const byId = new Map(documents.map((d) => [d.id, d]))
        const results: Array<SearchResult> = ranked.map((c) => {
          const d = byId.get(c.id)!
          return {
            kind: d.kind,
            id: d.id,
            thread_id: d.thread_id,
            inbox_id: d.inbox_id,
            subject: d.subject,
            from: d.from,
            to: [...d.to],
            date: d.date,
            snippet: snippet(d.body),
            score: c.score,
            matched: c.matched
          }
        })
        results.sort((a, b) => b.score - a.score || b.date.getTime() - a.date.getTime() || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
        const took = (yield* Clock.currentTimeMillis) - started
        return {
          data: { results: results.slice(0, limit) },
          meta: { mode, took_ms: Math.round(took), embedding_model: mode === "lexical" ? null : embedder.model }
        }
      }).pipe(
        Effect.timeoutFail({
          duration: config.searchTimeout,
          onTimeout: () => new SearchTimeout({ message: `the search took longer than its ${budgetMs} ms budget`, details: { timeout_ms: budgetMs } })
        }),
        Effect.catchTag("SqlError", (e) => Effect.die(e))
      )

    return { search } as const
  })
}) {}
