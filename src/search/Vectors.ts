/**
 * Exact nearest neighbours over an organization's vectors, held in memory.
 *
 * Each process keeps, per organization and model, every vector in one growable Float32Array and
 * reads from the database only what is newer than what it holds (`seq`), before each search: the
 * cache stays current whichever process embedded the message, at the cost of one indexed query that
 * usually returns nothing. Ranking is a dot product per vector (they are unit vectors): ~15 ms for
 * 20,000 × 512. Vectors of deleted messages stay until the organization is evicted; the search drops
 * them when it reads the hits back. Past `MAX_FLOATS` in all, the least recently searched
 * organizations are evicted and reloaded when next searched.
 *
 * For mailboxes in the millions an index-backed path (pgvector's HNSW where the server has it) would
 * replace the scan; the interface (`nearest`) stays the same.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/** 256 MB of float32 across organizations. */
const MAX_FLOATS = 64 * 1024 * 1024
const INITIAL_ROWS = 1024

interface OrgVectors {
  dims: number
  rows: number
  data: Float32Array
  ids: Array<string>
  row: Map<string, number>
  seq: string
  used: number
}

export interface Neighbour {
  readonly id: string
  readonly score: number
}

export const toBytes = (v: Float32Array): Buffer => {
  const out = Buffer.alloc(v.length * 4)
  for (let i = 0; i < v.length; i++) out.writeFloatLE(v[i]!, i * 4)
  return out
}

const fromBytes = (b: Uint8Array, into: Float32Array, at: number) => {
  const view = new DataView(b.buffer, b.byteOffset, b.byteLength)
  for (let i = 0; i < b.byteLength / 4; i++) into[at + i] = view.getFloat32(i * 4, true)
}

/** The `k` best of `scores` (with their index), best first; ties by index for determinism. */
export const topK = (scores: Float32Array, count: number, k: number, allowed?: (i: number) => boolean): Array<[number, number]> => {
  const best: Array<[number, number]> = []
  for (let i = 0; i < count; i++) {
    if (allowed !== undefined && !allowed(i)) continue
    const s = scores[i]!
    if (best.length === k && s <= best[k - 1]![1]) continue
    let at = best.length
    while (at > 0 && best[at - 1]![1] < s) at--
    best.splice(at, 0, [i, s])
    if (best.length > k) best.pop()
  }
  return best
}

export class VectorIndex extends Effect.Service<VectorIndex>()("mailroom/VectorIndex", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const cache = new Map<string, OrgVectors>()
    let clock = 0

    const evict = () => {
      let total = 0
      for (const v of cache.values()) total += v.data.length
      const byAge = [...cache.entries()].sort((a, b) => a[1].used - b[1].used)
      for (const [key, v] of byAge) {
        if (total <= MAX_FLOATS || cache.size <= 1) break
        cache.delete(key)
        total -= v.data.length
      }
    }

    /** Brings the organization's vectors up to date with the database. */
    const refresh = (orgId: string, model: string) =>
      Effect.gen(function*() {
        const key = `${orgId}\n${model}`
        const held = cache.get(key)
        const rows = yield* sql<{ id: string; dims: number; vector: Uint8Array; seq: string }>`
          SELECT id, dims, vector, seq::text AS seq FROM search_embeddings
           WHERE org_id = ${orgId} AND model = ${model} AND seq > ${held?.seq ?? "0"}::bigint ORDER BY seq`
        const first = rows[0]
        let v = held
        if (v === undefined) {
          if (first === undefined) return undefined
          v = { dims: first.dims, rows: 0, data: new Float32Array(Math.max(INITIAL_ROWS, rows.length) * first.dims), ids: [], row: new Map(), seq: "0", used: 0 }
          cache.set(key, v)
        }
        for (const r of rows) {
          if (r.dims !== v.dims) continue
          let at = v.row.get(r.id)
          if (at === undefined) {
            if ((v.rows + 1) * v.dims > v.data.length) {
              const grown = new Float32Array(v.data.length * 2)
              grown.set(v.data)
              v.data = grown
            }
            at = v.rows++
            v.ids.push(r.id)
            v.row.set(r.id, at)
          }
          fromBytes(r.vector, v.data, at * v.dims)
          v.seq = r.seq
        }
        v.used = ++clock
        if (rows.length > 0 && held === undefined) evict()
        return v
      })

    /**
     * The `k` vectors of the organization closest to `query`, restricted to `only` when given
     * (the ids a filter allows).
     */
    const nearest = (orgId: string, model: string, query: Float32Array, k: number, only?: ReadonlySet<string>) =>
      Effect.map(refresh(orgId, model), (v): ReadonlyArray<Neighbour> => {
        if (v === undefined || v.dims !== query.length) return []
        const scores = new Float32Array(v.rows)
        const d = v.dims
        const data = v.data
        for (let r = 0; r < v.rows; r++) {
          if (only !== undefined && !only.has(v.ids[r]!)) {
            scores[r] = -Infinity
            continue
          }
          let s = 0
          const base = r * d
          for (let j = 0; j < d; j++) s += data[base + j]! * query[j]!
          scores[r] = s
        }
        const allowed = only === undefined ? undefined : (i: number) => only.has(v.ids[i]!)
        return topK(scores, v.rows, k, allowed).map(([i, s]) => ({ id: v.ids[i]!, score: s }))
      })

    return { nearest, refresh } as const
  })
}) {}
