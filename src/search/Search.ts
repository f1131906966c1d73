/**
 * One search: the lexical leg, the semantic leg (the query embedded, then the organization's
 * vectors ranked exactly), or both fused by reciprocal rank fusion, under one time budget
 * (`SEARCH_TIMEOUT`) that covers everything, the query's embedding included.
 *
 * Relevance: every score is between 0 and 1, and nothing below a leg's floor is returned. Lexical:
 * a message must match the query's words (or, for typos, a subject or sender word must be within
 * trigram distance); its score is the full-text rank normalised to rank/(rank+1), typo matches
 * at most 0.01. Semantic: the cosine similarity of the query and the message, at least the
 * relevance floor (`SEARCH_MIN_SIMILARITY`, else the embedder's default). Hybrid: what passed either
 * leg's floor, fused by reciprocal rank, the sum divided by its largest possible value (first in
 * both legs = 1, first in one leg only = 0.5).
 */
import { Clock, Duration, Effect, Option } from "effect"
import { SearchTimeout, ServiceUnavailable } from "../contract/Errors.js"
import { AppConfig } from "../platform/Config.js"
import type { Leg, SearchMode, SearchResult } from "./Api.js"
import { Embedder } from "./Embedder.js"
import { type HitRow, type Ranked, type SearchFilters, SearchRepo } from "./Repo.js"
import { VectorIndex } from "./Vectors.js"

/** RRF's constant: 1 / (k + rank), rank from 1. 60 is the value of the original paper and of most engines. */
export const RRF_K = 60

export interface Fused {
  readonly id: string
  readonly score: number
  readonly matched: ReadonlyArray<Leg>
}

/**
 * Reciprocal rank fusion of ranked lists, normalised to 0–1: the sum of 1/(k + rank) divided by
 * its largest possible value (first in every list). Ties (equal fused score) are broken by
 * `tieBreak` (newest first, then id) so the same inputs always give the same order.
 */
export const fuse = (
  lists: ReadonlyArray<{ readonly leg: Leg; readonly ranked: ReadonlyArray<Ranked> }>,
  tieBreak: (a: string, b: string) => number
): Array<Fused> => {
  const acc = new Map<string, { score: number; matched: Array<Leg> }>()
  for (const { leg, ranked } of lists) {
    ranked.forEach((r, i) => {
      const entry = acc.get(r.id) ?? { score: 0, matched: [] }
      entry.score += 1 / (RRF_K + i + 1)
      entry.matched.push(leg)
      acc.set(r.id, entry)
    })
  }
  const best = lists.length / (RRF_K + 1)
  return [...acc.entries()]
    .map(([id, e]) => ({ id, score: best > 0 ? Math.min(1, e.score / best) : 0, matched: [...e.matched].sort() }))
    .sort((a, b) => b.score - a.score || tieBreak(a.id, b.id))
}

const snippet = (body: string | null) => Array.from((body ?? "").replace(/\s+/g, " ").trim()).slice(0, 200).join("")

/** Candidates per leg: more than shown, so fusion has something to agree on. */
export const legSize = (limit: number) => Math.min(100, Math.max(50, limit * 2))

/** The semantic leg's neighbours that pass the relevance floor, scores capped at 1. */
export const relevantOf = (near: ReadonlyArray<Ranked>, floor: number): Array<Ranked> =>
  near.filter((n) => n.score >= floor).map((n) => ({ id: n.id, score: Math.min(1, n.score) }))

/** What a mode makes of the legs: one leg as it ranked, or both fused. */
export const candidatesOf = (mode: SearchMode, lexical: ReadonlyArray<Ranked>, semantic: ReadonlyArray<Ranked>): Array<Fused> =>
  mode === "lexical"
    ? lexical.map((x) => ({ id: x.id, score: x.score, matched: ["lexical" as const] }))
    : mode === "semantic"
    ? semantic.map((x) => ({ id: x.id, score: x.score, matched: ["semantic" as const] }))
    : fuse([{ leg: "lexical", ranked: lexical }, { leg: "semantic", ranked: semantic }], () => 0)

/**
 * The answer's results: each candidate with its hit row (a candidate without one, deleted since, is
 * dropped), best first, equal scores newest first then by id, so the order never depends on the
 * engine, cut to `limit`.
 */
export const resultsOf = (candidates: ReadonlyArray<Fused>, rows: ReadonlyArray<HitRow>, limit: number): Array<SearchResult> => {
  const byId = new Map<string, HitRow>(rows.map((row) => [row.id, row]))
  const results: Array<SearchResult> = []
  for (const c of candidates) {
    const row = byId.get(c.id)
    if (row === undefined) continue
    results.push({
      kind: row.kind,
      id: row.id,
      thread_id: row.thread_id,
      inbox_id: row.inbox_id,
      subject: row.subject,
      from: row.from_address,
      to: row.to_addresses,
      date: row.at,
      snippet: snippet(row.body),
      score: c.score,
      matched: c.matched
    })
  }
  results.sort((a, b) => b.score - a.score || b.date.getTime() - a.date.getTime() || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
  return results.slice(0, limit)
}

export interface SearchRequest {
  readonly orgId: string
  readonly q: string
  readonly mode: SearchMode
  readonly limit: number
  readonly filters: SearchFilters
}

export class Search extends Effect.Service<Search>()("mailroom/Search", {
  effect: Effect.gen(function*() {
    const repo = yield* SearchRepo
    const vectors = yield* VectorIndex
    const embedder = yield* Embedder
    const config = yield* AppConfig
    const budgetMs = Duration.toMillis(config.searchTimeout)
    const floor = Option.getOrElse(config.searchMinSimilarity, () => embedder.minSimilarity)

    const semantic = (r: SearchRequest, k: number) =>
      Effect.gen(function*() {
        // Hybrid answers with its lexical leg when the embedder fails; semantic has nothing else to offer.
        const embedded = yield* Effect.either(embedder.embed([r.q], { priority: "query" }))
        if (embedded._tag === "Left") {
          if (r.mode === "semantic") {
            return yield* new ServiceUnavailable({
              message: `semantic search is unavailable: the embedding model failed (${embedded.left.message})`,
              details: { embedding_model: embedder.model }
            })
          }
          yield* Effect.logWarning(`search: the query was not embedded (${embedded.left.message}); answering with the lexical leg`)
          return []
        }
        const query = embedded.right[0]
        const f = r.filters
        const filtered = f.scope !== "all" || f.from !== undefined || f.to !== undefined || f.dateFrom !== undefined ||
          f.dateTo !== undefined || f.threadId !== undefined || f.inboxId !== undefined ||
          f.inboxIds !== undefined
        const only = filtered ? yield* repo.allowed(r.orgId, f) : undefined
        const near = yield* vectors.nearest(r.orgId, embedder.model, query!, k, only)
        // A vector held in memory may be stale: its message's content discarded (or the message
        // re-embedded) since. Only vectors still stored count.
        const relevant = relevantOf(near, floor)
        const current = yield* repo.embedded(r.orgId, embedder.model, relevant.map((n) => n.id))
        return relevant.filter((n) => current.has(n.id))
      })

    const run = (r: SearchRequest) =>
      Effect.gen(function*() {
        const started = yield* Clock.currentTimeMillis
        const k = legSize(r.limit)
        const remaining = Effect.map(Clock.currentTimeMillis, (now) => budgetMs - (now - started))
        const lexicalLeg = Effect.flatMap(remaining, (ms) => repo.lexical(r.orgId, r.q, r.filters, k, ms))
        const [lexical, sem] = yield* Effect.all([
          r.mode === "semantic" ? Effect.succeed<ReadonlyArray<Ranked>>([]) : lexicalLeg,
          r.mode === "lexical" ? Effect.succeed<ReadonlyArray<Ranked>>([]) : semantic(r, k)
        ], { concurrency: "unbounded" })
        const candidates = candidatesOf(r.mode, lexical, sem)
        // Read back every candidate, not only `limit`: a vector may belong to a message deleted since.
        const results = resultsOf(candidates, yield* repo.hydrate(r.orgId, candidates.map((c) => c.id)), r.limit)
        const took = (yield* Clock.currentTimeMillis) - started
        return {
          results,
          meta: { mode: r.mode, took_ms: Math.round(took), embedding_model: r.mode === "lexical" ? null : embedder.model }
        }
      })

    const search = (r: SearchRequest) =>
      run(r).pipe(
        Effect.timeoutFail({
          duration: config.searchTimeout,
          onTimeout: () =>
            new SearchTimeout({
              message: `the search took longer than its ${budgetMs} ms budget`,
              details: { timeout_ms: budgetMs, mode: r.mode }
            })
        }),
        Effect.catchTag("SqlError", (e) => Effect.die(e))
      )

    return { search } as const
  })
}) {}
