/**
 * Retry policies of durable background work are Effect `Schedule`s. A job's schedule is not run
 * as a timer in memory (the process may die between tries): it is stepped from its start to the
 * job's attempt count to find the delay before the next try, and the due time that delay gives is
 * stored with the job. A schedule that is done dead-letters the job.
 *
 * The step ignores the schedule's own clock (it starts at 0 and moves to each step's interval), so
 * a policy means the same whether the previous tries happened a second or a day ago. Jittered
 * schedules draw afresh on every step.
 */
import { Duration, Effect, Option, Schedule, ScheduleDecision, ScheduleIntervals } from "effect"

/** A retry policy: the delays between tries, until it is done. */
export type RetryPolicy = Schedule.Schedule<unknown, unknown>

/**
 * The delay before try `attempt + 1`, the `attempt`-th retry (`attempt` ≥ 1 tries have failed), or
 * none when the policy allows no more tries.
 */
export const retryDelay = (policy: RetryPolicy, attempt: number): Effect.Effect<Option.Option<Duration.Duration>> =>
  Effect.gen(function*() {
    let state = policy.initial
    let now = 0
    let delay = 0
    for (let i = 0; i < attempt; i++) {
      const [next, , decision] = yield* policy.step(now, undefined, state)
      if (ScheduleDecision.isDone(decision)) return Option.none()
      const start = ScheduleIntervals.start(decision.intervals)
      delay = Math.max(0, start - now)
      now = start
      state = next
    }
    return Option.some(Duration.millis(Math.round(delay)))
  })

/** The due time of the next try after `attempt` failed tries, or none (dead-letter). */
export const retryAt = (policy: RetryPolicy, attempt: number, nowMs: number): Effect.Effect<Option.Option<Date>> =>
  Effect.map(retryDelay(policy, attempt), Option.map((d) => new Date(nowMs + Duration.toMillis(d))))

/** Exactly these delays, then no more tries (no delays: no retries). */
export const fixedDelays = (delays: ReadonlyArray<Duration.DurationInput>): RetryPolicy => {
  const [first, ...rest] = delays
  return first === undefined ? Schedule.stop : Schedule.fromDelays(first, ...rest)
}

/**
 * Exponential backoff from `base` (doubling), jittered, never longer than `max`; at most `tries`
 * retries when given, else for as long as it takes.
 */
export const backoff = (options: {
  readonly base: Duration.DurationInput
  readonly max: Duration.DurationInput
  readonly retries?: number
  readonly jitter?: boolean
}): RetryPolicy => {
  const exponential = options.jitter === false
    ? Schedule.exponential(options.base)
    : Schedule.jittered(Schedule.exponential(options.base))
  // `union` continues with the shorter of the two delays: the spaced schedule caps the backoff.
  const capped = Schedule.union(exponential, Schedule.spaced(options.max))
  return options.retries === undefined ? capped : Schedule.intersect(capped, Schedule.recurs(options.retries))
}
