/**
 * `mailroom inboxes …` as a subprocess against a running service: create, list, get, rename and
 * delete; API errors exit 3 with their code, usage errors exit 2.
 */
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Provisioning } from "../src/identity/Provisioning.js"
import { type CliEnv, runCli } from "./support/cli.js"
import { TestServer, testService } from "./support/harness.js"

const Env = Provisioning.Default.pipe(Layer.provideMerge(testService({ DNS_SERVER: "127.0.0.1:9" })))

/** Every CLI run starts a Node process: seconds each on a busy machine. */
const SLOW = 300_000

const newOrg = Effect.gen(function*() {
  const p = yield* Provisioning
  const org = yield* p.createOrganization({ name: "Cli", plan: "developer" })
  const key = yield* p.issueApiKey(org.id)
  const server = yield* TestServer
  const env: CliEnv = {
    baseUrl: server.baseUrl,
    configHome: mkdtempSync(join(tmpdir(), "mailroom-cli-")),
    extra: { MAILROOM_API_KEY: key.apiKey }
  }
  return { env, address: org.managedInboxAddress! }
})

const cli = (env: CliEnv, ...args: Array<string>) => Effect.promise(() => runCli(args, env))
const json = (stdout: string) => JSON.parse(stdout) as Record<string, any>

layer(Env, { timeout: SLOW, excludeTestServices: true })("inboxes CLI", (it) => {
  describe("inboxes", () => {
    it.effect("create, list, get, rename, delete; errors by exit code", () =>
      Effect.gen(function*() {
        const org = yield* newOrg
        const username = `cli-${Math.random().toString(36).slice(2, 9)}`

        const created = yield* cli(org.env, "inboxes", "create", "--username", username, "--display-name", "Desk", "--json")
        expect(created.code, created.stderr).toBe(0)
        const inbox = json(created.stdout)
        expect(inbox).toMatchObject({ username, address: `${username}@agents.localhost`, display_name: "Desk", is_default: false })

        const listed = yield* cli(org.env, "inboxes", "list")
        expect(listed.code, listed.stderr).toBe(0)
        expect(listed.stdout).toContain(inbox.address)
        expect(listed.stdout).toContain(org.address)

        const shown = yield* cli(org.env, "inboxes", "get", inbox.id)
        expect(shown.code).toBe(0)
        expect(shown.stdout).toMatch(/display_name\s+Desk/)

        const renamed = yield* cli(org.env, "inboxes", "rename", inbox.id, "--username", `${username}-2`, "--clear-display-name", "--json")
        expect(renamed.code, renamed.stderr).toBe(0)
        expect(json(renamed.stdout)).toMatchObject({ address: `${username}-2@agents.localhost`, display_name: null })

        const nothing = yield* cli(org.env, "inboxes", "rename", inbox.id)
        expect(nothing.code).toBe(2)
        expect(nothing.stderr).toContain("nothing to change")

        const all = json((yield* cli(org.env, "inboxes", "list", "--json")).stdout)
        const def = all.data.find((i: { is_default: boolean }) => i.is_default)
        const refused = yield* cli(org.env, "inboxes", "delete", def.id)
        expect(refused.code).toBe(3)
        expect(refused.stderr).toContain("error: conflict:")

        const deleted = yield* cli(org.env, "inboxes", "delete", inbox.id, "--json")
        expect(deleted.code, deleted.stderr).toBe(0)
        const gone = yield* cli(org.env, "inboxes", "get", inbox.id)
        expect(gone.code).toBe(3)
        expect(gone.stderr).toContain("error: not_found:")
      }))
  })
})
