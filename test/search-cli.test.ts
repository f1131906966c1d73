/**
 * `mailroom threads list|get` and `mailroom search` as a subprocess against a running service:
 * readable tables (subject, from, date, score, legs) and `--json`; errors by exit code.
 */
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import nodemailer from "nodemailer"
import { Provisioning } from "../src/identity/Provisioning.js"
import { type CliEnv, runCli } from "./support/cli.js"
import { TestServer, testService } from "./support/harness.js"

const Env = Provisioning.Default.pipe(
  Layer.provideMerge(testService({ DNS_SERVER: "127.0.0.1:9", SEARCH_TIMEOUT: "20s" }, { embeddingBacklog: { pollMs: 50 } }))
)

const SLOW = 300_000

const newOrg = (plan: "developer" | "agent") =>
  Effect.gen(function*() {
    const p = yield* Provisioning
    const org = yield* p.createOrganization({ name: "Cli", plan })
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

layer(Env, { timeout: SLOW, excludeTestServices: true })("threads and search CLI", (it) => {
  describe("threads and search", () => {
    it.effect("lists and shows threads, searches with a table and --json", () =>
      Effect.gen(function*() {
        const org = yield* newOrg("developer")
        const server = yield* TestServer
        yield* Effect.promise(async () => {
          const t = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
          await t.sendMail({ from: "ada@example.com", to: org.inbox, subject: "Flight to Berlin", text: "Boarding pass attached.", messageId: "<cli-1@example.com>" })
          await t.sendMail({ from: "bob@example.com", to: org.inbox, subject: "Re: Flight to Berlin", text: "Have a good trip!", messageId: "<cli-2@example.com>", inReplyTo: "<cli-1@example.com>" })
          t.close()
        })

        const list = yield* cli(org.env, "threads", "list")
        expect(list.code, list.stderr).toBe(0)
        expect(list.stdout).toMatch(/^ID\s+SUBJECT\s+MESSAGES\s+LAST ACTIVITY\s+PARTICIPANTS/)
        expect(list.stdout).toContain("Flight to Berlin")
        expect(list.stdout).toContain("2 (2 in, 0 out)")
        const listed = json((yield* cli(org.env, "threads", "list", "--json")).stdout)
        expect(listed.meta.total).toBe(1)
        const id = listed.data[0].id as string

        const one = yield* cli(org.env, "threads", "get", id)
        expect(one.code, one.stderr).toBe(0)
        expect(one.stdout).toMatch(/subject\s+Flight to Berlin/)
        expect(one.stdout).toMatch(/received\s+ada@example.com/)
        expect(one.stdout).toMatch(/received\s+bob@example.com\s+Re: Flight to Berlin/)
        expect(json((yield* cli(org.env, "threads", "get", id, "--json")).stdout).messages.length).toBe(2)

        const found = yield* cli(org.env, "search", "boarding pass", "--mode", "lexical")
        expect(found.code, found.stderr).toBe(0)
        expect(found.stdout).toMatch(/^SUBJECT\s+FROM\s+DATE\s+SCORE\s+LEGS/)
        expect(found.stdout).toMatch(/Flight to Berlin\s+ada@example.com\s+\S+\s+[\d.]+\s+lexical/)
        expect(found.stderr).toContain("1 results (lexical,")
        const asJson = json((yield* cli(org.env, "search", "Berlin", "--scope", "received", "--limit", "5", "--json")).stdout)
        expect(asJson.meta.mode).toBe("hybrid")
        expect(asJson.data.results.length).toBe(2)
        expect(asJson.data.results[0].matched).toContain("lexical")

        const bad = yield* cli(org.env, "search", "x", "--mode", "fuzzy")
        expect(bad.code).toBe(2)
        const agent = yield* newOrg("agent")
        const denied = yield* cli(agent.env, "search", "Berlin")
        expect(denied.code).toBe(3)
        expect(denied.stderr).toContain("error: forbidden:")
        const missing = yield* cli(org.env, "threads", "get", "00000000-0000-4000-8000-000000000000")
        expect(missing.code).toBe(3)
        expect(missing.stderr).toContain("error: not_found:")
      }))
  })
})
