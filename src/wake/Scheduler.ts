/**
 * The wake timers: every process polls for due wakes and claims them with a lease (SKIP LOCKED), so
 * several processes share the work and each due firing is taken by one. A firing stores its email
 * (WakeFiring, which is idempotent per due time) and then moves the wake on, fenced by the lease
 * token; a process killed in between leaves the lease to expire and another process finishes the
 * firing without a second email. Missed firings (the service was down) are due at start: one
 * firing each, then recurring wakes go on from now (Schedule.nextAfter).
 */
import { Clock, Effect, Layer, Option } from "effect"
import { runJobs } from "../platform/JobRunner.js"
import { backoff, retryAt } from "../platform/RetryPolicy.js"
import { randomToken } from "../platform/Secrets.js"
import { WakeFiring } from "./Firing.js"
import { type ClaimedWakeRow, WakesRepo } from "./Repo.js"
import { nextAfter } from "./Schedule.js"

export interface WakeSchedulerOptions {
  /** How often to look for due wakes when none were due (default 250 ms). */
  readonly pollMs?: number
  /** Firings in flight at once per process (default 16). */
  readonly concurrency?: number
}

/**
 * A firing that could not store its email (storage full) is tried again about a minute later, for
 * as long as the wake lasts: the first retry of a fixed-interval policy, since a wake does not
 * count its failed firings (the next firing starts afresh).
 */
const FIRING_RETRY = backoff({ base: "60 seconds", max: "60 seconds", jitter: false })

/** The wakes, declared on the job runner: a claimed wake with the lease token it is fenced by. */
export const WakeSchedulerLive = (options: WakeSchedulerOptions = {}) =>
  Layer.scopedDiscard(Effect.gen(function*() {
    const repo = yield* WakesRepo
    const firing = yield* WakeFiring
    const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

    const fireOne = (wake: ClaimedWakeRow, token: string) =>
      Effect.gen(function*() {
        const scheduledFor = wake.next_run_at!
        // A watch whose thread got received mail meanwhile ends without firing.
        if (yield* repo.silenceBroken(wake)) return yield* repo.watchAnswered(wake.id, token, yield* now)
        const outcome = yield* Effect.either(firing.fire(wake, scheduledFor, wake.attempted))
        const at = yield* now
        if (outcome._tag === "Right") {
          const next = nextAfter({ kind: wake.schedule_kind, value: wake.schedule_value }, scheduledFor, at)
          return yield* repo.fired(wake.id, wake.org_id, token, at, next)
        }
        yield* Effect.logWarning(`wake ${wake.id} did not fire: ${outcome.left.reason}`)
        const retry = outcome.left.retry ? yield* retryAt(FIRING_RETRY, 1, at.getTime()) : Option.none<Date>()
        return yield* Option.isSome(retry) ? repo.release(wake.id, token, retry.value) : repo.abandon(wake.id, token, at)
      })

    // The next due time as the last claim read it (claims that took wakes read it in the same
    // statement); consulted once, then read afresh.
    let knownNextDue: Date | null | undefined

    yield* runJobs<{ readonly wake: ClaimedWakeRow; readonly token: string }, never>({
      name: "wake",
      concurrency: options.concurrency ?? 16,
      pollMs: options.pollMs ?? 250,
      claim: (limit) =>
        Effect.gen(function*() {
          const token = randomToken(16)
          const wakes = yield* repo.claimDue(yield* now, token, limit)
          knownNextDue = wakes[0]?.next_due
          return wakes.map((wake) => ({ wake, token }))
        }),
      // Idle until the next due time rather than the next poll: a wake fires when due, not up to
      // a poll interval later (wakes due meanwhile, or whose lease ran out, come with the poll).
      nextDueIn: Effect.gen(function*() {
        const at = yield* now
        const known = knownNextDue
        knownNextDue = undefined
        const next = known !== undefined ? known : yield* repo.nextDue(at)
        return next === null ? null : Math.max(0, next.getTime() - at.getTime())
      }),
      // A defect in one firing (a database hiccup) leaves its lease to expire; it is retried then.
      run: ({ token, wake }) => fireOne(wake, token)
    })
  }))
