/** The health check of the database behind `GET /v1/health`: one `SELECT 1`, shared by concurrent probes. */
import { SqlClient } from "@effect/sql"
import { Deferred, Effect, Exit, FiberId, Runtime } from "effect"
import { ServiceUnavailable } from "../contract/Errors.js"

export class DatabaseHealth extends Effect.Service<DatabaseHealth>()("mailroom/service/DatabaseHealth", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const runtime = yield* Effect.runtime<never>()
    const check = sql`SELECT 1 AS ok`.pipe(
      Effect.timeoutFail({
        duration: "2 seconds",
        onTimeout: () => new ServiceUnavailable({ message: "database did not answer within 2 s" })
      }),
      Effect.catchTag("SqlError", () => new ServiceUnavailable({ message: "database unreachable" })),
      Effect.asVoid
    )
    /**
     * Probes arriving while a check is in flight share its answer: each one still reflects a query
     * that was running when it arrived (bounded by the 2 s timeout), and a load balancer polling
     * many times a second costs one round trip per check instead of one per probe. The check runs
     * in a fiber of its own, so a probe whose client goes away never cancels it for the others.
     */
    let current: Deferred.Deferred<void, ServiceUnavailable> | undefined
    const probe = Effect.suspend(() => {
      if (current !== undefined) return Deferred.await(current)
      const done = Deferred.unsafeMake<void, ServiceUnavailable>(FiberId.none)
      current = done
      const settle = (exit: Exit.Exit<void, ServiceUnavailable>) =>
        Effect.suspend(() => {
          if (current === done) current = undefined
          return Deferred.done(done, exit)
        })
      Runtime.runFork(runtime)(
        check.pipe(Effect.exit, Effect.flatMap(settle), Effect.onInterrupt(() => settle(Exit.interrupt(FiberId.none))))
      )
      return Deferred.await(done)
    })
    return { probe } as const
  })
}) {}
