/**
 * CLI start-up: the median wall time of `mailroom --help` and of `mailroom whoami --json` against a
 * running service, next to `node -e 0` on the same machine, each run as a fresh process the way a
 * user's shell runs it (`node bin/mailroom.js …`, i.e. the bundle built by `npm run build:cli`).
 * Targets: --help ≤ 4× and an API command ≤ 6× `node -e 0`.
 *
 *   npx tsx scripts/bench-cli.ts [--runs 21]
 */
import { execFileSync, spawnSync } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { arg, scratch, startService } from "./bench-support.js"

const ROOT = fileURLToPath(new URL("../", import.meta.url))
const runs = arg("runs", 21)

execFileSync(process.execPath, ["--import", "tsx", "scripts/build-cli.ts"], { cwd: ROOT, stdio: "inherit" })

/** Modules in the CLI bundle that belong to the service: none may be there. */
const meta = JSON.parse(readFileSync(join(ROOT, "dist/cli/meta.json"), "utf8")) as { inputs: Record<string, unknown> }
const serverModules = Object.keys(meta.inputs).filter((f) =>
  /src\/(platform|net|inbound|delivery|mail)\/|src\/Server\.ts|src\/[a-z]+\/(Http|Repo)\.ts|@electric-sql|node_modules\/pg\/|@effect\/sql/.test(f)
)

const median = (xs: ReadonlyArray<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.floor(s.length / 2)]!
}

const time = (args: ReadonlyArray<string>, env: NodeJS.ProcessEnv) => {
  const t0 = performance.now()
  const r = spawnSync(process.execPath, [...args], { cwd: ROOT, env, encoding: "utf8" })
  const ms = performance.now() - t0
  if (r.status !== 0) throw new Error(`${args.join(" ")} exited ${r.status}: ${r.stderr}`)
  return ms
}

const s = await scratch("bench-cli")
const service = await startService(s.env)
const configHome = mkdtempSync(join(tmpdir(), "mailroom-bench-cli-"))
try {
  const created = await fetch(`${service.baseUrl}/v1/agent/accounts`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ terms_accepted: true })
  })
  const key = ((await created.json()) as { data: { api_key: string } }).data.api_key
  const env = {
    ...process.env,
    XDG_CONFIG_HOME: configHome,
    MAILROOM_BASE_URL: `${service.baseUrl}/v1`,
    MAILROOM_API_KEY: key,
    NO_COLOR: "1"
  }
  const cli = join(ROOT, "bin/mailroom.js")
  // Warm the file cache and the service once; then interleave so a busy moment hits every case alike.
  time(["-e", "0"], env)
  time([cli, "--help"], env)
  time([cli, "whoami", "--json"], env)
  const node: Array<number> = []
  const help: Array<number> = []
  const whoami: Array<number> = []
  for (let i = 0; i < runs; i++) {
    node.push(time(["-e", "0"], env))
    help.push(time([cli, "--help"], env))
    whoami.push(time([cli, "whoami", "--json"], env))
  }
  const base = median(node)
  const row = (name: string, xs: ReadonlyArray<number>) =>
    `${name.padEnd(26)} ${median(xs).toFixed(0).padStart(6)} ms  ${(median(xs) / base).toFixed(2)}× node -e 0`
  console.log(`CLI start-up, median of ${runs} runs (${process.version})`)
  console.log(row("node -e 0", node))
  console.log(row("mailroom --help", help))
  console.log(row("mailroom whoami --json", whoami))
  console.log(`targets: --help ≤ 4×, whoami ≤ 6×`)
  console.log(`service modules in the CLI bundle: ${serverModules.length === 0 ? "none" : serverModules.join(", ")}`)
} finally {
  await service.stop()
  await s.cleanup()
  rmSync(configHome, { recursive: true, force: true })
}
