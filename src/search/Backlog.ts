/**
 * The embedding backlog: search documents without an embedding for the configured model, embedded
 * off the ingest path. A pending document is a row of `search_backlog` (migration 0196), written with
 * the document and deleted when its vector is stored, so the document itself is written once. Every process polls and claims small batches with a lease (SKIP LOCKED), so
 * several processes share the work and a process that dies leaves its lease to expire. A batch the
 * embedder fails on is released with a growing delay (capped) and tried again, for as long as it
 * takes: mail is never refused or delayed for it, it is only found lexically meanwhile.
 *
 * It is background work and yields to the foreground: the model runs on a core of its own (its own
 * process, search/ModelProcess.ts) that ingestion, deliveries, wakes and sends also need, so after each batch the loop rests
 * as long as the batch took (at most half a core over time), and it claims nothing while this
 * process's event loop has been busy (utilization over `busyAbove` since the last look). Measured
 * with 10,000 wakes due in one minute on two cores: the backlog running flat out made the firings
 * 25 times later than with indexing off.
 *
 * Nor does it claim while the machine's cores are nearly all busy (idle under `idleBelow` since the
 * last look): on two cores shared with PostgreSQL, half a core of model time during a mail burst
 * cost ingestion a tenth to a quarter of its throughput, and its statements half of PostgreSQL's
 * extra CPU per email. So a burst is taken at full speed and embedded once it is over; a machine
 * that never rests still gets a batch every `maxWaitMs`, so semantic search is never left behind
 * for good (and lexical search finds every message from its first statement).
 */
import { SqlClient } from "@effect/sql"
import { Clock, Duration, Effect, Layer, Option, Schema } from "effect"
import { cpus } from "node:os"
import { performance } from "node:perf_hooks"
import { runJobs } from "../platform/JobRunner.js"
import { allRows } from "../platform/Rows.js"
import { backoff, retryAt } from "../platform/RetryPolicy.js"
import { embeddingText } from "../mail/SearchDocument.js"
import { Embedder } from "./Embedder.js"
import { toBytes } from "./Vectors.js"

export interface BacklogOptions {
  /** How often to look for work when there was none (default 500 ms). */
  readonly pollMs?: number
  /** Documents per embedding call (default 16: small, so a query waits little behind a batch). */
  readonly batch?: number
  /** Longest delay between two tries of a failing batch (default 5 minutes). */
  readonly maxRetryDelayMs?: number
  /** Share of the time the model may run for the backlog (default 0.5; 1 runs it flat out). */
  readonly dutyCycle?: number
  /** Event-loop utilization above which no batch is claimed (default 0.5; 1 never waits for it). */
  readonly busyAbove?: number
  /** Share of the machine's CPU time left idle below which no batch is claimed (default 0.1; 0 never waits for it). */
  readonly idleBelow?: number
  /** Longest wait for a quiet moment before a batch is claimed anyway (default 30 s). */
  readonly maxWaitMs?: number
  /** Where the machine's CPU times are read (default the operating system's; tests give their own). */
  readonly cpuTimes?: () => CpuTimes
}

export interface CpuTimes {
  readonly idle: number
  readonly total: number
}

/** The machine's CPU time so far, idle and in all, summed over its cores. */
export const machineCpuTimes = (): CpuTimes => {
  let idle = 0
  let total = 0
  for (const c of cpus()) {
    idle += c.times.idle
    total += c.times.user + c.times.nice + c.times.sys + c.times.idle + c.times.irq
  }
  return { idle, total }
}

/** The idle share of the machine's CPU time between two readings; 1 when no time passed. */
export const idleShare = (before: CpuTimes, after: CpuTimes): number => {
  const total = after.total - before.total
  return total <= 0 ? 1 : Math.max(0, Math.min(1, (after.idle - before.idle) / total))
}

const LEASE = "60 seconds"


/** A claimed document: what its embedding is computed from. */
const Doc = Schema.Struct({
  id: Schema.String,
  org_id: Schema.String,
  subject: Schema.NullOr(Schema.String),
  body: Schema.NullOr(Schema.String),
  embed_attempts: Schema.Number,
  lease: Schema.String
})

export const EmbeddingBacklogLive = (options: BacklogOptions = {}) =>
  Layer.scopedDiscard(Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const embedder = yield* Embedder
    const pollMs = options.pollMs ?? 500
    const batch = options.batch ?? 16
    // A failing batch is tried again 1 s, 2 s, 4 s … later, at most `maxRetryDelayMs` apart, for as long as it takes.
    const policy = backoff({ base: "1 second", max: Duration.millis(options.maxRetryDelayMs ?? 300_000) })
    const dutyCycle = Math.min(1, Math.max(0.05, options.dutyCycle ?? 0.5))
    const busyAbove = options.busyAbove ?? 0.5
    const idleBelow = options.idleBelow ?? 0.1
    const maxWaitMs = options.maxWaitMs ?? 30_000

    // Vectors of another model cannot be compared with this one's: their documents are embedded again.
    yield* sql`INSERT INTO search_backlog (id)
               SELECT id FROM search_embeddings WHERE model <> ${embedder.model}
               ON CONFLICT (id) DO NOTHING`.pipe(
      Effect.catchAllCause((cause) => Effect.logWarning("embedding backlog: could not requeue vectors of another model", cause))
    )

    // The lease is returned as text: it names this claim exactly (to the microsecond), so a batch
    // finishes only the documents it still holds. A document whose content was discarded while the
    // model ran is queued again with its lease cleared, and the vector of its old body is not written.
    const claim = sql`
      UPDATE search_backlog b SET lease_until = now() + ${LEASE}::interval, attempts = b.attempts + 1
        FROM search_documents d
       WHERE d.id = b.id AND b.id IN (
         SELECT id FROM search_backlog
          WHERE next_at <= now() AND (lease_until IS NULL OR lease_until < now())
          ORDER BY next_at LIMIT ${batch} FOR UPDATE SKIP LOCKED)
      RETURNING d.id, d.org_id, d.subject, left(d.body, 2000) AS body, b.attempts AS embed_attempts, b.lease_until::text AS lease`.pipe(
      allRows(Doc, "embedding claim")
    )

    type Doc = typeof Doc.Type

    const embedBatch = (docs: ReadonlyArray<Doc>) =>
      Effect.gen(function*() {
        // One claim, one lease.
        const lease = docs[0]!.lease
        const outcome = yield* Effect.either(embedder.embed(docs.map((d) => embeddingText(d.subject, d.body)), { priority: "backlog" }))
        if (outcome._tag === "Left") {
          const attempts = Math.max(...docs.map((d) => d.embed_attempts))
          const now = yield* Clock.currentTimeMillis
          const at = Option.getOrElse(yield* retryAt(policy, attempts, now), () => new Date(now))
          yield* Effect.logWarning(`embedding backlog: ${docs.length} documents not embedded (${outcome.left.message}); retried at ${at.toISOString()}`)
          yield* sql`UPDATE search_backlog SET lease_until = NULL, error = ${outcome.left.message.slice(0, 500)}, next_at = ${at}
                      WHERE id IN ${sql.in(docs.map((d) => d.id))} AND lease_until = ${lease}::timestamptz`
          return
        }
        const rows = docs.map((d, i) => ({
          id: d.id,
          org_id: d.org_id,
          model: embedder.model,
          dims: outcome.right[i]!.length,
          vector: toBytes(outcome.right[i]!)
        }))
        // Only the documents still held under this lease get their vector (a deleted document's
        // backlog row went with it).
        yield* sql`
          WITH done AS (DELETE FROM search_backlog WHERE id IN ${sql.in(rows.map((r) => r.id))} AND lease_until = ${lease}::timestamptz
                        RETURNING id)
          INSERT INTO search_embeddings (id, org_id, model, dims, vector)
          SELECT x.id, x.org_id, x.model, x.dims, x.vector
            FROM (VALUES ${sql.join(", ", false)(rows.map((r) => sql`(${r.id}::uuid, ${r.org_id}::uuid, ${r.model}, ${r.dims}::int, ${r.vector}::bytea)`))}) AS x(id, org_id, model, dims, vector)
           WHERE x.id IN (SELECT id FROM done)
          ON CONFLICT (id) DO UPDATE SET model = excluded.model, dims = excluded.dims, vector = excluded.vector,
            seq = nextval(pg_get_serial_sequence('search_embeddings', 'seq'))`
      })

    let lastLook = performance.eventLoopUtilization()
    /** This process's event-loop utilization since the last look (0..1). */
    const utilization = () => {
      const now = performance.eventLoopUtilization()
      const since = performance.eventLoopUtilization(now, lastLook)
      lastLook = now
      return since.utilization
    }

    const cpuTimes = options.cpuTimes ?? machineCpuTimes
    let lastCpu = cpuTimes()
    /** The machine's idle share since the last look (0..1). */
    const machineIdle = () => {
      const now = cpuTimes()
      const share = idleShare(lastCpu, now)
      lastCpu = now
      return share
    }
    // When the backlog last got to claim (or started): what `maxWaitMs` counts from.
    let lastClaim = performance.now()
    const ready = Effect.sync(() => {
      // Both windows restart at every look, busy or not.
      const processBusy = busyAbove < 1 && utilization() > busyAbove
      const machineBusy = idleBelow > 0 && machineIdle() < idleBelow
      const now = performance.now()
      if ((processBusy || machineBusy) && now - lastClaim < maxWaitMs) return false
      lastClaim = now
      return true
    })

    // One batch at a time; the item is the batch.
    yield* runJobs<ReadonlyArray<Doc>, never>({
      name: "embedding backlog",
      concurrency: 1,
      maxClaim: 1,
      pollMs,
      claim: () => Effect.map(claim, (docs) => (docs.length === 0 ? [] : [docs])),
      run: embedBatch,
      ready,
      // The model may run for the backlog `dutyCycle` of the time: rest as long as the batch took, scaled.
      restAfter: (took) => Duration.millis(dutyCycle < 1 ? took * (1 / dutyCycle - 1) : 0)
    })
  }))
