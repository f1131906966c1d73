/**
 * Natural batching across fibers: a request that arrives while `workers` batches are in flight
 * waits and goes with the others in the next batch; alone, a request goes at once. Under load the
 * database sees one statement per batch instead of one per request, and an idle service adds no
 * delay. Each request gets its own outcome.
 */
import { Chunk, Deferred, Effect, Exit, Queue, type Scope } from "effect"
import * as SqlCounters from "./SqlCounters.js"

interface Pending<I, A, E> {
  readonly item: I
  readonly done: Deferred.Deferred<A, E>
  /** The operation that asked (SqlCounters.ts): charged its share of the batch's round trips. */
  readonly charges: ReadonlyArray<SqlCounters.Charge>
}

export const makeBatcher = <I, A, E>(options: {
  readonly workers: number
  readonly maxBatch: number
  /** One outcome per item, in order; a failure of the whole batch (its statement) fails every item. */
  readonly run: (items: ReadonlyArray<I>) => Effect.Effect<ReadonlyArray<Exit.Exit<A, E>>, E>
}): Effect.Effect<(item: I) => Effect.Effect<A, E>, never, Scope.Scope> =>
  Effect.gen(function*() {
    const queue = yield* Effect.acquireRelease(Queue.unbounded<Pending<I, A, E>>(), Queue.shutdown)

    const settle = (batch: ReadonlyArray<Pending<I, A, E>>) =>
      Effect.exit(SqlCounters.shared(batch.map((p) => p.charges), options.run(batch.map((p) => p.item)))).pipe(
        Effect.flatMap((outcome) =>
          Effect.forEach(batch, (p, i) =>
            Deferred.done(
              p.done,
              Exit.isSuccess(outcome) ? outcome.value[i] ?? Exit.die(new Error("batch returned too few outcomes")) : Exit.failCause(outcome.cause)
            ), { discard: true })
        ),
        // At shutdown a batch in flight is answered as interrupted, never left hanging.
        Effect.onInterrupt(() => Effect.forEach(batch, (p) => Deferred.interrupt(p.done), { discard: true }))
      )

    const worker = Queue.takeBetween(queue, 1, options.maxBatch).pipe(
      Effect.flatMap((batch) => settle(Chunk.toReadonlyArray(batch))),
      Effect.forever
    )
    yield* Effect.forEach(Array.from({ length: options.workers }), () => Effect.forkScoped(worker), { discard: true })

    return (item: I) =>
      Effect.gen(function*() {
        const done = yield* Deferred.make<A, E>()
        yield* Queue.offer(queue, { item, done, charges: yield* SqlCounters.current })
        return yield* Deferred.await(done)
      })
  })
