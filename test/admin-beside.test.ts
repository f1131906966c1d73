/**
 * The operator command beside a running service on the embedded database: the service holds the
 * database's files, so `npm run admin` hands its command line to the service over DATA_DIR/admin.sock
 * and the service runs it on its own database (with the service stopped, the command opens the files
 * itself, as test/database.test.ts shows).
 */
import { describe, expect, it } from "vitest"
import { type ChildProcess, execFile, spawn } from "node:child_process"
import { mkdtempSync, rmSync, statSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { freePort } from "./support/harness.js"

const ROOT = new URL("../", import.meta.url).pathname

const childEnv = (extra: Record<string, string>) => {
  const out: Record<string, string> = {}
  for (const [k, v] of Object.entries(process.env)) {
    if (v !== undefined && k !== "DATABASE_URL" && !k.startsWith("VITEST") && k !== "NODE_OPTIONS" && !k.startsWith("npm_")) out[k] = v
  }
  return { ...out, LOG_LEVEL: "warning", ...extra }
}

const admin = (args: ReadonlyArray<string>, env: Record<string, string>) =>
  new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
    execFile(process.execPath, ["--import", "tsx", "src/admin.ts", ...args], { cwd: ROOT, env: childEnv(env), timeout: 60_000 }, (err, stdout, stderr) =>
      resolve({ code: err === null ? 0 : typeof err.code === "number" ? err.code : 1, stdout, stderr }))
  })

const healthy = async (port: number) => {
  try {
    return (await fetch(`http://127.0.0.1:${port}/v1/health`)).status === 200
  } catch {
    return false
  }
}

describe("the operator command beside a running service", () => {
  it("creates an organization and changes its plan through the service's operator socket", async () => {
    const dir = mkdtempSync(join(tmpdir(), "mailroom-admin-beside-"))
    const port = await freePort()
    const env = { DATA_DIR: dir, PORT: String(port), SMTP_PORT: String(await freePort()) }
    let service: ChildProcess | undefined
    try {
      service = spawn(process.execPath, ["--import", "tsx", "src/main.ts"], { cwd: ROOT, env: childEnv(env), stdio: "ignore" })
      const deadline = Date.now() + 120_000
      while (!(await healthy(port))) {
        if (Date.now() > deadline || service.exitCode !== null) throw new Error("the service did not start")
        await new Promise((r) => setTimeout(r, 250))
      }
      // Only the service's user may use the socket.
      expect(statSync(join(dir, "admin.sock")).mode & 0o777).toBe(0o600)

      const created = await admin(["create-org", "Beside", "--plan", "developer"], { DATA_DIR: dir })
      expect(created.code, created.stderr).toBe(0)
      const orgId = /org_id=([0-9a-f-]{36})/.exec(created.stdout)?.[1]
      const apiKey = /api_key=(mr_live_\S+)/.exec(created.stdout)?.[1]
      expect(orgId, created.stdout).toBeDefined()
      const account = async () =>
        (await (await fetch(`http://127.0.0.1:${port}/v1/account`, { headers: { authorization: `Bearer ${apiKey}` } })).json()) as {
          data: { id: string; plan: string }
        }
      expect((await account()).data).toMatchObject({ id: orgId, plan: "developer" })

      const upgraded = await admin(["set-plan", orgId!, "pro"], { DATA_DIR: dir })
      expect(upgraded.code, upgraded.stderr).toBe(0)
      expect(upgraded.stdout).toContain(`org_id=${orgId} plan=pro`)
      expect((await account()).data.plan).toBe("pro")
      // A refusal keeps its message and exit code across the socket.
      const unknown = await admin(["set-plan", "00000000-0000-4000-8000-000000000000", "pro"], { DATA_DIR: dir })
      expect(unknown.code).toBe(1)
      expect(unknown.stderr).toContain("no organization 00000000-0000-4000-8000-000000000000")
    } finally {
      if (service !== undefined && service.exitCode === null) {
        const exited = new Promise((r) => service!.once("exit", r))
        service.kill("SIGTERM")
        await exited
      }
      rmSync(dir, { recursive: true, force: true })
    }
  }, 240_000)
})
