/**
 * Message analysis (Analyze.ts: MIME parse, authenticity, score, reply text) in a worker thread, so
 * neither a large message nor an adversarial one (a 50,000-address header, 10,000 MIME parts, a 5 MB
 * header) holds the service's event loop: SMTP, HTTP and deliveries keep their latency while such a
 * message is parsed. Mail of a few kilobytes and more goes there too: the analysis of a 10 KB
 * message is about 1.5 ms of CPU (the reply text's parse most of it, and it grows with the text),
 * and on the main thread it held up everything else the process does. Handed over, ingestion of
 * 10 KB messages accepted 10% more mail per second where a core had room (with indexing on, two
 * cores were already full and nothing changed), for about 90 MB more RSS, the worker's own copy
 * of the parsers. Below `IN_THREAD_BYTES` handing over cost more than it saved (1.3 KB messages end
 * to end: 129-134 against 140-141 msgs/s), so small mail stays on the main thread.
 *
 * The message travels in shared memory (a SharedArrayBuffer-backed Buffer is passed, not copied).
 * Each worker takes several messages at once (most of an analysis is waiting for DNS). A worker
 * that does not answer within the parse timeout plus the DNS budget is stuck on that message: it is
 * terminated and replaced, that message is stored quarantined with `parse_error`, and the other
 * messages it held run again.
 */
import { Effect } from "effect"
import { Worker } from "node:worker_threads"
import { type Analysis, analyze, PARSE_TIMEOUT_MS, unparsed } from "./Analyze.js"
import type { AuthCheckOptions } from "./Authenticity.js"
import { rememberReplyText } from "../mail/ReplyText.js"

const STUCK_AFTER_MS = PARSE_TIMEOUT_MS + 3_000
const TEMP_AUTH = { spf: "temperror", dkim: "temperror", dmarc: "temperror" } as const

interface Pending {
  readonly id: number
  readonly raw: Buffer
  readonly auth: AuthCheckOptions | null
  readonly resolve: (a: Analysis) => void
  timer: NodeJS.Timeout | undefined
  retried: boolean
}

interface Slot {
  readonly worker: Worker
  /** Loaded and listening: a worker's start (compiling and loading its modules) is not its answer time. */
  ready: boolean
  readonly pending: Map<number, Pending>
}

/** The message in shared memory (copied once if it is not there already). */
export const shared = (raw: Buffer): Buffer => {
  if (raw.buffer instanceof SharedArrayBuffer) return raw
  const out = Buffer.from(new SharedArrayBuffer(raw.length))
  raw.copy(out)
  return out
}

/** Messages up to this size are analysed on the main thread (see above). */
const IN_THREAD_BYTES = 4 * 1024

/**
 * One worker by default: each holds its own copy of mailparser, mailauth and the reply parser (about
 * 90 MB of RSS), and one keeps up with what a process's main thread can store (about 1.5 ms per
 * 10 KB message: several hundred a second).
 */
export const makeAnalyzePool = (size = 1) => {
  const entry = new URL("./AnalyzeWorker.cjs", import.meta.url)
  let nextId = 0
  let closed = false

  const spawn = (): Slot => {
    // Not the parent's --import tsx: AnalyzeWorker.cjs loads tsx itself, in its own thread. The
    // old-generation limit turns a message that would exhaust memory into a quarantined one; a
    // small young generation keeps the idle worker's RSS down.
    const worker = new Worker(entry, { execArgv: [], resourceLimits: { maxOldGenerationSizeMb: 384, maxYoungGenerationSizeMb: 8 } })
    const s: Slot = { worker, ready: false, pending: new Map() }
    worker.on("message", (m: { ready?: true; id: number; analysis?: Analysis; error?: string }) => {
      if (m.ready === true) {
        s.ready = true
        for (const job of s.pending.values()) watch(s, job)
        return
      }
      const job = s.pending.get(m.id)
      if (job === undefined) return
      s.pending.delete(m.id)
      if (s.pending.size === 0) worker.unref()
      clearTimeout(job.timer)
      if (m.analysis?.replyText !== undefined) rememberReplyText(m.analysis.parsed, m.analysis.replyText)
      job.resolve(m.analysis ?? unparsed(job.raw, m.error ?? "analysis failed", TEMP_AUTH))
    })
    const lost = (why: string) => {
      const at = slots.indexOf(s)
      if (at < 0) return
      // Replaced on demand by the next message (a worker that cannot start is not restarted in a loop).
      slots.splice(at, 1)
      const jobs = [...s.pending.values()]
      s.pending.clear()
      for (const job of jobs) {
        clearTimeout(job.timer)
        if (closed || job.retried) job.resolve(unparsed(job.raw, why, TEMP_AUTH))
        else {
          job.retried = true
          dispatch(job)
        }
      }
    }
    worker.on("error", (e) => lost(`analysis worker failed: ${e.message}`))
    worker.on("exit", () => lost("analysis worker exited"))
    worker.unref()
    return s
  }
  // Started with the first message that needs one: a service that never receives a large message
  // never pays for a worker.
  const slots: Array<Slot> = []

  const watch = (slot: Slot, job: Pending) => {
    job.timer = setTimeout(() => {
      // Stuck on this message: it is quarantined, the worker replaced, its other messages re-run.
      slot.pending.delete(job.id)
      if (slot.pending.size === 0) slot.worker.unref()
      job.resolve(unparsed(job.raw, `MIME parsing timed out after ${PARSE_TIMEOUT_MS} ms`, TEMP_AUTH))
      void slot.worker.terminate()
    }, STUCK_AFTER_MS)
  }

  const dispatch = (job: Pending) => {
    while (slots.length < size) slots.push(spawn())
    const slot = slots.reduce((a, b) => (b.pending.size < a.pending.size ? b : a))
    slot.pending.set(job.id, job)
    // An idle worker does not keep the process alive; one with work does.
    slot.worker.ref()
    // Messages posted before the worker listens wait in its port.
    if (slot.ready) watch(slot, job)
    slot.worker.postMessage({ id: job.id, raw: shared(job.raw), auth: job.auth })
  }

  return {
    /** A large `raw` should live in shared memory (Spool.ts puts it there), or it is copied once. */
    analyze: (raw: Buffer, auth: AuthCheckOptions | null): Promise<Analysis> =>
      raw.length <= IN_THREAD_BYTES ? analyze(raw, auth) : new Promise<Analysis>((resolve) => {
        // A message finishing while the service stops is still analysed, here.
        if (closed) return resolve(analyze(raw, auth))
        dispatch({ id: nextId++, raw, auth, resolve, timer: undefined, retried: false })
      }),
    close: () => {
      closed = true
      return Promise.all(slots.map((s) => s.worker.terminate())).then(() => undefined)
    }
  }
}

export type AnalyzePool = ReturnType<typeof makeAnalyzePool>

/**
 * The process's one analysis pool, shared by the SMTP listener, local delivery and wake firings
 * (each layer provides `MessageAnalysis.Default`, built once per service), so they never start a
 * worker each.
 */
export class MessageAnalysis extends Effect.Service<MessageAnalysis>()("mailroom/inbound/MessageAnalysis", {
  scoped: Effect.acquireRelease(Effect.sync(() => makeAnalyzePool()), (p) => Effect.promise(() => p.close()))
}) {}
