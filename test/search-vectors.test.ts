/**
 * The in-memory vector index over a mailbox larger than one load chunk: a search that gives up while
 * the vectors load leaves the load running (the next search finds them), and what is loaded in
 * chunks ranks exactly as a brute-force scan of the stored vectors does.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { randomUUID } from "node:crypto"
import { Provisioning } from "../src/identity/Provisioning.js"
import { toBytes, VectorIndex } from "../src/search/Vectors.js"
import { testDatabase } from "./support/harness.js"

const DIMS = 32
const ROWS = 12_000
const MODEL = "test-model-32"

/** A deterministic unit vector per row (a small linear congruential generator). */
const vectorOf = (seed: number) => {
  const v = new Float32Array(DIMS)
  let x = seed * 2654435761 % 4294967296
  let norm = 0
  for (let i = 0; i < DIMS; i++) {
    x = (1103515245 * x + 12345) % 2147483648
    v[i] = x / 2147483648 - 0.5
    norm += v[i]! * v[i]!
  }
  for (let i = 0; i < DIMS; i++) v[i]! /= Math.sqrt(norm)
  return v
}

const Env = Layer.mergeAll(VectorIndex.Default, Provisioning.Default).pipe(Layer.provideMerge(testDatabase()))

layer(Env, { timeout: 120_000, excludeTestServices: true })("vector index", (it) => {
  describe("a mailbox larger than a load chunk", () => {
    it.effect("a search that times out leaves the load running; ranking equals a brute-force scan", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const org = yield* (yield* Provisioning).createOrganization({ name: "Vectors", plan: "developer" })
        const ids: Array<string> = []
        const vectors: Array<Float32Array> = []
        for (let start = 0; start < ROWS; start += 2000) {
          const docs = []
          const rows = []
          for (let i = start; i < start + 2000; i++) {
            const id = randomUUID()
            ids.push(id)
            vectors.push(vectorOf(i + 1))
            docs.push({ id, org_id: org.id, kind: "received", subject: `doc ${i}` })
            rows.push({ id, org_id: org.id, model: MODEL, dims: DIMS, vector: toBytes(vectors[i]!) })
          }
          yield* sql`INSERT INTO search_documents ${sql.insert(docs)}`
          yield* sql`INSERT INTO search_embeddings ${sql.insert(rows)}`
        }
        const index = yield* VectorIndex
        const query = vectorOf(999_999)

        // Gives up at once, as a search past its budget does; the load goes on without it.
        const first = yield* index.nearest(org.id, MODEL, query, 5).pipe(Effect.timeout("1 millis"), Effect.option)
        expect(first._tag).toBe("None")
        for (let i = 0; i < 400 && (yield* index.held(org.id, MODEL)) < ROWS; i++) yield* Effect.sleep("25 millis")
        expect(yield* index.held(org.id, MODEL)).toBe(ROWS)

        const found = yield* index.nearest(org.id, MODEL, query, 5)
        const expected = vectors
          .map((v, i) => ({ id: ids[i]!, score: v.reduce((s, x, j) => s + x * query[j]!, 0) }))
          .sort((a, b) => b.score - a.score)
          .slice(0, 5)
        expect(found.map((n) => n.id)).toEqual(expected.map((e) => e.id))
        for (let i = 0; i < 5; i++) expect(found[i]!.score).toBeCloseTo(expected[i]!.score, 5)

        // Vectors stored later are read on the next search (only what is newer).
        const late = randomUUID()
        yield* sql`INSERT INTO search_documents ${sql.insert([{ id: late, org_id: org.id, kind: "received", subject: "late" }])}`
        yield* sql`INSERT INTO search_embeddings ${sql.insert([{ id: late, org_id: org.id, model: MODEL, dims: DIMS, vector: toBytes(query) }])}`
        const again = yield* index.nearest(org.id, MODEL, query, 1)
        expect(again.map((n) => n.id)).toEqual([late])
        expect(yield* index.held(org.id, MODEL)).toBe(ROWS + 1)
      }).pipe(Effect.orDie))
  })
})
