/**
 * One workerd process: spawned over a generated config, sent events over a unix socket, and
 * SIGKILLed at its end. Open-source workerd enforces no wall clock, CPU or memory limit of its own
 * (`waitUntil` work and CPU loops run on), so the process is the unit of isolation: killing it ends
 * everything its functions started, exactly on time. The warm pool (Pool.ts) keeps one per function
 * version; module validation and the benchmark's reference spawn one for a single use.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync, unlinkSync, writeFileSync } from "node:fs"
import { setPriority } from "node:os"
import { request } from "node:http"
import { join } from "node:path"
import { buildConfig, type ConfigInput, type Envelope, HEAP_LIMIT_MB, RESPONSE_LIMIT_BYTES, secretEnvName, WEBHOOK_SECRET_ENV, workerdBinary } from "./Workerd.js"

const LOG_CUT_MARKER = "\n…[logs cut at 16 KiB]"
/** Output of a process kept outside any invocation (module top level, the runtime's own messages). */
const OUTPUT_TAIL_BYTES = 8 * 1024
/** A process whose resident memory passes this is killed (ArrayBuffers live outside the V8 heap cap). */
export const RSS_LIMIT_BYTES = 512 * 1024 * 1024

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

export interface SpawnInput extends Omit<ConfigInput, "invokeSocket" | "secretNames"> {
  readonly secrets: Readonly<Record<string, string>>
  readonly webhookSecret: string
  /** The parent of the per-process directories (mode 0700). */
  readonly stateDir: string
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
export const rssOf = (pid: number): number | undefined => {
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

export interface Spawned {
  readonly child: ChildProcess
  readonly dir: string
  readonly socket: string
  /** The latest output written outside any invocation (stdout and stderr, in arrival order). */
  readonly output: () => string
  /** Resolves when workerd listens; rejects with its startup error when it exits first. */
  readonly ready: Promise<void>
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>
}

export const spawnWorkerd = (input: SpawnInput): Spawned => {
  const dir = mkdtempSync(join(input.stateDir, "p-"))
  const socket = join(dir, "invoke.sock")
  const secretNames = Object.keys(input.secrets).sort()
  const configPath = join(dir, "config.capnp")
  writeFileSync(configPath, buildConfig({ ...input, secretNames, invokeSocket: socket }), { mode: 0o600 })
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
  let tail = ""
  let stderrText = ""
  const keep = (d: Buffer) => {
    tail = (tail + d.toString("utf8")).slice(-OUTPUT_TAIL_BYTES)
  }
  child.stdout!.on("data", keep)
  child.stderr!.on("data", (d: Buffer) => {
    keep(d)
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
        // The config is no longer needed once loaded.
        try {
          unlinkSync(configPath)
        } catch { /* already gone */ }
        resolve()
      }
    })
    void exited.then(() => reject(new Error(cleanStartupError(stderrText))))
  })
  ready.catch(() => undefined)
  return { child, dir, socket, output: () => tail, ready, exited }
}

/** Kills a process and removes its directory once it has exited. */
export const finish = async (s: Spawned) => {
  s.child.kill("SIGKILL")
  await s.exited
  rmSync(s.dir, { recursive: true, force: true })
}

interface Posted {
  readonly statusCode: number
  readonly body: string
}

/** Posts one event; the answer is the entry module's envelope (never larger than its limits). */
export const post = (socket: string, body: string, headers: Readonly<Record<string, string>>, signal: AbortSignal) =>
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
      res.on("data", (d: Buffer) => chunks.push(d))
      res.on("end", () => resolve({ statusCode: res.statusCode ?? 0, body: Buffer.concat(chunks).toString("utf8") }))
      res.on("error", reject)
    })
    req.on("error", reject)
    req.end(body)
  })

const parseEnvelope = (p: Posted): Envelope | undefined => {
  if (p.statusCode !== 200) return undefined
  try {
    const e = JSON.parse(p.body) as Envelope
    return typeof e === "object" && e !== null && typeof e.status === "number" && typeof e.logs === "string" ? e : undefined
  } catch {
    return undefined
  }
}

/** The outcome of one answered event. */
export const resultOf = (p: Posted, durationMs: number): ProcessResult => {
  const e = parseEnvelope(p)
  if (e === undefined) {
    // The entry module itself failed (the tenant broke a global it relies on): the runtime's answer.
    return { outcome: "function_error", statusCode: null, responseHeaders: {}, responseBody: "", logs: "", error: p.body.slice(0, 4000) || `the runtime answered HTTP ${p.statusCode}`, durationMs }
  }
  const logs = e.logsCut ? e.logs + LOG_CUT_MARKER : e.logs
  if (e.error !== null) {
    return { outcome: "function_error", statusCode: null, responseHeaders: {}, responseBody: "", logs, error: String(e.error).slice(0, 4000), durationMs }
  }
  const ok = e.status >= 200 && e.status < 300
  return {
    outcome: ok ? "ok" : "http",
    statusCode: e.status,
    responseHeaders: e.headers,
    responseBody: String(e.body).slice(0, RESPONSE_LIMIT_BYTES),
    logs,
    error: ok ? null : `the function answered HTTP ${e.status}`,
    durationMs
  }
}

/** Why a process broke an invocation's connection, from what is known of its end. */
export const crashReason = (s: Spawned, memoryKilled: boolean, stoppedBecause: string | undefined, cause: Error) =>
  memoryKilled
    ? `the process passed ${RSS_LIMIT_BYTES / 1024 / 1024} MB of memory and was stopped`
    : stoppedBecause !== undefined
    ? stoppedBecause
    : /Last few GCs|heap out of memory|Reached heap limit/.test(s.output())
    ? `the process ran out of its ${HEAP_LIMIT_MB} MB heap and died`
    : s.child.exitCode !== null || s.child.signalCode !== null
    ? `the process died (${s.child.signalCode ?? `exit code ${s.child.exitCode}`})`
    : `the process broke the connection: ${cause.message}`

/** Loads a module in workerd without running it: undefined when it loads, else workerd's message. */
export const validateModule = async (code: string, stateDir: string, timeoutMs: number): Promise<string | undefined> => {
  const s = spawnWorkerd({
    code,
    secrets: {},
    webhookSecret: "",
    stateDir,
    memorySocket: join(stateDir, "none.sock"),
    serviceSocket: join(stateDir, "none.sock"),
    processToken: "validation"
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

/**
 * The cost floor of an invocation without reuse: spawn a process, post one event, kill it. The
 * benchmark prints it beside the service's figures.
 */
export const runOnce = async (input: SpawnInput, body: string, headers: Readonly<Record<string, string>>): Promise<ProcessResult> => {
  const started = performance.now()
  const s = spawnWorkerd(input)
  try {
    await s.ready
    const answer = await post(s.socket, body, headers, new AbortController().signal)
    return resultOf(answer, Math.round(performance.now() - started))
  } finally {
    await finish(s)
  }
}
