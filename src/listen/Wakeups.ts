/**
 * Wake-ups of waiting listen polls. A poll that found nothing registers here and sleeps until its
 * session may have a copy, instead of re-querying on a timer:
 *
 * - PostgreSQL: the fan-out trigger NOTIFYs `mailroom_listen` with the organization id at commit
 *   (migrations/0026); one LISTEN connection per process wakes that organization's waiters.
 * - Every engine: one watcher query per interval looks for queued copies of ALL waiting sessions
 *   of the process at once. On embedded PGlite (one connection, no LISTEN) it is the wake-up,
 *   every 250 ms whatever the number of waiters; on PostgreSQL it only covers a notification lost
 *   while the LISTEN connection was being re-established, every 2 s.
 *
 * Concurrent waits are capped per organization (LISTEN_MAX_WAITS_PER_ORG, per process): a poll
 * over the cap is refused at once rather than holding a request open.
 *
 * Readers of the organization's event log (the `/v1/events` stream, waiting for an email) wait here
 * too, on the same cap: the log's trigger NOTIFYs `events:<org id>` on the same channel, and on PGlite
 * the watcher's one query per interval also reads the log's newest position.
 */
import { PgClient } from "@effect/sql-pg"
import { SqlClient } from "@effect/sql"
import { Clock, Deferred, Duration, Effect, Metric, Option, Schedule, Stream } from "effect"
import { DatabaseKind } from "../platform/Database.js"
import { LISTEN_MAX_WAITS_PER_ORG } from "./Api.js"

export { LISTEN_MAX_WAITS_PER_ORG } from "./Api.js"

export const LISTEN_NOTIFY_CHANNEL = "mailroom_listen"
const EMBEDDED_WATCH_MS = 250
const SERVER_WATCH_MS = 2000

/** Statements run by the watcher (one per interval while anything waits, whatever the number of waiters). */
export const listenWatchQueries = Metric.counter("mailroom_listen_watch_queries")

interface Waiter {
  readonly orgId: string
  /** A listen session's poll; null for a reader of the organization's event log. */
  readonly sessionId: string | null
  readonly woken: Deferred.Deferred<void>
}

const EVENTS_PREFIX = "events:"

export class ListenWakeups extends Effect.Service<ListenWakeups>()("mailroom/ListenWakeups", {
  scoped: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    // Without a known kind (a server assembled by hand), the watcher alone, at the short interval.
    const kind = Option.getOrElse(yield* Effect.serviceOption(DatabaseKind), () => ({ embedded: true }))
    const waiters = new Set<Waiter>()
    const perOrg = new Map<string, number>()

    const wake = (match: (w: Waiter) => boolean) =>
      Effect.forEach([...waiters].filter(match), (w) => Deferred.succeed(w.woken, undefined), { discard: true })

    // The event log's newest position at the last watch: readers are woken when it moves.
    let logPosition: string | undefined
    const watch = Effect.gen(function*() {
      if (waiters.size === 0) return
      const ids = [...new Set([...waiters].flatMap((w) => (w.sessionId === null ? [] : [w.sessionId])))]
      yield* Metric.increment(listenWatchQueries)
      if (ids.length > 0) {
        const rows = yield* sql<{ session_id: string }>`
          SELECT DISTINCT session_id FROM listen_events WHERE session_id IN ${sql.in(ids)}`
        const ready = new Set(rows.map((r) => r.session_id))
        if (ready.size > 0) yield* wake((w) => w.sessionId !== null && ready.has(w.sessionId))
      }
      if (ids.length < waiters.size) {
        const rows = yield* sql<{ seq: string }>`SELECT coalesce(max(seq), 0)::text AS seq FROM org_events`
        const now = rows[0]?.seq
        if (now !== logPosition) {
          logPosition = now
          yield* wake((w) => w.sessionId === null)
        }
      }
    })
    yield* watch.pipe(
      Effect.catchAllCause((cause) => Effect.logWarning("listen watcher query failed", cause)),
      Effect.repeat(Schedule.spaced(Duration.millis(kind.embedded ? EMBEDDED_WATCH_MS : SERVER_WATCH_MS))),
      Effect.forkScoped
    )

    if (!kind.embedded) {
      const pg = yield* Effect.serviceOption(PgClient.PgClient)
      if (Option.isSome(pg)) {
        yield* pg.value.listen(LISTEN_NOTIFY_CHANNEL).pipe(
          Stream.runForEach((payload) =>
            payload.startsWith(EVENTS_PREFIX)
              ? wake((w) => w.sessionId === null && w.orgId === payload.slice(EVENTS_PREFIX.length))
              : wake((w) => w.sessionId !== null && w.orgId === payload)
          ),
          Effect.retry(Schedule.spaced("1 second")),
          Effect.catchAllCause((cause) => Effect.logWarning("listen LISTEN stopped", cause)),
          Effect.forkScoped
        )
      }
    }

    /** Takes one of the organization's wait slots for the scope; false when all are taken. */
    const slot = (orgId: string) =>
      Effect.acquireRelease(
        Effect.sync(() => {
          const n = perOrg.get(orgId) ?? 0
          if (n >= LISTEN_MAX_WAITS_PER_ORG) return false
          perOrg.set(orgId, n + 1)
          return true
        }),
        (taken) =>
          Effect.sync(() => {
            if (!taken) return
            const n = (perOrg.get(orgId) ?? 1) - 1
            if (n <= 0) perOrg.delete(orgId)
            else perOrg.set(orgId, n)
          })
      )

    /**
     * Runs `take` until it finds something or `deadline` (epoch ms) passes, sleeping between tries
     * until a wake-up. The waiter is registered before each try, so a copy queued between a try and
     * the sleep still wakes it.
     */
    const poll = <A, E, R>(orgId: string, sessionId: string | null, deadline: number, take: Effect.Effect<ReadonlyArray<A>, E, R>) =>
      Effect.gen(function*() {
        while (true) {
          const waiter: Waiter = { orgId, sessionId, woken: yield* Deferred.make<void>() }
          const found = yield* Effect.gen(function*() {
            waiters.add(waiter)
            const rows = yield* take
            const left = deadline - (yield* Clock.currentTimeMillis)
            if (rows.length > 0 || left <= 0) return Option.some(rows)
            yield* Deferred.await(waiter.woken).pipe(Effect.timeout(Duration.millis(left)), Effect.ignore)
            return Option.none<ReadonlyArray<A>>()
          }).pipe(Effect.ensuring(Effect.sync(() => waiters.delete(waiter))))
          if (Option.isSome(found)) return found.value
        }
      })

    /** `poll` for a reader of the organization's event log: woken when the log may have grown. */
    const pollEvents = <A, E, R>(orgId: string, deadline: number, take: Effect.Effect<ReadonlyArray<A>, E, R>) =>
      poll(orgId, null, deadline, take)

    return { slot, poll, pollEvents } as const
  })
}) {}
