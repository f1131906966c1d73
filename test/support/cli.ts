/**
 * Runs the `mailroom` CLI as a subprocess against a test service: the bundle of the current sources
 * built once per run (test/support/globalSetup.ts), or the sources through tsx outside vitest's setup.
 */
import { type ChildProcessWithoutNullStreams, spawn } from "node:child_process"
import { fileURLToPath } from "node:url"
import { inject } from "vitest"

const ROOT = fileURLToPath(new URL("../..", import.meta.url))
const MAIN = "src/cli/main.ts"

export interface CliResult {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

export interface CliEnv {
  readonly baseUrl: string
  readonly configHome: string
  readonly extra?: Record<string, string>
}

const envOf = (env: CliEnv): NodeJS.ProcessEnv => {
  const { MAILROOM_API_KEY: _key, MAILROOM_PROFILE: _profile, ...rest } = process.env
  return {
    ...rest,
    XDG_CONFIG_HOME: env.configHome,
    MAILROOM_BASE_URL: `${env.baseUrl}/v1`,
    NO_COLOR: "1",
    ...env.extra
  }
}

/** A running CLI whose output can be awaited line by line. */
export interface RunningCli {
  readonly child: ChildProcessWithoutNullStreams
  readonly output: { stdout: string; stderr: string }
  /** Resolves when stderr or stdout matches (rejects after `timeoutMs`; a cold start on a busy machine takes long). */
  readonly waitFor: (pattern: RegExp, timeoutMs?: number) => Promise<RegExpExecArray>
  readonly exit: Promise<CliResult>
}

/** `stdin`: text to send and close, or `"open"` to write to `child.stdin` later. */
export const startCli = (args: ReadonlyArray<string>, env: CliEnv, stdin?: string | { readonly open: true }): RunningCli => {
  const bundle = inject("cliBundle")
  const entry = typeof bundle === "string" && bundle !== "" ? [bundle] : ["--import", "tsx", MAIN]
  const child = spawn(process.execPath, [...entry, ...args], { cwd: ROOT, env: envOf(env) })
  const output = { stdout: "", stderr: "" }
  const listeners: Array<() => void> = []
  const notify = () => listeners.forEach((l) => l())
  child.stdout.on("data", (c: Buffer) => {
    output.stdout += c.toString("utf8")
    notify()
  })
  child.stderr.on("data", (c: Buffer) => {
    output.stderr += c.toString("utf8")
    notify()
  })
  if (typeof stdin === "string") child.stdin.end(stdin)
  else if (stdin === undefined) child.stdin.end()
  const exit = new Promise<CliResult>((resolve) => {
    child.on("close", (code) => resolve({ code, ...output }))
  })
  const waitFor = (pattern: RegExp, timeoutMs = 120_000) =>
    new Promise<RegExpExecArray>((resolve, reject) => {
      const check = () => {
        const m = pattern.exec(output.stderr) ?? pattern.exec(output.stdout)
        if (m) {
          clearTimeout(timer)
          resolve(m)
          return true
        }
        return false
      }
      const timer = setTimeout(
        () => reject(new Error(`CLI output did not match ${pattern}:\n${output.stdout}\n${output.stderr}`)),
        timeoutMs
      )
      if (!check()) listeners.push(() => void check())
    })
  return { child, output, waitFor, exit }
}

export const runCli = (args: ReadonlyArray<string>, env: CliEnv, stdin?: string): Promise<CliResult> =>
  startCli(args, env, stdin).exit
