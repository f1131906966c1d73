/**
 * One workerd process for one invocation: spawned over a generated config, sent the event over a
 * unix socket, and SIGKILLed afterwards whatever happened. Open-source workerd enforces no wall
 * clock, CPU or memory limit of its own (`waitUntil` work and CPU loops run on), so the process is
 * the unit of isolation: killing it ends everything the function started, exactly on time.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import { mkdtempSync, readFileSync, rmSync, unlinkSync, writeFileSync } from "node:fs"
import { setPriority } from "node:os"
import { request } from "node:http"
import { join } from "node:path"
import { buildConfig, type ConfigInput, ERROR_HEADER, HEAP_LIMIT_MB, NONCE_HEADER, secretEnvName, WEBHOOK_SECRET_ENV, workerdBinary } from "./Workerd.js"

/** Console output kept per invocation; the rest is cut with a marker. */
export const LOG_LIMIT_BYTES = 16 * 1024
const LOG_CUT_MARKER = "\n…[logs cut at 16 KiB]"
/** Response bytes read from a function; the rest is discarded. */
export const RESPONSE_LIMIT_BYTES = 64 * 1024
/** A process whose resident memory passes this is killed (ArrayBuffers live outside the V8 heap cap). */
export const RSS_LIMIT_BYTES = 512 * 1024 * 1024
const WATCHDOG_MS = 200

export type Outcome = "ok" | "http" | "function_error" | "function_timeout" | "function_crashed"

export interface ProcessResult {
  readonly outcome: Outcome
  readonly statusCode: number | null
  readonly responseHeaders: Readonly<Record<string, string>>
  readonly responseBody: string
  readonly logs: string
  readonly error: string | null
  readonly durationMs: number
}

export interface ProcessInput extends Omit<ConfigInput, "invokeSocket" | "secretNames"> {
  readonly secrets: Readonly<Record<string, string>>
  readonly webhookSecret: string
  readonly body: string
  readonly headers: Readonly<Record<string, string>>
  /** The wall clock, from spawn to the end of the function's last `waitUntil` work. */
  readonly timeoutMs: number
  /** The parent of the per-invocation directories (mode 0700). */
  readonly stateDir: string
}

/** Bounded capture of a process's stdout and stderr, in arrival order. */
class LogBuffer {
  private chunks: Array<Buffer> = []
  private size = 0
  private cut = false
  push(chunk: Buffer) {
    if (this.cut) return
    const room = LOG_LIMIT_BYTES - this.size
    if (chunk.length > room) {
      this.chunks.push(chunk.subarray(0, room))
      this.size = LOG_LIMIT_BYTES
      this.cut = true
      return
    }
    this.chunks.push(chunk)
    this.size += chunk.length
  }
  text() {
    // A cut may split a UTF-8 sequence: the decoder's replacement character marks it.
    const s = Buffer.concat(this.chunks).toString("utf8")
    return this.cut ? s + LOG_CUT_MARKER : s
  }
}

const live = new Set<ChildProcess>()

/** Kills every process still running (the service is stopping). */
export const killAll = () => {
  for (const child of live) child.kill("SIGKILL")
}

/**
 * However this process ends (a shutdown cut short by SHUTDOWN_TIMEOUT exits with an /invoke still
 * in flight), no workerd it started outlives it: killing is synchronous, so it works in `exit`.
 */
let killOnExit = false
const ensureKilledOnExit = () => {
  if (killOnExit) return
  killOnExit = true
  process.once("exit", killAll)
}

/** Resident set size of a process in bytes, or undefined once it is gone. */
const rssOf = (pid: number): number | undefined => {
  try {
    const m = /VmRSS:\s+(\d+)\s+kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))
    return m ? Number(m[1]) * 1024 : undefined
  } catch {
    return undefined
  }
}

/** workerd's load error without its internal service name: what a developer needs to fix the module. */
const cleanStartupError = (stderr: string) =>
  stderr.replace(/^service main: /gm, "").trim().slice(0, 2000) || "workerd exited while loading the module"

const randomNonce = () => randomBytes(18).toString("base64url")

interface Spawned {
  readonly child: ChildProcess
  readonly dir: string
  readonly socket: string
  readonly nonce: string
  readonly logs: LogBuffer
  readonly stderr: () => string
  /** Resolves when workerd listens; rejects with its startup error when it exits first. */
  readonly ready: Promise<void>
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>
  memoryKilled: boolean
}

const spawnWorkerd = (input: Omit<ProcessInput, "body" | "headers" | "timeoutMs">): Spawned => {
  const dir = mkdtempSync(join(input.stateDir, "i-"))
  const socket = join(dir, "invoke.sock")
  const secretNames = Object.keys(input.secrets).sort()
  const configPath = join(dir, "config.capnp")
  writeFileSync(configPath, buildConfig({ ...input, secretNames, invokeSocket: socket }), { mode: 0o600 })
  const nonce = randomNonce()
  // Only what the bindings read: secrets stay off disk and out of every other process's view.
  const env: Record<string, string> = { [WEBHOOK_SECRET_ENV]: input.webhookSecret }
  secretNames.forEach((name, i) => {
    env[secretEnvName(i)] = input.secrets[name]!
  })
  const child = spawn(workerdBinary(), ["serve", configPath, "--control-fd=3"], {
    stdio: ["ignore", "pipe", "pipe", "pipe"],
    env
  })
  live.add(child)
  ensureKilledOnExit()
  const logs = new LogBuffer()
  let stderrText = ""
  child.stdout!.on("data", (d: Buffer) => logs.push(d))
  child.stderr!.on("data", (d: Buffer) => {
    logs.push(d)
    if (stderrText.length < 8192) stderrText += d.toString("utf8")
  })
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once("exit", (code, signal) => {
      live.delete(child)
      resolve({ code, signal })
    })
    child.once("error", (e) => {
      // The binary could not be started (an install without optional dependencies lacks it).
      stderrText += `workerd could not be started: ${e.message}`
      live.delete(child)
      resolve({ code: null, signal: null })
    })
  })
  const ready = new Promise<void>((resolve, reject) => {
    const control = child.stdio[3] as NodeJS.ReadableStream | null
    let buffered = ""
    control?.on("data", (d: Buffer) => {
      buffered += d.toString("utf8")
      if (buffered.includes("\"listen\"")) {
        // The config (with this invocation's credentials) is no longer needed once loaded.
        try {
          unlinkSync(configPath)
        } catch { /* already gone */ }
        resolve()
      }
    })
    void exited.then(() => reject(new Error(cleanStartupError(stderrText))))
  })
  ready.catch(() => undefined)
  return { child, dir, socket, nonce, logs, stderr: () => stderrText, ready, exited, memoryKilled: false }
}

const watchMemory = (s: Spawned) => {
  const timer = setInterval(() => {
    const pid = s.child.pid
    if (pid === undefined) return
    const rss = rssOf(pid)
    if (rss !== undefined && rss > RSS_LIMIT_BYTES) {
      s.memoryKilled = true
      s.child.kill("SIGKILL")
    }
  }, WATCHDOG_MS)
  timer.unref()
  return () => clearInterval(timer)
}

const finish = async (s: Spawned) => {
  s.child.kill("SIGKILL")
  await s.exited
  rmSync(s.dir, { recursive: true, force: true })
}

interface Posted {
  readonly statusCode: number
  readonly headers: Record<string, string>
  readonly body: string
}

const post = (socket: string, body: string, headers: Readonly<Record<string, string>>, signal: AbortSignal) =>
  new Promise<Posted>((resolve, reject) => {
    const req = request({
      socketPath: socket,
      method: "POST",
      path: "/",
      headers: { ...headers, host: "function.mailroom.internal", "content-length": String(Buffer.byteLength(body)) },
      signal,
      agent: false
    }, (res) => {
      const chunks: Array<Buffer> = []
      let size = 0
      res.on("data", (d: Buffer) => {
        if (size < RESPONSE_LIMIT_BYTES) chunks.push(d.subarray(0, RESPONSE_LIMIT_BYTES - size))
        size += d.length
      })
      res.on("end", () => {
        const out: Record<string, string> = {}
        for (const [k, v] of Object.entries(res.headers)) {
          if (v !== undefined) out[k] = Array.isArray(v) ? v.join(", ") : v
        }
        resolve({ statusCode: res.statusCode ?? 0, headers: out, body: Buffer.concat(chunks).toString("utf8") })
      })
      res.on("error", reject)
    })
    req.on("error", reject)
    req.end(body)
  })

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/** Runs one invocation to its end; never rejects. */
export const runProcess = async (input: ProcessInput): Promise<ProcessResult> => {
  const started = performance.now()
  const elapsed = () => Math.round(performance.now() - started)
  const s = spawnWorkerd(input)
  const stopWatch = watchMemory(s)
  // A timer of our own, cleared at the end: AbortSignal.timeout would keep the signal, its listeners
  // and the request they reference alive for the whole wall clock (10 minutes) after every invocation.
  const controller = new AbortController()
  const timer = setTimeout(() => controller.abort(), input.timeoutMs)
  const deadline = controller.signal
  const base = { responseHeaders: {}, responseBody: "", statusCode: null }
  try {
    const startup = await Promise.race([
      s.ready.then(() => "ready" as const, (e: Error) => e),
      new Promise<"timeout">((resolve) => deadline.addEventListener("abort", () => resolve("timeout"), { once: true }))
    ])
    if (startup === "timeout") {
      return { ...base, outcome: "function_timeout", logs: s.logs.text(), error: `the function did not start within ${input.timeoutMs} ms`, durationMs: elapsed() }
    }
    if (startup instanceof Error) {
      return { ...base, outcome: "function_crashed", logs: s.logs.text(), error: `the module failed to load: ${startup.message}`, durationMs: elapsed() }
    }
    const answer = await post(s.socket, input.body, { ...input.headers, [NONCE_HEADER]: s.nonce }, deadline).then(
      (r) => ({ _tag: "ok" as const, r }),
      (e: Error) => ({ _tag: "failed" as const, e })
    )
    if (answer._tag === "failed") {
      if (deadline.aborted) {
        return { ...base, outcome: "function_timeout", logs: s.logs.text(), error: `the invocation passed its ${input.timeoutMs} ms wall clock and was stopped`, durationMs: elapsed() }
      }
      // Let the exit be observed, so a crash is reported as a crash and not as a broken socket.
      await Promise.race([s.exited, sleep(200)])
      const why = s.memoryKilled
        ? `the process passed ${RSS_LIMIT_BYTES / 1024 / 1024} MB of memory and was stopped`
        : /Last few GCs|heap out of memory|Reached heap limit/.test(s.logs.text())
        ? `the process ran out of its ${HEAP_LIMIT_MB} MB heap and died`
        : s.child.exitCode !== null || s.child.signalCode !== null
        ? `the process died (${s.child.signalCode ?? `exit code ${s.child.exitCode}`})`
        : `the process broke the connection: ${answer.e.message}`
      return { ...base, outcome: "function_crashed", logs: s.logs.text(), error: why, durationMs: elapsed() }
    }
    const r = answer.r
    const durationMs = elapsed()
    // Output written just before the answer may still be in the pipes.
    await sleep(5)
    if (r.statusCode === 500 && r.headers[ERROR_HEADER] === s.nonce) {
      return { outcome: "function_error", statusCode: null, responseHeaders: {}, responseBody: "", logs: s.logs.text(), error: r.body.slice(0, 4000), durationMs }
    }
    delete r.headers[ERROR_HEADER]
    const ok = r.statusCode >= 200 && r.statusCode < 300
    return {
      outcome: ok ? "ok" : "http",
      statusCode: r.statusCode,
      responseHeaders: r.headers,
      responseBody: r.body,
      logs: s.logs.text(),
      error: ok ? null : `the function answered HTTP ${r.statusCode}`,
      durationMs
    }
  } finally {
    clearTimeout(timer)
    stopWatch()
    await finish(s)
  }
}

/** Loads a module in workerd without running it: undefined when it loads, else workerd's message. */
export const validateModule = async (code: string, stateDir: string, timeoutMs: number): Promise<string | undefined> => {
  const s = spawnWorkerd({
    code,
    secrets: {},
    webhookSecret: "",
    stateDir,
    memorySocket: join(stateDir, "none.sock"),
    invocationToken: "validation",
    serviceAddress: "127.0.0.1:9",
    serviceCredential: "validation"
  })
  // A module whose top level never returns spins one core until the timeout: at the lowest CPU
  // priority, so the service and everyone else's work come first.
  if (s.child.pid !== undefined) {
    try {
      setPriority(s.child.pid, 19)
    } catch { /* already gone */ }
  }
  let timer: NodeJS.Timeout | undefined
  try {
    return await Promise.race([
      s.ready.then(() => undefined, (e: Error) => e.message),
      new Promise<string>((resolve) => {
        timer = setTimeout(() => resolve(`the module did not load within ${timeoutMs} ms`), timeoutMs)
      })
    ])
  } finally {
    clearTimeout(timer)
    await finish(s)
  }
}
