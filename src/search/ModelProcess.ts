/**
 * The built-in embedding model in a process of its own (ModelWorker.cjs, by child_process.fork),
 * supervised here. A process rather than a worker thread: the model and its WebAssembly heap
 * (~260 MB) are then outside the service's RSS, with a figure of their own, and a model that
 * crashes or runs out of memory takes down only itself.
 *
 * - Started on first use: a service that never searches or embeds never loads it.
 * - One request is in the process at a time. Queries go before backlog batches, and the queries
 *   waiting are sent together in one message (up to `maxBatch` texts), so a burst of searches costs
 *   one round trip and one model call, and a search waits for at most one small batch.
 * - A process that exits is started again after a delay doubling from 0.5 s to 30 s (back to 0.5 s
 *   once it had run a minute), each time logged. The batch it held and the requests that arrive
 *   until it is back fail at once: a search answers without the model (hybrid falls back to lexical)
 *   rather than wait for it, and the embedding backlog, durable in the database, tries its batch
 *   again later. Nothing is lost.
 * - The process exits by itself when its parent goes (its IPC channel closes).
 */
import { type ChildProcess, fork } from "node:child_process"
import { fileURLToPath } from "node:url"

export type Priority = "query" | "backlog"

export interface ModelHostOptions {
  readonly log: (level: "info" | "warning", message: string) => void
  /** First delay before a restart (default 500 ms), doubling to `maxDelayMs` (default 30 s). */
  readonly firstDelayMs?: number
  readonly maxDelayMs?: number
  /** Run time after which a process that exits is restarted after the first delay again (default 60 s). */
  readonly stableMs?: number
  /** Most texts one message to the process carries when queries are gathered (default 64). */
  readonly maxBatch?: number
}

/** A request: its answer, and a way to give up on it (dropped if not started, its answer ignored if it was). */
export interface Pending {
  readonly promise: Promise<ReadonlyArray<Float32Array>>
  readonly cancel: () => void
}

export interface ModelHost {
  readonly embed: (texts: ReadonlyArray<string>, priority: Priority) => Pending
  /** The model process's id while one runs (benchmarks read its RSS). */
  readonly pid: () => number | undefined
  readonly close: () => Promise<void>
}

interface Job {
  readonly texts: ReadonlyArray<string>
  readonly resolve: (v: ReadonlyArray<Float32Array>) => void
  readonly reject: (e: Error) => void
  canceled: boolean
}

interface Answer {
  readonly ready?: boolean
  readonly id?: number
  readonly error?: string
  readonly vectors?: ReadonlyArray<Float32Array>
}

const ENTRY = fileURLToPath(new URL("./ModelWorker.cjs", import.meta.url))

export const startModelHost = (options: ModelHostOptions): ModelHost => {
  const firstDelay = options.firstDelayMs ?? 500
  const maxDelay = options.maxDelayMs ?? 30_000
  const stableMs = options.stableMs ?? 60_000
  const maxBatch = options.maxBatch ?? 64
  let child: ChildProcess | undefined
  let started = 0
  let nextDelay = firstDelay
  let restartTimer: ReturnType<typeof setTimeout> | undefined
  let closed = false
  let loadError: string | undefined
  let busy: { readonly id: number; readonly jobs: ReadonlyArray<Job> } | undefined
  let nextId = 0
  const queries: Array<Job> = []
  const backlog: Array<Job> = []

  const failAll = (jobs: Iterable<Job>, e: Error) => {
    for (const job of jobs) if (!job.canceled) job.reject(e)
  }
  const drainQueues = (e: Error) => {
    failAll(queries.splice(0), e)
    failAll(backlog.splice(0), e)
  }

  // An idle process does not keep a script that has finished with the model alive.
  const hold = (c: ChildProcess, on: boolean) => {
    if (on) {
      c.ref()
      c.channel?.ref()
    } else {
      c.unref()
      c.channel?.unref()
    }
  }

  const onExit = (c: ChildProcess, code: number | null, signal: string | null) => {
    if (child !== c) return
    child = undefined
    const held = busy
    busy = undefined
    const how = signal !== null ? `signal ${signal}` : `code ${code}`
    const reason = new Error(`the embedding process exited with ${how}${loadError === undefined ? "" : `: ${loadError}`}`)
    loadError = undefined
    failAll(held?.jobs ?? [], reason)
    if (closed) return drainQueues(reason)
    const delay = Date.now() - started >= stableMs ? firstDelay : nextDelay
    nextDelay = Math.min(delay * 2, maxDelay)
    options.log("warning", `${reason.message} (pid ${c.pid}); starting it again in ${delay} ms`)
    drainQueues(new Error(`the embedding process is restarting (${how})`))
    restartTimer = setTimeout(() => {
      restartTimer = undefined
      if (!closed) spawn()
    }, delay)
  }

  const onAnswer = (c: ChildProcess, m: Answer) => {
    if (m.ready === false) {
      loadError = `the embedding model did not load: ${m.error}`
      return
    }
    if (m.id === undefined || busy === undefined || busy.id !== m.id) return
    const { jobs } = busy
    busy = undefined
    if (m.error !== undefined) failAll(jobs, new Error(m.error))
    else {
      const vectors = m.vectors ?? []
      let at = 0
      for (const job of jobs) {
        const mine = vectors.slice(at, at + job.texts.length)
        at += job.texts.length
        if (job.canceled) continue
        if (mine.length === job.texts.length) job.resolve(mine)
        else job.reject(new Error(`the embedding process returned ${mine.length} vectors for ${job.texts.length} texts`))
      }
    }
    if (queries.length === 0 && backlog.length === 0) hold(c, false)
    pump()
  }

  const spawn = () => {
    // No inherited flags (a TypeScript loader, --cpu-prof): the model process is plain JavaScript.
    const c = fork(ENTRY, [], { execArgv: [], serialization: "advanced", stdio: ["ignore", "inherit", "inherit", "ipc"] })
    child = c
    started = Date.now()
    c.on("message", (m: Answer) => onAnswer(c, m))
    c.on("exit", (code, signal) => onExit(c, code, signal))
    // A failed spawn emits only "error"; a failed send or kill on a live process is followed by "exit".
    c.on("error", (e) => {
      if (c.pid === undefined) onExit(c, null, null)
      else options.log("warning", `the embedding process (pid ${c.pid}): ${e.message}`)
    })
    pump()
  }

  const next = (): Array<Job> => {
    const jobs: Array<Job> = []
    let texts = 0
    while (queries.length > 0 && (jobs.length === 0 || texts + queries[0]!.texts.length <= maxBatch)) {
      const job = queries.shift()!
      if (job.canceled) continue
      jobs.push(job)
      texts += job.texts.length
    }
    if (jobs.length > 0) return jobs
    for (let job = backlog.shift(); job !== undefined; job = backlog.shift()) if (!job.canceled) return [job]
    return []
  }

  function pump() {
    if (busy !== undefined || closed || restartTimer !== undefined) return
    if (queries.length === 0 && backlog.length === 0) return
    if (child === undefined) return spawn()
    const jobs = next()
    if (jobs.length === 0) return
    const c = child
    hold(c, true)
    busy = { id: nextId++, jobs }
    // A send on a channel that just closed fails here; the process's "exit" then fails the batch.
    c.send({ id: busy.id, texts: jobs.flatMap((j) => j.texts) }, () => {})
  }

  const embed = (texts: ReadonlyArray<string>, priority: Priority): Pending => {
    let job: Job | undefined
    const promise = new Promise<ReadonlyArray<Float32Array>>((resolve, reject) => {
      if (closed) return reject(new Error("the embedding process is stopped"))
      if (restartTimer !== undefined) return reject(new Error("the embedding process is restarting"))
      if (texts.length === 0) return resolve([])
      job = { texts, resolve, reject, canceled: false }
      ;(priority === "backlog" ? backlog : queries).push(job)
      pump()
    })
    return { promise, cancel: () => { if (job !== undefined) job.canceled = true } }
  }

  const close = async () => {
    closed = true
    if (restartTimer !== undefined) clearTimeout(restartTimer)
    restartTimer = undefined
    drainQueues(new Error("the embedding process is stopped"))
    const c = child
    if (c === undefined || c.exitCode !== null || c.signalCode !== null) return
    await new Promise<void>((resolve) => {
      const kill = setTimeout(() => c.kill("SIGKILL"), 2_000)
      c.once("exit", () => {
        clearTimeout(kill)
        resolve()
      })
      c.kill("SIGTERM")
    })
  }

  return { embed, pid: () => child?.pid, close }
}
