/**
 * A pool of slots shared by several owners (organizations) that no one owner can take over:
 * - an owner holds at most `perOwner` slots at once;
 * - the last `reserve` free slots go only to owners holding none, so an owner arriving while the
 *   others keep theirs busy (a function sleeping for its whole wall clock) still starts at once;
 * - a freed slot goes to the waiting owner holding the fewest, the longest waiting first among equals;
 * - a wait may be bounded: past it the caller is told (`None`) instead of queueing on.
 */
import { Duration, Effect, Option } from "effect"

interface Waiter {
  readonly owner: string
  readonly grant: () => void
  granted: boolean
}

export interface FairSlotsOptions {
  readonly total: number
  readonly perOwner: number
  /** Slots kept for owners that hold none; at most `total - 1`. */
  readonly reserve: number
}

/** The default reserve of a pool: a quarter of it (none for a pool of one slot). */
export const quarterReserve = (total: number) => Math.min(Math.floor(total / 4), Math.max(0, total - 1))

export class FairSlots {
  private used = 0
  private readonly held = new Map<string, number>()
  private readonly waiting: Array<Waiter> = []

  constructor(readonly options: FairSlotsOptions) {}

  private heldBy(owner: string) {
    return this.held.get(owner) ?? 0
  }

  private canStart(owner: string) {
    const free = this.options.total - this.used
    const mine = this.heldBy(owner)
    if (free <= 0 || mine >= this.options.perOwner) return false
    return mine === 0 || free > this.options.reserve
  }

  private take(owner: string) {
    this.used++
    this.held.set(owner, this.heldBy(owner) + 1)
  }

  private give(owner: string) {
    this.used--
    const left = this.heldBy(owner) - 1
    if (left <= 0) this.held.delete(owner)
    else this.held.set(owner, left)
    this.pump()
  }

  /** Grants freed slots: to the eligible waiter whose owner holds the fewest, oldest first. */
  private pump() {
    for (;;) {
      let best: Waiter | undefined
      for (const w of this.waiting) {
        if (!this.canStart(w.owner)) continue
        if (best === undefined || this.heldBy(w.owner) < this.heldBy(best.owner)) best = w
      }
      if (best === undefined) return
      this.waiting.splice(this.waiting.indexOf(best), 1)
      this.take(best.owner)
      best.granted = true
      best.grant()
    }
  }

  /** Slots in use and owners holding any (for tests and logs). */
  get inUse() {
    return this.used
  }

  /**
   * Runs `effect` in a slot of `owner`; `Some(result)`, or `None` when no slot was granted within
   * `maxWait` (no bound when omitted). An interrupted waiter leaves the queue.
   */
  withSlot<A, E, R>(owner: string, effect: Effect.Effect<A, E, R>, maxWait?: Duration.DurationInput): Effect.Effect<Option.Option<A>, E, R> {
    const acquire = Effect.async<void>((resume) => {
      const waiter: Waiter = { owner, grant: () => resume(Effect.void), granted: false }
      this.waiting.push(waiter)
      this.pump()
      return Effect.sync(() => {
        // A waiter whose slot was granted at the moment it gave up hands the slot straight back.
        if (waiter.granted) return this.give(owner)
        const at = this.waiting.indexOf(waiter)
        if (at >= 0) this.waiting.splice(at, 1)
      })
    })
    const granted = maxWait === undefined
      ? Effect.as(acquire, true)
      : Effect.map(Effect.timeout(acquire, maxWait).pipe(Effect.option), Option.isSome)
    return Effect.uninterruptibleMask((restore) =>
      Effect.flatMap(restore(granted), (ok) =>
        ok
          ? restore(effect).pipe(Effect.map(Option.some), Effect.ensuring(Effect.sync(() => this.give(owner))))
          : Effect.succeed(Option.none<A>()))
    )
  }
}
