/**
 * Process statistics for benchmarks, off by default: with MAILROOM_STATS_FILE set, the service
 * rewrites that file every second with one JSON object: memory (rss, heap, external) and the
 * event-loop delay of the last second (perf_hooks.monitorEventLoopDelay, 10 ms resolution: p50, p99,
 * max in ms) plus the same since start, and the database round trips, statements and commits so far,
 * in total and per path with the operations they served (SqlCounters.ts). `seq` counts the writes,
 * so a reader can tell windows apart.
 */
import { Effect, Layer, Option } from "effect"
import { renameSync, writeFileSync } from "node:fs"
import { monitorEventLoopDelay } from "node:perf_hooks"
import { AppConfig } from "./Config.js"
import * as SqlCounters from "./SqlCounters.js"

const INTERVAL_MS = 1000
const ms = (ns: number) => Math.round(ns / 1e4) / 100

const summary = (h: ReturnType<typeof monitorEventLoopDelay>) => ({
  p50: ms(h.percentile(50)),
  p99: ms(h.percentile(99)),
  max: ms(h.max),
  samples: h.count
})

export const ProcessStatsLive = Layer.scopedDiscard(Effect.gen(function*() {
  const config = yield* AppConfig
  if (Option.isNone(config.statsFile)) return
  const file = config.statsFile.value
  const window = monitorEventLoopDelay({ resolution: 10 })
  // A second monitor never reset (an event-loop histogram cannot be added into another).
  const total = monitorEventLoopDelay({ resolution: 10 })
  let seq = 0
  const write = () => {
    const m = process.memoryUsage()
    const stats = {
      seq: ++seq,
      at: new Date().toISOString(),
      pid: process.pid,
      rss: m.rss,
      heap_used: m.heapUsed,
      heap_total: m.heapTotal,
      external: m.external,
      array_buffers: m.arrayBuffers,
      lag_ms: summary(window),
      lag_since_start_ms: summary(total),
      sql: SqlCounters.snapshot()
    }
    window.reset()
    // Written aside and renamed, so a reader never sees half a file.
    writeFileSync(`${file}.tmp`, JSON.stringify(stats))
    renameSync(`${file}.tmp`, file)
  }
  yield* Effect.acquireRelease(
    Effect.sync(() => {
      window.enable()
      total.enable()
      const timer = setInterval(() => {
        try {
          write()
        } catch {
          // A benchmark aid: a failing write must never disturb the service.
        }
      }, INTERVAL_MS)
      timer.unref()
      return timer
    }),
    (timer) => Effect.sync(() => {
      clearInterval(timer)
      window.disable()
      total.disable()
    })
  )
}))
