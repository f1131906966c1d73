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
 * Loading a large mailbox's vectors the first time takes longer than a search may (50,000 × 512
 * floats is 100 MB from the database). So the load is a daemon shared by every search of that
 * organization: a search that times out leaves it running, the next search joins it or finds the
 * cache warm, and it reads in chunks of `CHUNK` rows, each applied as it arrives (other queries,
 * PGlite's one connection included, get their turn between chunks).
 *
 * For mailboxes in the millions an index-backed path (pgvector's HNSW where the server has it) would
 * replace the scan; the interface (`nearest`) stays the same.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Fiber } from "effect"
import { endianness } from "node:os"

/** 256 MB of float32 across organizations. */
const MAX_FLOATS = 64 * 1024 * 1024
const INITIAL_ROWS = 1024
/** Rows per query of a load. */
const CHUNK = 5000
const LITTLE_ENDIAN = endianness() === "LE"

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
  if (LITTLE_ENDIAN) {
    // Stored little-endian: on such a machine the bytes are the floats (copied once to align them).
    const aligned = b.byteOffset % 4 === 0 ? b : b.slice()
    into.set(new Float32Array(aligned.buffer, aligned.byteOffset, aligned.byteLength >> 2), at)
    return
  }
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
  scoped: Effect.gen(function*() {
    // Loads run in the service's scope: a search that stops waiting leaves the shared load to finish
    // for the others, and the service's end interrupts it.
    const scope = yield* Effect.scope
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

    /** Reads one chunk newer than what the cache holds and applies it; how many rows it read. */
    const loadChunk = (orgId: string, model: string) =>
      Effect.gen(function*() {
        const key = `${orgId}\n${model}`
        const held = cache.get(key)
        // Ordered by the column, not by the text alias of the same name ("10000" sorts before "9999").
        const rows = yield* sql<{ id: string; dims: number; vector: Uint8Array; seq: string }>`
          SELECT id, dims, vector, seq::text AS seq FROM search_embeddings
           WHERE org_id = ${orgId} AND model = ${model} AND seq > ${held?.seq ?? "0"}::bigint ORDER BY search_embeddings.seq LIMIT ${CHUNK}`
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
        return rows.length
      })

    const loading = new Map<string, Fiber.RuntimeFiber<OrgVectors | undefined, unknown>>()

    /** Brings the organization's vectors up to date with the database (one shared load at a time). */
    const refresh = (orgId: string, model: string): Effect.Effect<OrgVectors | undefined> =>
      Effect.suspend(() => {
        const key = `${orgId}\n${model}`
        const running = loading.get(key)
        if (running !== undefined) return Fiber.join(running)
        const load = Effect.gen(function*() {
          // Between chunks a timer turn: PGlite answers in microtasks, which would otherwise run the
          // whole load before any timer (a search's time budget included) gets to fire.
          while ((yield* loadChunk(orgId, model)) === CHUNK) yield* Effect.sleep("1 millis")
          return cache.get(key)
        })
        return Effect.forkIn(load, scope).pipe(
          Effect.tap((fiber) =>
            Effect.sync(() => {
              loading.set(key, fiber)
              // Called at once if the load is already over: a finished load is never joined again.
              fiber.addObserver(() => { if (loading.get(key) === fiber) loading.delete(key) })
            })),
          Effect.flatMap(Fiber.join)
        )
      }).pipe(Effect.orDie)

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

    /** How many vectors of the organization this process holds (0 when none are loaded). */
    const held = (orgId: string, model: string) => Effect.sync(() => cache.get(`${orgId}\n${model}`)?.rows ?? 0)

    return { nearest, refresh, held } as const
  })
}) {}
