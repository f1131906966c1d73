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
import { Clock, Duration, Effect, Layer } from "effect"
import { AppConfig } from "../platform/Config.js"
import { randomToken } from "../platform/Secrets.js"
import { isTransient, type RelayError } from "./Relay.js"
import { SendingRepo, type SentRow } from "./Repo.js"
import { Sender } from "./Sender.js"

export interface SendSchedulerOptions {
  /** Longest sleep between looks for due sends (default 200 ms). */
  readonly pollMs?: number
  /** Sends claimed per pass (default 100). */
  readonly batch?: number
  /** Sends in flight at once per process (default 16). */
  readonly concurrency?: number
  /** Delays before the retries of a transient relay failure; after the last one the send is `failed`. */
  readonly retryDelays?: ReadonlyArray<Duration.Duration>
}

export const DEFAULT_SEND_RETRY_DELAYS = [Duration.minutes(1), Duration.minutes(5), Duration.minutes(15), Duration.hours(1)]

export const SendSchedulerLive = (options: SendSchedulerOptions = {}) =>
  Layer.scopedDiscard(Effect.gen(function*() {
    const repo = yield* SendingRepo
    const sender = yield* Sender
    const config = yield* AppConfig
    const pollMs = options.pollMs ?? 200
    const batch = options.batch ?? 100
    const concurrency = options.concurrency ?? 16
    const delays = options.retryDelays ?? DEFAULT_SEND_RETRY_DELAYS
    const leaseMs = Duration.toMillis(config.outboundTimeout) + 30_000
    const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

    const sendOne = (row: SentRow, token: string) =>
      Effect.gen(function*() {
        const at = yield* now
        const retryAt = (e: RelayError) => {
          const delay = delays[row.attempt_count]
          return isTransient(e) && delay !== undefined ? new Date(at.getTime() + Duration.toMillis(delay)) : undefined
        }
        const result = yield* sender.deliver(row, token, retryAt)
        if (result.outcome === "refused") yield* Effect.logInfo(`scheduled send ${row.id} refused by a check at send time`)
        else if (result.result._tag === "Left") {
          yield* Effect.logWarning(`scheduled send ${row.id}: ${result.result.left.message}`)
        }
      }).pipe(
        // A defect (a database hiccup) must not stop the timers: the lease runs out and the send is retried.
        Effect.catchAllCause((cause) => Effect.logError(`scheduled send ${row.id} failed; retried after its lease`, cause))
      )

    const pass = Effect.gen(function*() {
      const token = randomToken(16)
      const at = yield* now
      const due = yield* repo.claimDue(at, token, new Date(at.getTime() + leaseMs), batch)
      yield* Effect.forEach(due, (r) => sendOne(r, token), { concurrency, discard: true })
      return due.length
    })

    const loop = Effect.gen(function*() {
      while (true) {
        const claimed = yield* pass.pipe(
          Effect.catchAllCause((cause) => Effect.as(Effect.logError("send timers: a pass failed", cause), 0))
        )
        if (claimed >= batch) continue
        const next = yield* repo.nextDue.pipe(Effect.orElseSucceed(() => null))
        const at = yield* Clock.currentTimeMillis
        const wait = next === null ? pollMs : Math.max(0, Math.min(pollMs, next.getTime() - at))
        yield* Effect.sleep(Duration.millis(Math.max(wait, 5)))
      }
    })
    yield* Effect.forkScoped(loop)
  }))
