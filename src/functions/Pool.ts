/**
 * Warm workerd processes, one per function version, reused across that version's invocations.
 *
 * Starting V8 is most of an invocation's cost, so a process stays up between invocations; what
 * must not change with reuse holds as follows:
 * - A version is everything a process was started with (organization, function, code, secrets,
 *   the account's signing secret): a redeploy or a rotation starts a new process, and the old one
 *   finishes what it runs and is reaped. A process never serves two versions, functions or
 *   organizations.
 * - The wall clock is exact: an invocation past it has its process SIGKILLed, which ends its
 *   `waitUntil` work and CPU loops at the deadline. Invocations of the same version running in that
 *   process at that moment end with it as `function_crashed` (the error says why); a delivery's
 *   attempt is retried on the delivery schedule like any crash. The same holds for the memory
 *   watchdog and the 128 MB heap, which the version's concurrent invocations share.
 * - Console output is kept per invocation inside the process (the entry module), so concurrent
 *   invocations never see each other's logs.
 * - workerd cancels an invocation's timers and promises when its answer is sent (`waitUntil` work
 *   is awaited before the answer), so nothing of one invocation runs into the next; between
 *   invocations the process's token opens neither memories nor the service.
 * - At most `maxProcesses` processes live at once (the concurrency cap: every busy process holds
 *   at least one slot); the least recently used idle one makes room, and one idle for `idleMs` is
 *   stopped.
 * - A process is replaced once it has served `recycle.invocations` invocations or run `recycle.ms`:
 *   the next invocation starts a new process and the old one finishes what it runs, then stops. An
 *   isolate's memory grows with use (measured: a busy process gained about 3 MB a minute), and a
 *   process kept busy is never idle long enough to be reaped.
 */
import { randomBytes } from "node:crypto"
import { crashReason, finish, post, type ProcessResult, resultOf, rssOf, RSS_LIMIT_BYTES, type Spawned, spawnWorkerd, type SpawnInput } from "./Process.js"

const WATCHDOG_MS = 200

export interface Version extends Omit<SpawnInput, "stateDir" | "memorySocket" | "serviceSocket" | "processToken"> {
  /** Identifies the version: equal keys start identical processes. */
  readonly key: string
  readonly orgId: string
  readonly functionId: string
}

export interface WarmProcess {
  readonly token: string
  readonly version: Version
  readonly spawned: Spawned
  inflight: number
  lastUsed: number
  /** Invocations started in it, and when it was started (ms since the epoch). */
  served: number
  readonly startedAt: number
  /** Replaced: it takes no new invocation and stops once it runs none. */
  retired: boolean
  dead: boolean
  memoryKilled: boolean
  /** Why the process was stopped under its running invocations, when it was. */
  stoppedBecause: string | undefined
}

export interface PoolOptions {
  readonly stateDir: () => string
  readonly memorySocket: string
  readonly serviceSocket: string
  readonly maxProcesses: number
  readonly idleMs: number
  /** When a process is replaced by a new one. */
  readonly recycle: { readonly invocations: number; readonly ms: number }
  /** Called when a process runs no invocation any more, and once more after it has ended. */
  readonly onIdle: (p: WarmProcess) => Promise<void>
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

export const makePool = (o: PoolOptions) => {
  const byKey = new Map<string, WarmProcess>()
  const byToken = new Map<string, WarmProcess>()
  let watchdog: NodeJS.Timeout | undefined

  const stop = (p: WarmProcess, why?: string) => {
    if (p.dead) return
    p.dead = true
    if (p.stoppedBecause === undefined) p.stoppedBecause = why
    if (byKey.get(p.version.key) === p) byKey.delete(p.version.key)
    void finish(p.spawned).finally(() => {
      byToken.delete(p.token)
      return o.onIdle(p)
    })
  }

  /** Memory limits and idle reaping, on one timer for every process. */
  const tick = () => {
    const now = Date.now()
    for (const p of byToken.values()) {
      if (p.dead) continue
      const pid = p.spawned.child.pid
      const rss = pid === undefined ? undefined : rssOf(pid)
      if (rss !== undefined && rss > RSS_LIMIT_BYTES) {
        p.memoryKilled = true
        stop(p)
      } else if (p.inflight === 0 && (p.retired || now - p.lastUsed >= o.idleMs)) {
        stop(p)
      }
    }
    if (byToken.size === 0 && watchdog !== undefined) {
      clearInterval(watchdog)
      watchdog = undefined
    }
  }

  /** Room for one more process: the least recently used idle one goes when the pool is full. */
  const makeRoom = () => {
    // Retired processes still finishing their invocations count: they hold slots.
    const alive = [...byToken.values()].filter((p) => !p.dead)
    if (alive.length < o.maxProcesses) return
    const idle = alive.filter((p) => p.inflight === 0).sort((a, b) => a.lastUsed - b.lastUsed)
    if (idle[0] !== undefined) stop(idle[0])
  }

  const start = (v: Version): WarmProcess => {
    makeRoom()
    const token = randomBytes(30).toString("base64url")
    const { key: _key, orgId: _org, functionId: _fn, ...spawnInput } = v
    const spawned = spawnWorkerd({ ...spawnInput, stateDir: o.stateDir(), memorySocket: o.memorySocket, serviceSocket: o.serviceSocket, processToken: token })
    const now = Date.now()
    const p: WarmProcess = {
      token, version: v, spawned, inflight: 0, lastUsed: now, served: 0, startedAt: now, retired: false,
      dead: false, memoryKilled: false, stoppedBecause: undefined
    }
    byKey.set(v.key, p)
    byToken.set(token, p)
    // A process that dies by itself (a crash, the heap cap) is replaced on the next invocation.
    void spawned.exited.then(() => stop(p))
    if (watchdog === undefined) {
      watchdog = setInterval(tick, WATCHDOG_MS)
      watchdog.unref()
    }
    return p
  }

  /** Runs one event in the version's process (started when it has none); never rejects. */
  const invoke = async (v: Version, body: string, headers: Readonly<Record<string, string>>, timeoutMs: number): Promise<ProcessResult> => {
    const started = performance.now()
    const elapsed = () => Math.round(performance.now() - started)
    const existing = byKey.get(v.key)
    if (existing !== undefined && !existing.dead && (existing.served >= o.recycle.invocations || Date.now() - existing.startedAt >= o.recycle.ms)) {
      existing.retired = true
      byKey.delete(v.key)
      if (existing.inflight === 0) stop(existing)
    }
    const current = byKey.get(v.key)
    const p = current !== undefined && !current.dead ? current : start(v)
    p.served++
    p.inflight++
    p.lastUsed = Date.now()
    // A timer of our own, cleared at the end: AbortSignal.timeout would keep the signal, its listeners
    // and the request they reference alive for the whole wall clock after every invocation.
    const controller = new AbortController()
    const timer = setTimeout(() => {
      controller.abort()
      stop(p, `the process was stopped because another invocation of this function version passed its ${timeoutMs} ms wall clock`)
    }, timeoutMs)
    const deadline = controller.signal
    const base = { responseHeaders: {}, responseBody: "", statusCode: null }
    const timedOut = (what: string): ProcessResult => ({ ...base, outcome: "function_timeout", logs: "", error: what, durationMs: elapsed() })
    try {
      const startup = await Promise.race([
        p.spawned.ready.then(() => "ready" as const, (e: Error) => e),
        new Promise<"timeout">((resolve) => deadline.addEventListener("abort", () => resolve("timeout"), { once: true }))
      ])
      if (startup === "timeout") return timedOut(`the function did not start within ${timeoutMs} ms`)
      if (startup instanceof Error) {
        return { ...base, outcome: "function_crashed", logs: p.spawned.output(), error: `the module failed to load: ${startup.message}`, durationMs: elapsed() }
      }
      const answer = await post(p.spawned.socket, body, headers, deadline).then(
        (r) => ({ _tag: "ok" as const, r }),
        (e: Error) => ({ _tag: "failed" as const, e })
      )
      if (answer._tag === "ok") return resultOf(answer.r, elapsed())
      if (deadline.aborted) return timedOut(`the invocation passed its ${timeoutMs} ms wall clock and was stopped`)
      // Let the exit be observed, so a crash is reported as a crash and not as a broken socket.
      await Promise.race([p.spawned.exited, sleep(200)])
      const why = crashReason(p.spawned, p.memoryKilled, p.stoppedBecause, answer.e)
      // Whatever broke the connection, the process is not trusted with another invocation.
      stop(p)
      return { ...base, outcome: "function_crashed", logs: p.spawned.output(), error: why, durationMs: elapsed() }
    } finally {
      clearTimeout(timer)
      p.inflight--
      p.lastUsed = Date.now()
      // The invocation ends once its process's credential, if it had one, is revoked.
      if (p.inflight === 0) await o.onIdle(p)
      if (p.retired && p.inflight === 0) stop(p)
    }
  }

  /** The function a process serves, only while it runs an invocation. */
  const identify = (token: string) => {
    const p = byToken.get(token)
    return p === undefined || p.dead || p.inflight === 0 ? undefined : p
  }

  /** Stops every process (the state directory is gone, or the service is stopping). */
  const stopAll = () => {
    for (const p of byToken.values()) stop(p, "the functions runtime was reset")
  }

  const size = () => byKey.size

  return { invoke, identify, stopAll, size } as const
}

export type Pool = ReturnType<typeof makePool>
