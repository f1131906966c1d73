/**
 * The README's five-minute walkthrough, run as written: its shell blocks, joined in order, through
 * bash against a fresh service on free ports (the walkthrough reads them from MAILROOM_URL,
 * SMTP_PORT and RECEIVER_PORT, which default to what `npm start` uses). The README stays short too.
 */
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { freePort, TestServer, testService } from "./support/harness.js"
import { runBash, sectionBlocks } from "./support/shell.js"

const ROOT = new URL("../", import.meta.url).pathname
const README = readFileSync(join(ROOT, "README.md"), "utf8")

/** The fenced `sh` blocks of one `## ` section. */

layer(testService(), { timeout: 240_000, excludeTestServices: true })("README", (it) => {
  it("starts with the two commands and stays under 200 lines", () => {
    const lines = README.split("\n")
    expect(lines.length).toBeLessThan(200)
    const firstBlock = /```sh\n([\s\S]*?)```/.exec(README)![1]!
    expect(firstBlock).toMatch(/^npm install && npm start\s+#/m)
    expect(firstBlock).toMatch(/^npm install && npm test\s+#/m)
  })

  it.effect("the five-minute walkthrough works when pasted", () =>
    Effect.gen(function*() {
      const server = yield* TestServer
      const blocks = sectionBlocks(README, "Five-minute walkthrough")
      // The first block starts the service; this test's service is that one (private URLs allowed).
      expect(blocks[0]!.trim()).toBe("WEBHOOK_ALLOW_PRIVATE_URLS=true npm start")
      expect(blocks.length).toBeGreaterThan(4)
      const receiverPort = yield* Effect.promise(freePort)
      const config = mkdtempSync(join(tmpdir(), "mailroom-readme-"))
      const env: Record<string, string> = {}
      for (const [k, v] of Object.entries(process.env)) {
        if (v !== undefined && !k.startsWith("MAILROOM_") && !k.startsWith("VITEST") && k !== "NODE_OPTIONS") env[k] = v
      }
      Object.assign(env, {
        MAILROOM_URL: server.baseUrl,
        SMTP_PORT: String(server.smtpPort),
        RECEIVER_PORT: String(receiverPort),
        XDG_CONFIG_HOME: config
      })
      const result = yield* Effect.promise(() => runBash(blocks.slice(1).join("\n"), ROOT, env, 200_000)).pipe(
        Effect.ensuring(Effect.sync(() => rmSync(config, { recursive: true, force: true })))
      )
      const transcript = `${result.stdout}\n--- stderr ---\n${result.stderr}`
      expect(result.code, transcript).toBe(0)
      expect(result.stdout, transcript).toMatch(/^inbox: agent-[a-z0-9]+@agents\.localhost$/m)
      expect(result.stdout, transcript).toMatch(/^SMTP: 250 /m)
      expect(result.stdout, transcript).toContain(`/webhooks: email.received "Hello agent", signature valid`)
      expect(result.stdout, transcript).toMatch(/^delivered after 1 attempt\(s\): email\.received /m)
      expect(result.stdout, transcript).toContain(`/from-listen: email.received "Hello again", signature valid`)
      expect(result.stdout, transcript).not.toContain("INVALID")
    }))
})
