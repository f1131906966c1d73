/**
 * Once per test run: the CLI bundled from the current sources (scripts/build-cli.ts), so every CLI
 * subprocess in the suite starts from one module instead of loading the sources through tsx; and the
 * test browser unpacked (test/support/browser.ts) before the workers that launch it start. The
 * bundle `bin/mailroom.js` runs (dist/cli, built by `npm install`) is rebuilt too: the README and
 * quickstart walkthroughs call the CLI as a user does, and must run today's sources, not the install's.
 */
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import type { TestProject } from "vitest/node"
import { buildCli } from "../../scripts/build-cli.js"
import { testBrowserExecutable } from "./browser.js"

declare module "vitest" {
  export interface ProvidedContext {
    cliBundle: string
  }
}

export default async function setup(project: TestProject) {
  const dir = mkdtempSync(join(tmpdir(), "mailroom-cli-"))
  const dist = fileURLToPath(new URL("../../dist/cli", import.meta.url))
  const [bundle] = await Promise.all([buildCli(dir), buildCli(dist), testBrowserExecutable()])
  project.provide("cliBundle", bundle)
  return () => rmSync(dir, { recursive: true, force: true })
}
