/**
 * docs/quickstart.md, run as written: the README's walkthrough, then the quickstart's shell blocks in
 * the same bash, against a fresh service (its DATA_DIR holds the dev outbox the claim code is read
 * from). A newcomer following only the docs reaches a claimed account, a function that answers mail,
 * a send, a search and a wake.
 */
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { AppConfig } from "../src/platform/Config.js"
import { freePort, TestServer, testService } from "./support/harness.js"
import { blocksOf, runBash, sectionBlocks } from "./support/shell.js"

const ROOT = new URL("../", import.meta.url).pathname
const README = readFileSync(join(ROOT, "README.md"), "utf8")
const QUICKSTART = readFileSync(join(ROOT, "docs/quickstart.md"), "utf8")


layer(testService(), { timeout: 300_000, excludeTestServices: true })("quickstart", (it) => {
  it("the README links it", () => {
    expect(README).toContain("(docs/quickstart.md)")
  })

  // The whole walkthrough (deploy a function, mail it, send, search, a wake): about 25 s on a loaded
  // two-core machine, and over a minute while the other database's suite runs beside it.
  it.effect("the walkthrough, then the agent loop: claim, a function that replies, send, search, a wake", () =>
    Effect.gen(function*() {
      const server = yield* TestServer
      const config = yield* AppConfig
      const walkthrough = sectionBlocks(README, "Five-minute walkthrough").slice(1)
      const quickstart = blocksOf(QUICKSTART)
      expect(quickstart.length).toBeGreaterThan(5)
      const receiverPort = yield* Effect.promise(freePort)
      const home = mkdtempSync(join(tmpdir(), "mailroom-quickstart-"))
      const env: Record<string, string> = {}
      for (const [k, v] of Object.entries(process.env)) {
        if (v !== undefined && !k.startsWith("MAILROOM_") && !k.startsWith("VITEST") && k !== "NODE_OPTIONS") env[k] = v
      }
      Object.assign(env, {
        MAILROOM_URL: server.baseUrl,
        SMTP_PORT: String(server.smtpPort),
        RECEIVER_PORT: String(receiverPort),
        DATA_DIR: config.dataDir,
        XDG_CONFIG_HOME: home
      })
      const result = yield* Effect.promise(() => runBash([...walkthrough, ...quickstart].join("\n"), ROOT, env, 280_000)).pipe(
        Effect.ensuring(Effect.sync(() => rmSync(home, { recursive: true, force: true })))
      )
      const transcript = `${result.stdout}\n--- stderr ---\n${result.stderr}`
      expect(result.code, transcript).toBe(0)
      expect(result.stdout, transcript).toMatch(/^Claimed: organization [0-9a-f-]{36} now belongs to you@example\.com \(plan developer\)\.$/m)
      expect(result.stdout, transcript).toMatch(/^function: [0-9a-f-]{36}$/m)
      // The function's reply, listed as sent; then the send without --from.
      expect(result.stdout, transcript).toMatch(/\bsent\b.*Re: Can you help\?/)
      expect(result.stdout, transcript).toMatch(/^Sent [0-9a-f-]{36} to alice@example\.com/m)
      // The search finds the mail that came in.
      expect(result.stdout, transcript).toMatch(/Can you help\?/)
      // The wake reached the function.
      expect(result.stdout, transcript).toContain(`| woke up: hello {"say":"good morning"}`)
      expect(result.stdout, transcript).toMatch(/replied to alice@example\.com: HTTP 201/)
    }), 180_000)
})
