/**
 * `mailroom registries …` as a subprocess against a running service, with three organizations'
 * API keys: create, list, show, update, publish (pending under `request`), entries, entry, approve,
 * reject, unpublish and delete; API errors exit 3 with their code, usage errors exit 2.
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
  return { env, inbox: org.managedInboxAddress }
})

const cli = (env: CliEnv, ...args: Array<string>) => Effect.promise(() => runCli(args, env))
const json = (stdout: string) => JSON.parse(stdout) as Record<string, any>

layer(Env, { timeout: SLOW, excludeTestServices: true })("registries CLI", (it) => {
  describe("registries", () => {
    it.effect("create, publish under request, approve, reject, resolve, unpublish, delete; errors by exit code", () =>
      Effect.gen(function*() {
        const a = yield* newOrg
        const b = yield* newOrg
        const c = yield* newOrg
        const name = `cli-${Math.random().toString(36).slice(2, 9)}`

        const created = yield* cli(a.env, "registries", "create", name, "--policy", "request", "--description", "Partners", "--json")
        expect(created.code, created.stderr).toBe(0)
        expect(json(created.stdout)).toMatchObject({ name, publish_policy: "request", description: "Partners", is_owner: true })
        const taken = yield* cli(b.env, "registries", "create", name)
        expect(taken.code).toBe(3)
        expect(taken.stderr).toContain("error: conflict:")

        const shown = yield* cli(c.env, "registries", "show", name)
        expect(shown.code).toBe(0)
        expect(shown.stdout).toMatch(/publish_policy\s+request/)
        expect(shown.stdout).toMatch(/is_owner\s+false/)
        const mine = yield* cli(a.env, "registries", "list", "--owned", "--json")
        expect(json(mine.stdout).data.map((r: { name: string }) => r.name)).toEqual([name])

        const published = yield* cli(
          b.env,
          "registries", "publish", name, "--handle", "b-agent", "--address", b.inbox,
          "--capabilities", "invoices.read, invoices.pay", "--metadata", "{\"tier\":1}"
        )
        expect(published.code, published.stderr).toBe(0)
        expect(published.stdout).toMatch(/status\s+pending/)
        expect(published.stderr).toContain("pending")
        const own = yield* cli(a.env, "registries", "publish", name, "--handle", "a-agent", "--address", a.inbox, "--json")
        expect(json(own.stdout)).toMatchObject({ handle: "a-agent", status: "published", capabilities: [], metadata: {} })

        const pending = yield* cli(a.env, "registries", "entries", name, "--status", "pending")
        expect(pending.code).toBe(0)
        expect(pending.stdout).toContain("b-agent")
        expect(pending.stdout).not.toContain("a-agent")
        const seenByC = yield* cli(c.env, "registries", "entries", name, "--json")
        expect(json(seenByC.stdout).data.map((e: { handle: string }) => e.handle)).toEqual(["a-agent"])

        for (const other of [b, c]) {
          const refused = yield* cli(other.env, "registries", "approve", name, "b-agent")
          expect(refused.code).toBe(3)
          expect(refused.stderr).toContain("error: forbidden:")
        }
        const approved = yield* cli(a.env, "registries", "approve", name, "b-agent", "--json")
        expect(approved.code).toBe(0)
        expect(json(approved.stdout)).toMatchObject({ handle: "b-agent", status: "published", capabilities: ["invoices.read", "invoices.pay"], metadata: { tier: 1 } })
        const resolved = yield* cli(c.env, "registries", "entry", name, "b-agent", "--json")
        expect(json(resolved.stdout)).toMatchObject({ address: b.inbox, status: "published", publisher_is_you: false })

        const wrongAddress = yield* cli(c.env, "registries", "publish", name, "--handle", "c-agent", "--address", a.inbox, "--json")
        expect(wrongAddress.code).toBe(3)
        expect(json(wrongAddress.stderr).error).toMatchObject({ code: "cannot_send_from_domain", details: { valid_senders: [c.inbox] } })
        const wrongForPeople = yield* cli(c.env, "registries", "publish", name, "--handle", "c-agent", "--address", a.inbox)
        expect(wrongForPeople.code).toBe(3)
        expect(wrongForPeople.stderr).toContain(`error: cannot_send_from_domain:`)
        expect(wrongForPeople.stderr).toContain(`valid senders: ${c.inbox}`)
        yield* cli(c.env, "registries", "publish", name, "--handle", "c-agent", "--address", c.inbox)
        const rejected = yield* cli(a.env, "registries", "reject", name, "c-agent", "--json")
        expect(json(rejected.stdout)).toMatchObject({ handle: "c-agent", status: "rejected" })
        const gone = yield* cli(a.env, "registries", "reject", name, "c-agent")
        expect(gone.code).toBe(3)
        expect(gone.stderr).toContain("error: not_found:")

        const unpublished = yield* cli(b.env, "registries", "unpublish", name, "b-agent", "--json")
        expect(json(unpublished.stdout)).toMatchObject({ handle: "b-agent", publisher_is_you: true })

        const filter = yield* cli(c.env, "filters", "add", "--type", "registry", "--pattern", name, "--json")
        expect(filter.code, filter.stderr).toBe(0)
        expect(json(filter.stdout)).toMatchObject({ type: "registry", pattern: name })

        const updated = yield* cli(a.env, "registries", "update", name, "--policy", "open", "--description", "none", "--json")
        expect(json(updated.stdout)).toMatchObject({ publish_policy: "open", description: null })
        const notOwner = yield* cli(b.env, "registries", "delete", name)
        expect(notOwner.code).toBe(3)
        const deleted = yield* cli(a.env, "registries", "delete", name, "--json")
        expect(json(deleted.stdout)).toMatchObject({ name, entry_count: 1 })
        const after = yield* cli(c.env, "registries", "show", name)
        expect(after.code).toBe(3)
        expect(after.stderr).toContain("error: not_found:")

        // Usage errors never reach the API.
        const missing = yield* cli(a.env, "registries", "publish", name, "--address", a.inbox)
        expect(missing.code).toBe(2)
        expect(missing.stderr).toContain("--handle")
        const badPolicy = yield* cli(a.env, "registries", "create", "x-reg", "--policy", "everyone")
        expect(badPolicy.code).toBe(2)
        const nothing = yield* cli(a.env, "registries", "update", name)
        expect(nothing.code).toBe(2)
      }), SLOW)
  })
})
