/**
 * Search over the demo mailbox with the real search's rules, applied to the demo's documents held in
 * memory: the lexical leg is the search area's own statement (`lexicalOver`) over the documents given
 * inline (the database ranks them, nothing is stored), the semantic leg ranks the demo's vectors with
 * the vector index's `topK` and the same relevance floor (`relevantOf`), and the modes, fusion, results
 * and their order are the search area's `candidatesOf` and `resultsOf`; the same time budget covers it.
 * What is the demo's own is where its documents come from: fixed text, filtered in memory, its
 * vectors computed once per process with the configured embedding model.
 */
import { SqlClient } from "@effect/sql"
import { Clock, Duration, Effect, Option, Schedule } from "effect"
import { SearchTimeout, ServiceUnavailable } from "../contract/Errors.js"
import { extractReplyText } from "../mail/ReplyText.js"
import { AppConfig } from "../platform/Config.js"
import type { SearchMode, SearchQuery, SearchScope } from "../search/Api.js"
import { DEFAULT_SEARCH_LIMIT } from "../search/Api.js"
import { embeddingText } from "../mail/SearchDocument.js"
import { Embedder } from "../search/Embedder.js"
import { type HitRow, inlineDocuments, type InlineDocument, lexicalOver, type Ranked } from "../search/Repo.js"
import { candidatesOf, legSize, relevantOf, resultsOf } from "../search/Search.js"
import { topK } from "../search/Vectors.js"
import { demoEmails } from "./Dataset.js"

/** A demo message as search sees it: what ranks it (inline), what shows it (hit), what filters it. */
export interface DemoDocument {
  readonly inline: InlineDocument
  readonly hit: HitRow
  /** Every recipient address, To and Cc (what `to=` matches). */
  readonly recipients: ReadonlyArray<string>
}

/** The demo's searchable messages: its accepted mail (spam is never searched, as stored mail is not). */
export const demoDocuments: ReadonlyArray<DemoDocument> = demoEmails
  .filter((e) => e.summary.status === "accepted")
  .map((e) => {
    const s = e.summary
    const recipients = [...s.to, ...s.cc]
    return {
      inline: {
        id: s.id,
        at: s.received_at,
        subject: s.subject,
        extracted: extractReplyText(e.text, null),
        from_name: s.from_name,
        from_address: s.from,
        body: e.text
      },
      // The demo has always shown every recipient of a message among its `to`.
      hit: {
        id: s.id,
        kind: "received",
        thread_id: s.thread_id,
        inbox_id: s.inbox_id,
        subject: s.subject,
        from_address: s.from,
        to_addresses: recipients,
        at: s.received_at,
        body: e.text
      },
      recipients
    }
  })

/** What hybrid keeps of the budget for the lexical leg and the answer when the semantic leg is slow. */
const HYBRID_MARGIN_MS = 500

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
    const warm = embedder.embed(demoDocuments.map((d) => embeddingText(d.inline.subject, d.inline.body)), { priority: "backlog" }).pipe(
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
      demoDocuments.filter((d) =>
        (scope === "all" || d.hit.kind === scope) &&
        (q.from === undefined || d.hit.from_address === q.from.toLowerCase()) &&
        (q.to === undefined || d.recipients.includes(q.to.toLowerCase())) &&
        (q.date_from === undefined || d.hit.at >= q.date_from) &&
        (q.date_to === undefined || d.hit.at <= q.date_to) &&
        (q.thread_id === undefined || d.hit.thread_id === q.thread_id) &&
        (q.inbox_id === undefined || d.hit.inbox_id === q.inbox_id)
      )

    const lexical = (q: string, docs: ReadonlyArray<DemoDocument>, k: number, timeoutMs: number) =>
      docs.length === 0
        ? Effect.succeed<ReadonlyArray<Ranked>>([])
        : lexicalOver(sql, inlineDocuments(sql, docs.map((d) => d.inline)), sql`true`, q, k, timeoutMs)

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
        const ids = new Set(docs.map((d) => d.hit.id))
        // Scored as the vector index scores stored vectors: float32 dot products, its top k.
        const scores = new Float32Array(docVectors.length)
        docVectors.forEach((v, i) => {
          let dot = 0
          for (let j = 0; j < v.length; j++) dot += v[j]! * qv[j]!
          scores[i] = dot
        })
        const near = topK(scores, docVectors.length, k, (i) => ids.has(demoDocuments[i]!.hit.id))
        return relevantOf(near.map(([i, score]) => ({ id: demoDocuments[i]!.hit.id, score })), floor)
      })

    const search = (q: SearchQuery) =>
      Effect.gen(function*() {
        const started = yield* Clock.currentTimeMillis
        yield* startWarming
        const mode = q.mode ?? "hybrid"
        const limit = q.limit ?? DEFAULT_SEARCH_LIMIT
        const docs = allowed(q, q.scope ?? "all")
        const k = legSize(limit)
        const remaining = budgetMs - ((yield* Clock.currentTimeMillis) - started)
        const [lex, sem] = yield* Effect.all([
          mode === "semantic" ? Effect.succeed<ReadonlyArray<Ranked>>([]) : lexical(q.q, docs, k, remaining),
          mode === "lexical"
            ? Effect.succeed<ReadonlyArray<Ranked>>([])
            : mode === "semantic"
            ? semantic(q.q, mode, docs, k)
            // Hybrid answers with its lexical leg when the query's embedding is late (a cold model).
            : semantic(q.q, mode, docs, k).pipe(
              Effect.timeoutTo({ duration: Math.max(0, budgetMs - HYBRID_MARGIN_MS), onSuccess: (r) => r, onTimeout: () => [] as ReadonlyArray<Ranked> })
            )
        ], { concurrency: "unbounded" })
        const results = resultsOf(candidatesOf(mode, lex, sem), demoDocuments.map((d) => d.hit), limit)
        const took = (yield* Clock.currentTimeMillis) - started
        return {
          data: { results },
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
