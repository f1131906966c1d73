/**
 * The demo and the real operations apply one set of rules: the same rows paged by the real keyset
 * statement and by the demo's in-memory page give the same pages, totals and cursors; the demo's
 * messages stored as an organization's search documents (with the same vectors) are found by the
 * real search in the same order, with the same scores and legs, as the demo's search finds them.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { randomUUID } from "node:crypto"
import type { ListMeta } from "../src/contract/Envelope.js"
import { decodeCursor, pageOf, type Position } from "../src/contract/Paging.js"
import { DemoSearch, demoDocuments } from "../src/demo/Search.js"
import { Provisioning } from "../src/identity/Provisioning.js"
import { pageInMemory, pageWithTotal } from "../src/platform/Listing.js"
import type { SearchMode, SearchResult } from "../src/search/Api.js"
import { embeddingText } from "../src/mail/SearchDocument.js"
import { Embedder, normalise } from "../src/search/Embedder.js"
import { SearchRepo } from "../src/search/Repo.js"
import { Search } from "../src/search/Search.js"
import { toBytes, VectorIndex } from "../src/search/Vectors.js"
import { testDatabase } from "./support/harness.js"

/** A deterministic bag-of-words embedding: texts sharing words are near, so the semantic leg has an order. */
const DIMS = 64
const vectorOf = (text: string) => {
  const v = new Array<number>(DIMS).fill(0)
  for (const w of text.toLowerCase().match(/[a-z0-9]+/g) ?? []) {
    let h = 0
    for (const c of w) h = (h * 31 + c.charCodeAt(0)) >>> 0
    v[h % DIMS]! += 1
  }
  v[0]! += 0.01
  return normalise(v)
}
const MODEL = "parity-words"
const StubEmbedder = Layer.succeed(Embedder, {
  model: MODEL,
  minSimilarity: 0.05,
  embed: (texts) => Effect.succeed(texts.map(vectorOf))
})

const Env = Layer.mergeAll(
  Provisioning.Default,
  Search.Default.pipe(Layer.provide([SearchRepo.Default, VectorIndex.Default])),
  DemoSearch.Default
).pipe(Layer.provideMerge(StubEmbedder), Layer.provideMerge(testDatabase()))

/** What both searches know of a hit (thread, inbox and recipients come from the stored message, absent here). */
const shown = (r: SearchResult) => ({
  id: r.id,
  kind: r.kind,
  subject: r.subject,
  from: r.from,
  date: r.date.toISOString(),
  snippet: r.snippet,
  score: r.score,
  matched: r.matched
})

layer(Env, { timeout: 120_000, excludeTestServices: true })("demo parity", (it) => {
  describe("paging", () => {
    it.effect("the demo's in-memory page is the real keyset statement's page, cursor by cursor", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* sql`CREATE TABLE listing_parity (id uuid PRIMARY KEY, created_at timestamptz NOT NULL)`
        // Equal times on purpose: the id breaks the tie, in both.
        const times = ["2026-01-05T09:00:00Z", "2026-01-06T09:00:00Z", "2026-01-06T09:00:00Z", "2026-01-07T10:30:00Z"]
        const rows = Array.from({ length: 13 }, (_, i) => ({ id: randomUUID(), created_at: new Date(times[i % times.length]!) }))
        for (const r of rows) yield* sql`INSERT INTO listing_parity ${sql.insert(r)}`
        for (const limit of [1, 2, 5, 50]) {
          let cursor: string | null = null
          let pages = 0
          do {
            const after: Position | undefined = yield* decodeCursor(cursor ?? undefined)
            const real: { rows: ReadonlyArray<{ id: string; created_at: Date }>; total: number } = yield* pageWithTotal<{ id: string; created_at: Date }>(sql, "listing_parity", sql`true`, limit, after)
            const memory = pageInMemory(rows, limit, after)
            const a: { items: ReadonlyArray<string>; meta: ListMeta } = pageOf(real.rows, limit, real.total, (r) => r.id)
            const b = pageOf(memory.rows, limit, memory.total, (r) => r.id)
            expect(b, `limit ${limit}, page ${pages}`).toEqual(a)
            cursor = a.meta.cursor
            pages++
          } while (cursor !== null)
          expect(pages).toBe(Math.ceil(rows.length / limit))
        }
      }))
  })

  describe("search", () => {
    it.effect("the real search over the demo's messages answers what the demo's search answers, in every mode", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const org = yield* (yield* Provisioning).createOrganization({ name: "Demo parity", plan: "developer" })
        yield* sql`DELETE FROM search_documents WHERE org_id = ${org.id}`
        for (const d of demoDocuments) {
          yield* sql`INSERT INTO search_documents ${sql.insert({
            id: d.inline.id,
            org_id: org.id,
            kind: d.hit.kind,
            email_id: null,
            at: d.inline.at,
            from_address: d.inline.from_address,
            from_name: d.inline.from_name,
            recipients: JSON.stringify(d.recipients),
            subject: d.inline.subject,
            body: d.inline.body,
            extracted: d.inline.extracted,
            embedded_at: new Date()
          })}`
          yield* sql`INSERT INTO search_embeddings ${sql.insert({
            id: d.inline.id,
            org_id: org.id,
            model: MODEL,
            dims: DIMS,
            vector: toBytes(vectorOf(embeddingText(d.inline.subject, d.inline.body)))
          })}`
        }
        const search = yield* Search
        const demo = yield* DemoSearch
        // The demo's vectors are computed in the background after its first search.
        for (let i = 0; i < 100; i++) {
          const r = yield* demo.search({ q: "invoice", mode: "semantic" })
          if (r.data.results.length > 0) break
          yield* Effect.sleep("50 millis")
        }
        const queries = ["invoice", "invoce", "invoice -purchase", "friday call slides", "\"purchase order\"", "latency or interview", "payment received"]
        const modes: ReadonlyArray<SearchMode> = ["lexical", "semantic", "hybrid"]
        let found = 0
        for (const q of queries) {
          for (const mode of modes) {
            for (const limit of [2, 20]) {
              const real = yield* search.search({ orgId: org.id, q, mode, limit, filters: { scope: "all" } })
              const ours = yield* demo.search({ q, mode, limit })
              expect(ours.data.results.map(shown), `${mode} ${q} ${limit}`).toEqual(real.results.map(shown))
              found += real.results.length
            }
          }
        }
        // The comparison means something: the queries do find messages, in every leg.
        expect(found).toBeGreaterThan(40)
      }))
  })
})
