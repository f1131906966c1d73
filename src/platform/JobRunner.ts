/**
 * The one runner of durable background work. Deliveries, scheduled sends, wakes, the embedding
 * backlog, the payment email rail and the settlement reconciler are declarations on it: each says
 * how to claim due items from its table (a lease taken with `FOR UPDATE SKIP LOCKED`, so several
 * processes share the work and each item is taken by one), how to run one (recording its outcome
 * fenced by the lease: done, retry at a due time its `RetryPolicy` gives, or dead-lettered), and
 * when more may be due. The runner owns what they used to each write by hand:
 *
 * - one claimer fiber that takes as many due items as there are free slots, and each item in a
 *   fiber of its own (a slow item never holds up the others);
 * - idling: sleep until the earliest due item, a wake-up (NOTIFY, or an item asking for it), or
 *   the poll interval;
 * - a failing claim or a defect in one item never stops the loop: the item's lease runs out and
 *   another pass takes it (or the declaration's `onDefect` records a retry);
 * - draining on shutdown: no new claims; items in flight get `drain` to finish, then `stop` is
 *   signalled (items that watch it record themselves as cut short) and the rest are interrupted.
 *
 * A process killed at any point loses nothing: what was claimed is leased, not taken, and comes
 * back when the lease ends.
 */
import { performance } from "node:perf_hooks"
import { Cause, Deferred, Duration, Effect, Fiber, FiberSet, Option, type Scope, Stream } from "effect"
import * as SqlCounters from "./SqlCounters.js"

/** What a running item may use besides itself. */
export interface JobContext {
  /** Completes when the drain time has run out: the item should record itself and return. */
  readonly stop: Effect.Effect<void>
  /** Wakes the claimer (e.g. a retry was scheduled that may be due before its next look). */
  readonly wake: Effect.Effect<void>
}

export interface JobDeclaration<Item, R = never> {
  /** Names the work in logs. */
  readonly name: string
  /** Claims (leases) up to `limit` due items for this process. */
  readonly claim: (limit: number) => Effect.Effect<ReadonlyArray<Item>, unknown, R>
  /** Runs one claimed item and records its outcome, fenced by the item's lease. */
  readonly run: (item: Item, context: JobContext) => Effect.Effect<unknown, unknown, R>
  /** Called when `run` fails or dies; by default the item waits for its lease to run out. */
  readonly onDefect?: (item: Item, cause: Cause.Cause<unknown>) => Effect.Effect<void, unknown, R>
  /** Milliseconds until the earliest unclaimed item is due, or null when none is pending. */
  readonly nextDueIn?: Effect.Effect<number | null, unknown, R>
  /** Items running at once in this process. */
  readonly concurrency: number
  /** Items claimed at once (default: every free slot, at most 64). */
  readonly maxClaim?: number
  /** Longest sleep between looks when idle (default 250 ms). */
  readonly pollMs?: number
  /** Sleep this long first when idle and nothing is known to be due (default `pollMs`). */
  readonly idleMs?: number
  /** Under load (fewer than a quarter of the slots free), wait this long for more to free up before claiming. */
  readonly linger?: Duration.Duration
  /** Outside events that may make work due (e.g. a NOTIFY listener). */
  readonly wakeups?: Stream.Stream<unknown, unknown, R>
  /** Whether to claim now; background work that yields to the foreground says no while it is busy. */
  readonly ready?: Effect.Effect<boolean, never, R>
  /** After an item that took `tookMs`, rest this long before the next claim (a duty cycle). */
  readonly restAfter?: (tookMs: number) => Duration.Duration
  /** On shutdown, how long items in flight get to finish before `stop` (default: none, interrupted at once). */
  readonly drain?: Duration.Duration
}

/** Runs the declaration in this process until the scope closes (then drains). */
export const runJobs = <Item, R>(job: JobDeclaration<Item, R>): Effect.Effect<void, never, R | Scope.Scope> =>
  Effect.gen(function*() {
    const pollMs = job.pollMs ?? 250
    const idleMs = job.idleMs ?? pollMs
    const maxClaim = job.maxClaim ?? 64
    // Made first, so its finalizer (interrupting the items still running) runs after the drain below.
    const inFlight = yield* FiberSet.make<unknown, unknown>()
    const stop = yield* Deferred.make<void>()
    const slots = yield* Effect.makeSemaphore(job.concurrency)
    const latch = yield* Effect.makeLatch(false)
    let free = job.concurrency
    const context: JobContext = { stop: Deferred.await(stop), wake: latch.open }

    // Each item is one operation of the job's path; the claims (also those finding nothing) are
    // charged to a path of their own (SqlCounters.ts).
    const runOne = (item: Item) => {
      const started = performance.now()
      return SqlCounters.measure(job.name)(job.run(item, context)).pipe(
        Effect.catchAllCause((cause) =>
          Cause.isInterruptedOnly(cause) ? Effect.void : Effect.zipRight(
            Effect.logError(`${job.name}: an item failed; it is tried again`, cause),
            job.onDefect === undefined ? Effect.void : job.onDefect(item, cause).pipe(
              Effect.catchAllCause((again) => Effect.logError(`${job.name}: its failure could not be recorded; retried after its lease`, again)),
              Effect.zipRight(latch.open)
            )
          )),
        Effect.ensuring(Effect.suspend(() => {
          free++
          const rest = job.restAfter?.(performance.now() - started)
          // The slot comes back after the rest: the claimer cannot take the next item sooner.
          return (rest === undefined || Duration.toMillis(rest) <= 0 ? Effect.void : Effect.sleep(rest)).pipe(
            Effect.zipRight(slots.release(1))
          )
        }))
      )
    }

    const waitForWork = (ms: number) => latch.await.pipe(Effect.timeout(Duration.millis(Math.max(5, ms))), Effect.ignore)

    const round = Effect.gen(function*() {
      // Closed before the claim, so a wake-up that arrives while it runs is not lost.
      yield* latch.close
      yield* slots.take(1).pipe(Effect.zipRight(slots.release(1)))
      if (job.ready !== undefined && !(yield* job.ready)) return yield* Effect.sleep(Duration.millis(pollMs))
      if (job.linger !== undefined && free < job.concurrency / 4) yield* Effect.sleep(job.linger)
      const limit = Math.max(1, Math.min(free, maxClaim))
      // A claim and the forks of its items are not split by a stop: every claimed item gets its fiber.
      const claimed = yield* Effect.uninterruptible(Effect.gen(function*() {
        const items = yield* job.claim(limit)
        for (const item of items) {
          yield* slots.take(1)
          free--
          // Forked from an uninterruptible region, a fiber would inherit it: items stay interruptible.
          yield* FiberSet.run(inFlight, Effect.interruptible(runOne(item)))
        }
        return items.length
      }))
      if (claimed < limit) {
        // Fewer due items than asked for: the backlog is empty for now. A wake-up, the next due time
        // or the poll brings the next look (items due at a steady rate are taken when due, not a poll later).
        const dueIn = job.nextDueIn === undefined ? null : yield* job.nextDueIn.pipe(Effect.orElseSucceed(() => null))
        yield* waitForWork(Math.min(dueIn ?? idleMs, idleMs))
      }
    })

    const claims = SqlCounters.begin(`${job.name} claim`, false)
    const claimer = yield* SqlCounters.within(claims, round).pipe(
      Effect.catchAllCause((cause) =>
        Effect.logWarning(`${job.name}: a claim failed; retrying`, cause).pipe(Effect.zipRight(Effect.sleep("1 second")))),
      Effect.forever,
      // Also interrupted by the finalizer below first, so that no claim starts during the drain.
      Effect.forkScoped
    )

    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        yield* Fiber.interrupt(claimer)
        const running = yield* FiberSet.size(inFlight)
        if (running === 0) return
        const drainMs = job.drain === undefined ? 0 : Duration.toMillis(job.drain)
        if (drainMs > 0) {
          yield* Effect.logInfo(`stopping: waiting up to ${drainMs} ms for ${running} ${job.name} item(s) in flight`)
          // Interruptible: finalizers are not, and the timeout must be able to stop the wait.
          const drained = yield* Effect.interruptible(FiberSet.awaitEmpty(inFlight)).pipe(
            Effect.timeout(Duration.millis(drainMs)),
            Effect.option
          )
          if (Option.isSome(drained)) return
          const left = yield* FiberSet.size(inFlight)
          yield* Effect.logWarning(`stopping: ${left} ${job.name} item(s) still running are cut short and due again at the next start`)
          yield* Deferred.succeed(stop, undefined)
          // Each records that it was cut short or releases its lease; the shutdown bound covers a stuck write.
          yield* Effect.interruptible(FiberSet.awaitEmpty(inFlight))
        }
        // Without a drain, items are interrupted with the FiberSet: their leases run out and they are taken again.
      })
    )

    if (job.wakeups !== undefined) {
      yield* job.wakeups.pipe(
        Stream.runForEach(() => latch.open),
        Effect.catchAllCause((cause) => Effect.logWarning(`${job.name}: wake-ups stopped`, cause)),
        Effect.forkScoped
      )
    }
    // Work may already be due at start (missed while the service was down).
    yield* latch.open
  })
