/**
 * The wake timers: every process polls for due wakes and claims them with a lease (SKIP LOCKED), so
 * several processes share the work and each due firing is taken by one. A firing stores its email
 * (WakeFiring, which is idempotent per due time) and then moves the wake on, fenced by the lease
 * token; a process killed in between leaves the lease to expire and another process finishes the
 * firing without a second email. Missed firings (the service was down) are due at start: one
 * firing each, then recurring wakes go on from now (Schedule.nextAfter).
 */
import { Clock, Duration, Effect, Layer } from "effect"
import { randomToken } from "../platform/Secrets.js"
import { WakeFiring } from "./Firing.js"
import { WakesRepo, type WakeRow } from "./Repo.js"
import { nextAfter } from "./Schedule.js"

export interface WakeSchedulerOptions {
  /** How often to look for due wakes when none were due (default 250 ms). */
  readonly pollMs?: number
  /** Wakes claimed per pass (default 100). */
  readonly batch?: number
  /** Firings in flight at once per process (default 16). */
  readonly concurrency?: number
}

/** A firing that could not store its email (storage full) is tried again after this. */
const RETRY_AFTER = Duration.seconds(60)

export const WakeSchedulerLive = (options: WakeSchedulerOptions = {}) =>
  Layer.scopedDiscard(Effect.gen(function*() {
    const repo = yield* WakesRepo
    const firing = yield* WakeFiring
    const pollMs = options.pollMs ?? 250
    const batch = options.batch ?? 100
    const concurrency = options.concurrency ?? 16
    const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

    const fireOne = (wake: WakeRow, token: string) =>
      Effect.gen(function*() {
        const scheduledFor = wake.next_run_at!
        // A watch whose thread got received mail meanwhile ends without firing.
        if (yield* repo.silenceBroken(wake)) return yield* repo.watchAnswered(wake.id, token, yield* now)
        const outcome = yield* Effect.either(firing.fire(wake, scheduledFor))
        const at = yield* now
        if (outcome._tag === "Right") {
          const next = nextAfter({ kind: wake.schedule_kind, value: wake.schedule_value }, scheduledFor, at)
          return yield* repo.fired(wake.id, token, at, next)
        }
        yield* Effect.logWarning(`wake ${wake.id} did not fire: ${outcome.left.reason}`)
        return yield* outcome.left.retry
          ? repo.release(wake.id, token, new Date(at.getTime() + Duration.toMillis(RETRY_AFTER)))
          : repo.abandon(wake.id, token, at)
      }).pipe(
        // A defect in one firing (a database hiccup) must not stop the timers: its lease expires and it is retried.
        Effect.catchAllCause((cause) => Effect.logError(`wake ${wake.id} firing failed; retried after its lease`, cause))
      )

    const pass = Effect.gen(function*() {
      const token = randomToken(16)
      const due = yield* repo.claimDue(yield* now, token, batch)
      yield* Effect.forEach(due, (w) => fireOne(w, token), { concurrency, discard: true })
      return due.length
    })

    const loop = Effect.gen(function*() {
      while (true) {
        const claimed = yield* pass.pipe(
          Effect.catchAllCause((cause) => Effect.as(Effect.logError("wake timers: a pass failed", cause), 0))
        )
        // A full batch means more may be due: look again at once.
        if (claimed < batch) yield* Effect.sleep(Duration.millis(pollMs))
      }
    })
    yield* Effect.forkScoped(loop)
  }))
