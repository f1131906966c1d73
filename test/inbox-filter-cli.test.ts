/**
 * `--inbox-id` on `mailroom emails list`, `threads list`, `sent list` and `search`, as a subprocess
 * against a running service: each lists only what reached (or left from) that inbox; a malformed id
 * is a usage error (exit 2).
 */
import { expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import nodemailer from "nodemailer"
import { Provisioning } from "../src/identity/Provisioning.js"
import { type CliEnv, type CliResult, runCli } from "./support/cli.js"
import { TestServer, testService } from "./support/harness.js"
import { call } from "./support/http.js"

const Env = Provisioning.Default.pipe(Layer.provideMerge(testService({ DNS_SERVER: "127.0.0.1:9" })))

/** Every CLI run starts a Node process: seconds each on a busy machine. */
const SLOW = 300_000

const cli = (env: CliEnv, ...args: Array<string>) => Effect.promise(() => runCli(args, env))
const json = (stdout: string) => JSON.parse(stdout) as Record<string, any>

const mailIn = (to: string, subject: string) =>
  Effect.flatMap(TestServer, (server) =>
    Effect.promise(async () => {
      const t = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
      try {
        await t.sendMail({ from: "writer@example.com", to, subject, text: `about ${subject}` })
      } finally {
        t.close()
      }
    }))

layer(Env, { timeout: SLOW, excludeTestServices: true })("--inbox-id in the CLI", (it) => {
  it.effect("emails list, threads list, sent list and search keep to one inbox; a malformed id exits 2", () =>
    Effect.gen(function*() {
      const p = yield* Provisioning
      const org = yield* p.createOrganization({ name: "Cli inbox filter", plan: "developer" })
      const token = (yield* p.issueApiKey(org.id)).apiKey
      const server = yield* TestServer
      const env: CliEnv = {
        baseUrl: server.baseUrl,
        configHome: mkdtempSync(join(tmpdir(), "mailroom-cli-")),
        extra: { MAILROOM_API_KEY: token }
      }
      const tag = Math.random().toString(36).slice(2, 9)
      const created = yield* call("POST", "/v1/inboxes", { token, body: { username: `desk-${tag}` } })
      expect(created.status, created.text).toBe(201)
      const inbox = created.body.data as { id: string; address: string }

      yield* mailIn(inbox.address, `quote ${tag} desk`)
      yield* mailIn(org.managedInboxAddress!, `quote ${tag} default`)
      const sentDesk = yield* call("POST", "/v1/send-mail", {
        token,
        body: { from: inbox.address, to: "ada@example.com", subject: `reply ${tag} desk`, text: "x" }
      })
      expect(sentDesk.status, sentDesk.text).toBe(201)
      const sentDefault = yield* call("POST", "/v1/send-mail", {
        token,
        body: { from: org.managedInboxAddress, to: "ada@example.com", subject: `reply ${tag} default`, text: "x" }
      })
      expect(sentDefault.status, sentDefault.text).toBe(201)

      type Listed = ReadonlyArray<{ readonly subject: string }>
      /** The subjects a `--json` list (`data`) or search (`data.results`) printed, sorted. */
      const subjects = (r: CliResult) => {
        expect(r.code, r.stderr).toBe(0)
        const { data } = json(r.stdout) as { readonly data: Listed | { readonly results: Listed } }
        return ("results" in data ? data.results : data).map((e) => e.subject).sort()
      }
      expect(subjects(yield* cli(env, "emails", "list", "--json"))).toEqual([`quote ${tag} default`, `quote ${tag} desk`])
      expect(subjects(yield* cli(env, "emails", "list", "--inbox-id", inbox.id, "--json"))).toEqual([`quote ${tag} desk`])
      expect(subjects(yield* cli(env, "threads", "list", "--inbox-id", inbox.id, "--json")))
        .toEqual([`quote ${tag} desk`, `reply ${tag} desk`])
      expect(subjects(yield* cli(env, "sent", "list", "--inbox-id", inbox.id, "--json"))).toEqual([`reply ${tag} desk`])
      expect(subjects(yield* cli(env, "search", tag, "--mode", "lexical", "--json"))).toHaveLength(4)
      expect(subjects(yield* cli(env, "search", tag, "--mode", "lexical", "--inbox-id", inbox.id, "--json")))
        .toEqual([`quote ${tag} desk`, `reply ${tag} desk`])
      // The table names the filter's inbox too (not only --json).
      const table = yield* cli(env, "emails", "list", "--inbox-id", inbox.id)
      expect(table.code, table.stderr).toBe(0)
      expect(table.stdout).toContain(`quote ${tag} desk`)
      expect(table.stdout).not.toContain(`quote ${tag} default`)

      for (const args of [["emails", "list"], ["threads", "list"], ["sent", "list"], ["search", tag]]) {
        const bad = yield* cli(env, ...args, "--inbox-id", "not-a-uuid")
        expect(bad.code, args.join(" ")).toBe(2)
        expect(bad.stderr).toContain("--inbox-id")
      }
    }))
})
