/**
 * The job runner and its retry policies, in process: the policies stepped to stored due times, and
 * the runner's guarantees every declaration relies on (slots, defects, drain and stop). The areas'
 * own suites (deliveries, scheduled sends, wakes, the backlog, the payment email rail, the fault
 * suite) check the declarations over real SMTP, HTTP and databases.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Duration, Effect, Exit, Option, Ref, Scope } from "effect"
import { runJobs } from "../src/platform/JobRunner.js"
import { backoff, fixedDelays, retryAt, retryDelay } from "../src/platform/RetryPolicy.js"

const delays = (policy: Parameters<typeof retryDelay>[0], upTo: number) =>
  Effect.forEach(Array.from({ length: upTo }, (_, i) => i + 1), (n) =>
    Effect.map(retryDelay(policy, n), Option.map(Duration.toMillis)))

describe("retry policies", () => {
  it.effect("fixed delays: exactly those, in order, then none (dead-letter)", () =>
    Effect.gen(function*() {
      const got = yield* delays(fixedDelays(["5 seconds", "5 minutes", "30 minutes"]), 5)
      expect(got).toEqual([Option.some(5_000), Option.some(300_000), Option.some(1_800_000), Option.none(), Option.none()])
      expect(yield* retryDelay(fixedDelays([]), 1)).toEqual(Option.none())
      expect(yield* retryAt(fixedDelays(["1 minute"]), 1, 1_000)).toEqual(Option.some(new Date(61_000)))
    }))

  it.effect("backoff: doubling from the base, jittered within ±20 %, capped, ended after the retries", () =>
    Effect.gen(function*() {
      const plain = yield* delays(backoff({ base: "1 second", max: "10 seconds", jitter: false }), 6)
      expect(plain).toEqual([1_000, 2_000, 4_000, 8_000, 10_000, 10_000].map(Option.some))
      for (let round = 0; round < 20; round++) {
        const jittered = yield* delays(backoff({ base: "1 second", max: "1 hour", retries: 3 }), 4)
        const [a, b, c, d] = jittered
        expect(Option.isNone(d!)).toBe(true)
        for (const [got, nominal] of [[a, 1_000], [b, 2_000], [c, 4_000]] as const) {
          const ms = Option.getOrThrow(got!)
          expect(ms).toBeGreaterThanOrEqual(nominal * 0.8 - 1)
          expect(ms).toBeLessThanOrEqual(nominal * 1.2 + 1)
        }
      }
    }))
})

describe("the job runner", () => {
  it.live("runs every claimed item at most `concurrency` at once, and claims no more than there are free slots", () =>
    Effect.gen(function*() {
      const pending = yield* Ref.make(Array.from({ length: 40 }, (_, i) => i))
      const done = yield* Ref.make<ReadonlyArray<number>>([])
      const running = yield* Ref.make(0)
      const peak = yield* Ref.make(0)
      const biggestClaim = yield* Ref.make(0)
      const scope = yield* Scope.make()
      yield* runJobs({
        name: "test",
        concurrency: 4,
        pollMs: 10,
        claim: (limit) =>
          Effect.gen(function*() {
            yield* Ref.update(biggestClaim, (n) => Math.max(n, limit))
            return yield* Ref.modify(pending, (all) => [all.slice(0, limit), all.slice(limit)])
          }),
        run: (item) =>
          Effect.gen(function*() {
            const now = yield* Ref.updateAndGet(running, (n) => n + 1)
            yield* Ref.update(peak, (p) => Math.max(p, now))
            yield* Effect.sleep("5 millis")
            yield* Ref.update(running, (n) => n - 1)
            yield* Ref.update(done, (d) => [...d, item])
          })
      }).pipe(Scope.extend(scope))
      yield* Effect.gen(function*() {
        while ((yield* Ref.get(done)).length < 40) yield* Effect.sleep("10 millis")
      }).pipe(Effect.timeout("10 seconds"))
      yield* Scope.close(scope, Exit.void)
      expect([...(yield* Ref.get(done))].sort((a, b) => a - b)).toEqual(Array.from({ length: 40 }, (_, i) => i))
      expect(yield* Ref.get(peak)).toBeLessThanOrEqual(4)
      expect(yield* Ref.get(biggestClaim)).toBeLessThanOrEqual(4)
    }))

  it.live("a defect in one item goes to onDefect and the runner goes on with the others", () =>
    Effect.gen(function*() {
      const pending = yield* Ref.make([1, 2, 3])
      const failed = yield* Ref.make<ReadonlyArray<number>>([])
      const ran = yield* Ref.make<ReadonlyArray<number>>([])
      const scope = yield* Scope.make()
      yield* runJobs({
        name: "test",
        concurrency: 2,
        pollMs: 10,
        claim: (limit) => Ref.modify(pending, (all) => [all.slice(0, limit), all.slice(limit)]),
        run: (item) => item === 2 ? Effect.die(new Error("boom")) : Ref.update(ran, (r) => [...r, item]),
        onDefect: (item) => Ref.update(failed, (f) => [...f, item])
      }).pipe(Scope.extend(scope))
      yield* Effect.gen(function*() {
        while ((yield* Ref.get(ran)).length < 2 || (yield* Ref.get(failed)).length < 1) yield* Effect.sleep("10 millis")
      }).pipe(Effect.timeout("5 seconds"))
      yield* Scope.close(scope, Exit.void)
      expect(yield* Ref.get(failed)).toEqual([2])
      expect([...(yield* Ref.get(ran))].sort()).toEqual([1, 3])
    }))

  it.live("stopping drains: no new claims, items in flight finish within `drain`, then the rest are told to stop", () =>
    Effect.gen(function*() {
      const started = yield* Deferred.make<void>()
      const claims = yield* Ref.make(0)
      const outcome = yield* Ref.make<ReadonlyArray<string>>([])
      const scope = yield* Scope.make()
      let given = false
      yield* runJobs({
        name: "test",
        concurrency: 2,
        pollMs: 10,
        drain: Duration.millis(300),
        claim: () =>
          Effect.gen(function*() {
            yield* Ref.update(claims, (n) => n + 1)
            if (given) return []
            given = true
            return ["quick", "slow"]
          }),
        run: (item, job) =>
          Effect.gen(function*() {
            yield* Deferred.succeed(started, undefined)
            if (item === "quick") {
              yield* Effect.sleep("100 millis")
              return yield* Ref.update(outcome, (o) => [...o, "quick finished"])
            }
            // The slow one outlives the drain: it records itself as cut short when told to stop.
            const stopped = yield* Effect.race(Effect.as(Effect.sleep("5 seconds"), "finished"), Effect.as(job.stop, "stopped"))
            yield* Ref.update(outcome, (o) => [...o, `slow ${stopped}`])
          })
      }).pipe(Scope.extend(scope))
      yield* Deferred.await(started)
      yield* Effect.sleep("20 millis")
      const t0 = Date.now()
      yield* Scope.close(scope, Exit.void)
      const took = Date.now() - t0
      const claimsAtClose = yield* Ref.get(claims)
      yield* Effect.sleep("50 millis")
      expect(yield* Ref.get(claims)).toBe(claimsAtClose)
      expect([...(yield* Ref.get(outcome))].sort()).toEqual(["quick finished", "slow stopped"])
      expect(took).toBeGreaterThanOrEqual(250)
      expect(took).toBeLessThan(2_000)
    }))
})
