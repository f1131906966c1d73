/**
 * Several processes serving one service (`WORKERS`, default one per core), by node:cluster: the
 * primary accepts on the HTTP and SMTP ports and hands each connection to a worker, and every worker
 * runs the whole service (Server.ts) over the same PostgreSQL database. What the workers share lives
 * there: rate-limit windows and idempotency records are rows, deliveries and background jobs are
 * claimed under leases (SKIP LOCKED), and what one process must hear of another's work travels by
 * NOTIFY (listen and event-log wake-ups, the dispatcher's wake-up, credential-cache invalidations).
 *
 * Embedded PGlite belongs to one process (Database.ts), so without DATABASE_URL one process runs
 * whatever `WORKERS` says, the shape of a single process unchanged: no primary at all.
 *
 * The primary only supervises; it opens no database:
 * - a worker that dies is started again in its slot after a delay doubling from 0.5 s to 30 s (back
 *   to 0.5 s once the worker had run a minute), each time logged;
 * - worker 1 starts alone and the others once it listens: what a first start makes once (the key
 *   file in DATA_DIR, migrations, the managed domain's DKIM key) is made by one process, not raced;
 * - until worker 1 listens, a worker that exits ends the start with its exit code (a bad database
 *   URL or a taken port fails the start as it does in one process, rather than restarting forever);
 * - SIGTERM or SIGINT: every worker is asked to drain, by the same stop as one process's SIGTERM
 *   (listeners close, deliveries in flight finish, SHUTDOWN_TIMEOUT bounds it in each), and the
 *   primary exits once all have: 0 when every worker exited 0, else 1. A second signal, or workers
 *   still running well past SHUTDOWN_TIMEOUT, kills them at once.
 *
 * Worker slots are numbered from 1 (`MAILROOM_WORKER`); slot 1 also runs what one process does for
 * all (the embedding backlog). The built-in embedding model runs once, in a process of the primary's
 * that every worker reaches through it (search/ModelRelay.ts, wired in main.ts).
 */
import cluster, { type Worker } from "node:cluster"
import { Duration, Effect, Option, type Redacted } from "effect"

const SLOT_ENV = "MAILROOM_WORKER"
const COUNT_ENV = "MAILROOM_WORKERS"
/** The primary's request to a worker to stop as on SIGTERM. */
export const DRAIN_MESSAGE = "mailroom:drain"

const FIRST_DELAY_MS = 500
const MAX_DELAY_MS = 30_000
const STABLE_MS = 60_000
/** How long past SHUTDOWN_TIMEOUT the primary waits for workers (which bound themselves) before killing them. */
const KILL_GRACE_MS = 5_000

export interface WorkerRole {
  /** 1 to `count`; a restarted worker keeps its slot. */
  readonly slot: number
  readonly count: number
}

/** This process's slot when it is a worker of the primary; undefined for a lone process or the primary. */
export const workerRole = (): WorkerRole | undefined => {
  if (!cluster.isWorker) return undefined
  const slot = Number(process.env[SLOT_ENV])
  const count = Number(process.env[COUNT_ENV])
  return Number.isInteger(slot) && slot >= 1 ? { slot, count: Number.isInteger(count) ? count : slot } : undefined
}

/** Processes to run: `WORKERS`, except on the embedded database; `note` says why when fewer. */
export const workerCount = (
  config: { readonly workers: number; readonly databaseUrl: Option.Option<Redacted.Redacted<string>> }
): { readonly count: number; readonly note: string | undefined } =>
  Option.isNone(config.databaseUrl) && config.workers > 1
    ? {
      count: 1,
      note: `running one process, not WORKERS=${config.workers}: the embedded database (PGlite) belongs to one process; ` +
        "set DATABASE_URL (PostgreSQL) to run several"
    }
    : { count: config.workers, note: undefined }

export interface SuperviseOptions {
  readonly count: number
  readonly shutdownTimeout: Duration.Duration
  readonly log: (level: "info" | "warning" | "error", message: string) => void
}

interface Slot {
  worker: Worker | undefined
  started: number
  nextDelay: number
  timer: ReturnType<typeof setTimeout> | undefined
}

/**
 * Runs the primary: forks `count` workers and supervises them until they have all stopped; the exit
 * code. Uninterruptible: a signal is handled here (the drain), not by interrupting the fiber.
 */
export const supervise = (options: SuperviseOptions) =>
  Effect.uninterruptible(Effect.async<number>((resume) => {
    const { count, log } = options
    const slots = new Map<number, Slot>()
    let listening = false
    let stopping = false
    let stopCode = 0
    let done = false
    let killTimer: ReturnType<typeof setTimeout> | undefined

    const live = () => [...slots.values()].flatMap((s) => (s.worker === undefined ? [] : [s.worker]))

    const finish = (code: number) => {
      if (done) return
      done = true
      process.off("SIGTERM", onSignal)
      process.off("SIGINT", onSignal)
      if (killTimer !== undefined) clearTimeout(killTimer)
      resume(Effect.succeed(code))
    }

    const fork = (slot: number) => {
      const worker = cluster.fork({ [SLOT_ENV]: String(slot), [COUNT_ENV]: String(count) })
      const state = slots.get(slot)!
      state.worker = worker
      state.started = Date.now()
      worker.once("listening", () => {
        if (listening) return
        listening = true
        for (let other = 2; other <= count; other++) if (!stopping) fork(other)
      })
      worker.once("exit", (code, signal) => onExit(slot, worker, code, signal))
    }

    const drain = (worker: Worker) => {
      try {
        if (worker.isConnected()) worker.send(DRAIN_MESSAGE)
        else worker.process.kill("SIGTERM")
      } catch {
        worker.process.kill("SIGTERM")
      }
    }

    const stop = (code: number) => {
      stopping = true
      stopCode = code
      for (const s of slots.values()) {
        if (s.timer !== undefined) clearTimeout(s.timer)
        s.timer = undefined
      }
      const workers = live()
      if (workers.length === 0) return finish(stopCode)
      workers.forEach(drain)
      killTimer = setTimeout(() => {
        log("error", `workers still running ${KILL_GRACE_MS} ms past SHUTDOWN_TIMEOUT; killing them`)
        live().forEach((w) => w.process.kill("SIGKILL"))
        finish(1)
      }, Duration.toMillis(options.shutdownTimeout) + KILL_GRACE_MS)
    }

    const onExit = (slot: number, worker: Worker, code: number | null, signal: string | null) => {
      const state = slots.get(slot)!
      if (state.worker === worker) state.worker = undefined
      const how = signal !== null ? `signal ${signal}` : `code ${code}`
      if (stopping) {
        if (code !== 0) stopCode = 1
        if (live().length === 0) finish(stopCode)
        return
      }
      if (!listening) {
        // Its own error is on stderr already (workers share the primary's).
        log("error", `worker ${slot} (pid ${worker.process.pid}) exited with ${how} while starting; stopping`)
        return stop(code !== null && code !== 0 ? code : 1)
      }
      const delay = Date.now() - state.started >= STABLE_MS ? FIRST_DELAY_MS : state.nextDelay
      state.nextDelay = Math.min(delay * 2, MAX_DELAY_MS)
      log("warning", `worker ${slot} (pid ${worker.process.pid}) exited with ${how}; starting it again in ${delay} ms`)
      state.timer = setTimeout(() => {
        state.timer = undefined
        if (!stopping) fork(slot)
      }, delay)
    }

    function onSignal(signal: NodeJS.Signals) {
      if (stopping) {
        log("warning", `${signal} again: killing the workers`)
        live().forEach((w) => w.process.kill("SIGKILL"))
        return finish(1)
      }
      log("info", `${signal}: draining ${live().length} workers`)
      stop(0)
    }
    process.on("SIGTERM", onSignal)
    process.on("SIGINT", onSignal)

    log("info", `starting ${count} workers`)
    for (let slot = 1; slot <= count; slot++) slots.set(slot, { worker: undefined, started: 0, nextDelay: FIRST_DELAY_MS, timer: undefined })
    fork(1)
  }))
