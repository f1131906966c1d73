/**
 * The in-process embedding model in one worker thread (ModelWorker.cjs), started on first use (a
 * service that never searches or embeds never loads it: ~260 MB). One request is in the worker at a
 * time and queries go before backlog batches, so a search waits for at most one small batch.
 * A worker that dies is replaced by the next request.
 */
import { Effect } from "effect"
import { Worker } from "node:worker_threads"
import { EmbedderFailed } from "./EmbedderFailed.js"

export const LOCAL_MODEL_NAME = "universal-sentence-encoder-lite-en-512"

interface Job {
  readonly texts: ReadonlyArray<string>
  readonly resolve: (v: ReadonlyArray<Float32Array>) => void
  readonly reject: (e: Error) => void
  canceled: boolean
}

export const makeLocalModel = Effect.gen(function*() {
  let worker: Worker | undefined
  let busy: { id: number; job: Job } | undefined
  let nextId = 0
  const queries: Array<Job> = []
  const backlog: Array<Job> = []

  const fail = (e: Error) => {
    const current = busy
    busy = undefined
    worker = undefined
    current?.job.reject(e)
    pump()
  }

  const spawn = () => {
    const w = new Worker(new URL("./ModelWorker.cjs", import.meta.url), { execArgv: [] })
    w.on("message", (m: { ready?: boolean; error?: string; id?: number; vectors?: Array<Float32Array> }) => {
      if (m.ready === false) {
        void w.terminate()
        return fail(new Error(`the embedding model did not load: ${m.error}`))
      }
      if (m.id === undefined || busy === undefined || busy.id !== m.id) return
      const { job } = busy
      busy = undefined
      if (m.error !== undefined) job.reject(new Error(m.error))
      else job.resolve(m.vectors ?? [])
      if (queries.length === 0 && backlog.length === 0) w.unref()
      pump()
    })
    w.on("error", (e) => { if (worker === w) fail(e) })
    w.on("exit", (code) => { if (worker === w) fail(new Error(`the embedding worker exited (${code})`)) })
    return w
  }

  const pump = () => {
    if (busy !== undefined) return
    let job: Job | undefined
    do job = queries.shift() ?? backlog.shift()
    while (job !== undefined && job.canceled)
    if (job === undefined) return
    worker ??= spawn()
    worker.ref()
    busy = { id: nextId++, job }
    worker.postMessage({ id: busy.id, texts: job.texts })
  }

  yield* Effect.addFinalizer(() => Effect.promise(async () => { await worker?.terminate() }))

  const embed = (texts: ReadonlyArray<string>, options?: { readonly priority?: "query" | "backlog" }): Effect.Effect<ReadonlyArray<Float32Array>, EmbedderFailed> =>
    texts.length === 0 ? Effect.succeed([]) : Effect.async<ReadonlyArray<Float32Array>, EmbedderFailed>((resume) => {
      const job: Job = {
        texts,
        canceled: false,
        resolve: (v) => resume(Effect.succeed(v)),
        reject: (e) => resume(Effect.fail(new EmbedderFailed({ message: e.message })))
      }
      ;(options?.priority === "backlog" ? backlog : queries).push(job)
      pump()
      // A search that gives up leaves its job: dropped if not started, its answer ignored if it was.
      return Effect.sync(() => { job.canceled = true })
    })

  return { embed } as const
})
