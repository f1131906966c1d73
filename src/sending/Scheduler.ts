/**
 * The scheduled-send timers, leased like deliveries and wakes: every process polls for due sends
 * and claims them with a lease (SKIP LOCKED), so several processes share the work and each due
 * send is taken by one. The outcome is written fenced by the lease token, and cancel and
 * reschedule refuse a row whose lease is held: a send is either canceled and never relayed, or
 * relayed and the cancel answers 409. A process killed mid-send leaves its lease to run out and
 * another process takes the row (an immediate send interrupted the same way is finished here too).
 *
 * Between polls the loop sleeps until the earliest due send or the poll interval, whichever comes
 * first, so a send goes out within a poll interval of its `send_at`.
 */
import { Clock, Duration, Effect, Layer, Option } from "effect"
import { AppConfig } from "../platform/Config.js"
import { runJobs } from "../platform/JobRunner.js"
import { fixedDelays, retryAt } from "../platform/RetryPolicy.js"
import { randomToken } from "../platform/Secrets.js"
import { isTransient, type RelayError } from "./Relay.js"
import { SendingRepo } from "./Repo.js"
import type { SentRow } from "./SentRows.js"
import { Sender } from "./Sender.js"

export interface SendSchedulerOptions {
  /** Longest sleep between looks for due sends (default 200 ms). */
  readonly pollMs?: number
  /** Sends in flight at once per process (default 16). */
  readonly concurrency?: number
  /** Delays before the retries of a transient relay failure; after the last one the send is `failed`. */
  readonly retryDelays?: ReadonlyArray<Duration.Duration>
}

export const DEFAULT_SEND_RETRY_DELAYS = [Duration.minutes(1), Duration.minutes(5), Duration.minutes(15), Duration.hours(1)]

/** The scheduled sends, declared on the job runner: a claimed send with the lease token it is fenced by. */
export const SendSchedulerLive = (options: SendSchedulerOptions = {}) =>
  Layer.scopedDiscard(Effect.gen(function*() {
    const repo = yield* SendingRepo
    const sender = yield* Sender
    const config = yield* AppConfig
    const policy = fixedDelays(options.retryDelays ?? DEFAULT_SEND_RETRY_DELAYS)
    const leaseMs = Duration.toMillis(config.outboundTimeout) + 30_000

    yield* runJobs<{ readonly row: SentRow; readonly token: string }, never>({
      name: "scheduled send",
      concurrency: options.concurrency ?? 16,
      pollMs: options.pollMs ?? 200,
      claim: (limit) =>
        Effect.gen(function*() {
          const token = randomToken(16)
          const at = yield* Clock.currentTimeMillis
          const rows = yield* repo.claimDue(new Date(at), token, new Date(at + leaseMs), limit)
          return rows.map((row) => ({ row, token }))
        }),
      nextDueIn: Effect.gen(function*() {
        const next = yield* repo.nextDue
        return next === null ? null : Math.max(0, next.getTime() - (yield* Clock.currentTimeMillis))
      }),
      // A defect (a database hiccup) leaves the lease to run out; the send is retried then.
      run: ({ row, token }) =>
        Effect.gen(function*() {
          // The policy stepped past this send's attempts: when a transient relay failure is tried again, if at all.
          const next = yield* retryAt(policy, row.attempt_count + 1, yield* Clock.currentTimeMillis)
          const retryAtFor = (e: RelayError) => (isTransient(e) ? Option.getOrUndefined(next) : undefined)
          const result = yield* sender.deliver(row, token, retryAtFor)
          if (result.outcome === "refused") yield* Effect.logInfo(`scheduled send ${row.id} refused by a check at send time`)
          else if (result.result._tag === "Left") {
            yield* Effect.logWarning(`scheduled send ${row.id}: ${result.result.left.message}`)
          }
        })
    })
  }))
