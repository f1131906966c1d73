/**
 * Memory of a start: the service built as `npm start` builds it (`dist/server/main.mjs`), started on
 * an empty DATA_DIR (embedded PGlite: initdb, every migration) and then again on the same directory.
 * For each start it prints the time until `/v1/health` answers 200, the peak RSS (`VmHWM` from
 * /proc/<pid>/status, read once health is 200, and the highest `VmRSS` sampled every 10 ms until
 * then) and the RSS at that moment, next to the 512 MB target, and the peak of the short-lived
 * child process that creates the embedded database's files on a first start; then stops the service with SIGTERM
 * and prints its exit code and how long stopping took.
 *
 *   npx tsx scripts/bench-first-start.ts [--runs 1]
 *
 * Bounded: each start gives up after 120 s. Loopback only; the data directory is removed at the end.
 */
import { execFileSync, spawn } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { parseArgs } from "node:util"

const ROOT = new URL("..", import.meta.url).pathname
const TARGET_MB = 512
const { values } = parseArgs({ options: { runs: { type: "string", default: "1" } } })
const runs = Math.max(1, Number(values.runs))

const freePort = () =>
  new Promise<number>((resolve) => {
    const s = createServer().listen(0, "127.0.0.1", () => {
      const a = s.address()
      s.close(() => resolve(typeof a === "object" && a !== null ? a.port : 0))
    })
  })

const statusKb = (pid: number, field: string) => {
  try {
    const m = new RegExp(`${field}:\\s+(\\d+) kB`).exec(readFileSync(`/proc/${pid}/status`, "utf8"))
    return m ? Number(m[1]) : 0
  } catch {
    return 0
  }
}

const childrenOf = (pid: number) => {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").trim().split(/\s+/).filter((x) => x !== "").map(Number)
  } catch {
    return []
  }
}

const mb = (kb: number) => (kb / 1024).toFixed(0)

const start = async (dataDir: string) => {
  const port = await freePort()
  const smtpPort = await freePort()
  const env: Record<string, string> = {}
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && k !== "DATABASE_URL") env[k] = v
  Object.assign(env, { DATA_DIR: dataDir, PORT: String(port), SMTP_PORT: String(smtpPort), LOG_LEVEL: "warning" })
  const t0 = performance.now()
  const child = spawn(process.execPath, ["dist/server/main.mjs"], { cwd: ROOT, env, stdio: ["ignore", "ignore", "pipe"] })
  let stderr = ""
  child.stderr.on("data", (c: Buffer) => (stderr = (stderr + c.toString("utf8")).slice(-4000)))
  const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)))
  let sampledPeak = 0
  let childPeak = 0
  const sampler = setInterval(() => {
    sampledPeak = Math.max(sampledPeak, statusKb(child.pid!, "VmRSS"))
    // The embedded database's initdb runs in a child process of its own (first start only).
    for (const pid of childrenOf(child.pid!)) childPeak = Math.max(childPeak, statusKb(pid, "VmRSS"))
  }, 10)
  let healthyAt = 0
  while (healthyAt === 0) {
    if (child.exitCode !== null) throw new Error(`the service exited during start-up: ${stderr}`)
    if (performance.now() - t0 > 120_000) {
      child.kill("SIGKILL")
      throw new Error("no healthy service within 120 s")
    }
    try {
      if ((await fetch(`http://127.0.0.1:${port}/v1/health`)).status === 200) healthyAt = performance.now()
    } catch {
      // not listening yet
    }
    if (healthyAt === 0) await new Promise((r) => setTimeout(r, 25))
  }
  clearInterval(sampler)
  const hwm = statusKb(child.pid!, "VmHWM")
  const rss = statusKb(child.pid!, "VmRSS")
  const stopping = performance.now()
  child.kill("SIGTERM")
  const code = await exited
  return {
    healthyMs: healthyAt - t0,
    hwm,
    sampledPeak,
    childPeak,
    rss,
    exitCode: code,
    stopMs: performance.now() - stopping
  }
}

execFileSync(process.execPath, ["scripts/build-server.mjs"], { cwd: ROOT, stdio: "inherit" })
console.log(`node ${process.version}, ${runs} run(s); target: peak RSS <= ${TARGET_MB} MB`)
console.log("start   healthy after   peak RSS (VmHWM)   peak RSS (sampled)   RSS when healthy   initdb child (sampled)   stop (exit code)")
for (let run = 0; run < runs; run++) {
  const dataDir = mkdtempSync(join(tmpdir(), "mailroom-bench-start-"))
  try {
    for (const label of ["first ", "second"]) {
      const r = await start(dataDir)
      const verdict = r.hwm / 1024 <= TARGET_MB ? "met" : "MISSED"
      console.log(
        `${label}  ${(r.healthyMs / 1000).toFixed(1).padStart(8)} s   ${mb(r.hwm).padStart(10)} MB ${verdict.padEnd(6)}  ` +
          `${mb(r.sampledPeak).padStart(12)} MB   ${mb(r.rss).padStart(13)} MB   ${(r.childPeak > 0 ? `${mb(r.childPeak)} MB` : "none").padStart(19)}   ` +
          `${(r.stopMs / 1000).toFixed(1)} s (${r.exitCode})`
      )
    }
  } finally {
    rmSync(dataDir, { recursive: true, force: true })
  }
}
