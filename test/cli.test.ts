/**
 * The `mailroom` CLI as a subprocess against a running service: device login approved in headless
 * Chromium, token refresh, agent accounts, endpoints, deliveries, raw emails, `listen` forwarding a
 * real inbound message with a signature that verifies, and the exit codes of each failure class.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { inject } from "vitest"
import { Effect, Layer } from "effect"
import { execFile } from "node:child_process"
import { createHmac } from "node:crypto"
import { mkdtempSync, readFileSync, statSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import nodemailer from "nodemailer"
import pkg from "../package.json" with { type: "json" }
import { renderHelp } from "../src/cli/Help.js"
import { CREDENTIAL_CACHE_TTL_MS } from "../src/platform/Credentials.js"
import { type Node, root } from "../src/cli/Tree.js"
import { TestBrowser, TestBrowserLive } from "./support/browser.js"
import { type CliEnv, runCli, startCli } from "./support/cli.js"
import { freePort, TestServer, usingRealPostgres } from "./support/harness.js"
import { call } from "./support/http.js"
import { identityService, resetLimits, signUp, uniqueEmail } from "./support/identity.js"
import { startReceiver } from "./support/receiver.js"
import { codeOf, SmtpSink } from "./support/smtpSink.js"

/** Every CLI run starts a Node process that loads Effect and the contract: seconds each on a busy machine. */
const SLOW = 480_000


const Env = Layer.mergeAll(identityService({ LOG_LEVEL: "warning" }), TestBrowserLive)

/** A fresh config directory per scenario: profiles never leak between tests. */
const cliEnv = Effect.map(TestServer, (server): CliEnv => ({
  baseUrl: server.baseUrl,
  configHome: mkdtempSync(join(tmpdir(), "mailroom-cli-"))
}))

const cli = (env: CliEnv, ...args: Array<string>) => Effect.promise(() => runCli(args, env))

const configOf = (env: CliEnv) =>
  JSON.parse(readFileSync(join(env.configHome, "mailroom", "config.json"), "utf8")) as {
    profiles: Record<string, Record<string, string>>
  }

/** Signs in on the `/device` page with the mailed code and approves the login. */
const approveInBrowser = (uri: string, userCode: string, email: string) =>
  Effect.gen(function*() {
    const sink = yield* SmtpSink
    const browser = yield* TestBrowser
    const seen = sink.count(email)
    return yield* Effect.promise(async () => {
      const context = await browser.newContext()
      try {
        const page = await context.newPage()
        await page.goto(uri)
        expect(await page.locator("#user-code").textContent()).toBe(userCode)
        await page.getByLabel("Email").fill(email)
        await page.getByRole("button", { name: "Send code" }).click()
        await page.getByLabel("Code").waitFor({ timeout: 10_000 })
        await page.getByLabel("Code").fill(codeOf(await sink.next(email, seen)))
        await page.getByRole("button", { name: "Sign in" }).click()
        await page.getByRole("button", { name: "Approve" }).click()
        await page.waitForURL(/done=/)
        return (await page.locator("body").textContent()) ?? ""
      } finally {
        await context.close()
      }
    })
  })

/** Independent of src/webhooks: HMAC-SHA256(secret, "<t>.<body>") as the receiver's docs describe it. */
const verifySignature = (secret: string, body: string, header: string) => {
  const t = /(?:^|,)t=(\d+)/.exec(header)?.[1]
  const v1 = /(?:^|,)v1=([0-9a-f]{64})/.exec(header)?.[1]
  if (t === undefined || v1 === undefined) return false
  const expected = createHmac("sha256", secret).update(`${t}.${body}`).digest("hex")
  return expected === v1 && Math.abs(Date.now() / 1000 - Number(t)) < 300
}

const waitUntil = <A>(what: string, probe: Effect.Effect<A | undefined>, timeoutMs = 20_000) =>
  Effect.gen(function*() {
    const deadline = Date.now() + timeoutMs
    for (;;) {
      const value = yield* probe
      if (value !== undefined) return value
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
      yield* Effect.sleep("100 millis")
    }
  })

const sendMail = (to: string, subject: string) =>
  Effect.flatMap(TestServer, (server) =>
    Effect.promise(async () => {
      const transport = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
      try {
        return await transport.sendMail({ from: "Ada <ada@example.com>", to, subject, text: "hello from the test" })
      } finally {
        transport.close()
      }
    }))

layer(Env, { timeout: 240_000, excludeTestServices: true })("cli", (it) => {
  describe("credentials", () => {
    it.effect("login runs the device flow approved in Chromium, stores 0600 tokens, refreshes them and logs out", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const env = yield* cliEnv
        const email = uniqueEmail("cli-login")
        yield* signUp("cli", email)

        const login = startCli(["login", "--no-browser", "--device-name", "ci laptop"], env)
        const shown = yield* Effect.promise(() => login.waitFor(/approve the code ([A-Z]{4}-[A-Z]{4}):\s+(\S+)/))
        const [, userCode, uri] = shown
        expect(uri).toContain(`user_code=${userCode}`)
        const page = yield* approveInBrowser(uri!, userCode!, email)
        expect(page).toContain("Approved")
        const result = yield* Effect.promise(() => login.exit)
        expect(result.stderr).toContain(uri!)
        expect(result.code).toBe(0)
        expect(result.stdout).toContain("Logged in to organization")

        const file = join(env.configHome, "mailroom", "config.json")
        expect(statSync(file).mode & 0o777).toBe(0o600)
        const stored = configOf(env).profiles.default!
        expect(stored.auth_method).toBe("oauth")
        expect(stored.access_token).toMatch(/^mr_at_/)
        expect(stored.refresh_token).toMatch(/^mr_rt_/)
        expect(stored.base_url).toBe(`${env.baseUrl}/v1`)
        const sql = yield* SqlClient.SqlClient
        const grant = yield* sql<{ device_name: string }>`SELECT device_name FROM oauth_grants WHERE id = ${stored.oauth_grant_id!}`
        expect(grant[0]?.device_name).toBe("ci laptop")

        const who = yield* cli(env, "whoami", "--json")
        expect(who.code).toBe(0)
        expect(JSON.parse(who.stdout)).toMatchObject({ email, credential: "oauth", profile: "default" })

        // An expired access token is refreshed before the call; the rotated set is written back.
        const expired = { ...stored, expires_at: new Date(Date.now() - 1000).toISOString() }
        writeFileSync(file, JSON.stringify({ profiles: { default: expired } }), { mode: 0o600 })
        const refreshed = yield* cli(env, "account", "show", "--json")
        expect(refreshed.code).toBe(0)
        expect(JSON.parse(refreshed.stdout).email).toBe(email)
        const after = configOf(env).profiles.default!
        expect(after.refresh_token).not.toBe(stored.refresh_token)
        expect(after.access_token).not.toBe(stored.access_token)
        expect(new Date(after.expires_at!).getTime()).toBeGreaterThan(Date.now() + 3000_000)
        expect(statSync(file).mode & 0o777).toBe(0o600)

        // A revoked access token (401) with a valid refresh token: one refresh, one retry.
        yield* sql`UPDATE oauth_grants SET access_expires_at = now() - interval '1 minute' WHERE id = ${after.oauth_grant_id!}`
        // A change made behind the service's back reaches its credential cache by NOTIFY on
        // PostgreSQL; the embedded database has none, so there the cached entry runs out first.
        if (!usingRealPostgres()) yield* Effect.sleep(CREDENTIAL_CACHE_TTL_MS + 200)
        const rotated = configOf(env).profiles.default!
        const retried = yield* cli(env, "whoami")
        expect(retried.code).toBe(0)
        expect(retried.stdout).toContain(email)
        const third = configOf(env).profiles.default!
        expect(third.refresh_token).not.toBe(rotated.refresh_token)

        const out = yield* cli(env, "logout")
        expect(out.code).toBe(0)
        expect(out.stdout).toContain("Revoked")
        expect(configOf(env).profiles.default).toEqual({ base_url: `${env.baseUrl}/v1` })
        const gone = yield* cli(env, "whoami")
        expect(gone.code).toBe(1)
        expect(gone.stderr).toContain("not logged in")
        // The revoked token no longer works on the API either.
        const direct = yield* Effect.promise(() =>
          fetch(`${env.baseUrl}/v1/account`, { headers: { authorization: `Bearer ${third.access_token}` } }))
        expect(direct.status).toBe(401)
      }), SLOW)

    it.effect("signup asks for the mailed code on stdin; profiles keep separate credentials", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const env = yield* cliEnv
        const sink = yield* SmtpSink
        const email = uniqueEmail("cli-signup")
        const run = startCli(["signup", "--email", email, "--accept-terms", "--profile", "work"], env, { open: true })
        yield* Effect.promise(() => run.waitFor(/Code sent to/))
        const code = codeOf(yield* Effect.promise(() => sink.next(email, 0)))
        run.child.stdin.end(`${code}\n`)
        const result = yield* Effect.promise(() => run.exit)
        expect(result.code).toBe(0)
        // Where the code is when the service has no relay: its dev outbox, and its log.
        expect(result.stderr).toContain(`code was sent to ${email}`)
        expect(result.stderr).toContain("DATA_DIR/outbox/*.eml")
        expect(Object.keys(configOf(env).profiles)).toEqual(["work"])
        const who = yield* cli(env, "whoami", "--profile", "work", "--json")
        expect(JSON.parse(who.stdout)).toMatchObject({ email, profile: "work" })
        const other = yield* cli(env, "whoami")
        expect(other.code).toBe(1)
      }), SLOW)
  })

  describe("codes as flags (no terminal)", () => {
    it.effect("signup and claim stop once the code is mailed; a second run with --code verifies that code", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const sink = yield* SmtpSink
        // Sign-up: stdin closed, as an agent runs it.
        const env = yield* cliEnv
        const email = uniqueEmail("cli-scripted")
        const started = yield* cli(env, "signup", "--email", email, "--accept-terms")
        expect(started.code, started.stderr).toBe(0)
        expect(started.stdout).toContain(`mailroom signup --email ${email} --code CODE`)
        const code = codeOf(yield* Effect.promise(() => sink.next(email, 0)))
        const mailed = sink.count(email)
        const finished = yield* cli(env, "signup", "--email", email, "--code", code, "--json")
        expect(finished.code, finished.stderr).toBe(0)
        // No second code was mailed: the first one was verified.
        expect(sink.count(email)).toBe(mailed)
        expect(configOf(env).profiles.default).not.toHaveProperty("pending_signup")
        expect(JSON.parse((yield* cli(env, "whoami", "--json")).stdout)).toMatchObject({ email, plan: "developer" })
        // --code with nothing started: says what to run first.
        const orphan = yield* cli(env, "signup", "--email", uniqueEmail("cli-none"), "--code", "123456")
        expect(orphan.code).toBe(2)
        expect(orphan.stderr).toContain("first (it mails the code)")

        // Claim of an agent account, in two runs.
        const agentEnv = yield* cliEnv
        expect((yield* cli(agentEnv, "agent", "create", "--accept-terms")).code).toBe(0)
        const noClaim = yield* cli(agentEnv, "claim", "--code", "123456")
        expect(noClaim.code).toBe(1)
        expect(noClaim.stderr).toContain("mailroom claim --email ADDRESS")
        const owner = uniqueEmail("cli-claimer")
        const start = yield* cli(agentEnv, "claim", "--email", owner, "--json")
        expect(start.code, start.stderr).toBe(0)
        expect(JSON.parse(start.stdout)).toEqual({
          status: "code_sent",
          email: owner,
          next: `mailroom claim --email ${owner} --code CODE`
        })
        const claimCode = codeOf(yield* Effect.promise(() => sink.next(owner, 0)))
        const claimMails = sink.count(owner)
        const verified = yield* cli(agentEnv, "claim", "--email", owner, "--code", claimCode)
        expect(verified.code, verified.stderr).toBe(0)
        expect(verified.stdout).toContain(`now belongs to ${owner} (plan developer)`)
        expect(sink.count(owner)).toBe(claimMails)
        expect(JSON.parse((yield* cli(agentEnv, "whoami", "--json")).stdout)).toMatchObject({ email: owner, plan: "developer" })
      }), SLOW)
  })

  describe("resources, deliveries, emails and listen", () => {
    it.scoped("agent create, endpoint add/test, listen forwards a real inbound message, deliveries list/replay, emails raw", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const env = yield* cliEnv
        const sql = yield* SqlClient.SqlClient
        const created = yield* cli(env, "agent", "create", "--accept-terms", "--json")
        expect(created.code).toBe(0)
        const agent = JSON.parse(created.stdout)
        expect(agent.api_key).toMatch(/^mr_live_/)
        expect(agent.address).toMatch(/@/)
        expect(configOf(env).profiles.default).toMatchObject({ auth_method: "api_key", api_key: agent.api_key, org_id: agent.org_id })
        const again = yield* cli(env, "agent", "create", "--accept-terms")
        expect(again.code).toBe(2)
        expect(again.stderr).toContain("already holds credentials")

        const hook = yield* startReceiver
        const local = yield* startReceiver
        const add = yield* cli(env, "endpoints", "add", "--url", hook.url("/hook"), "--json")
        expect(add.code).toBe(0)
        const endpoint = JSON.parse(add.stdout)
        expect(endpoint).toMatchObject({ kind: "http", url: hook.url("/hook"), enabled: true, domain_id: null })
        const table = yield* cli(env, "endpoints", "list")
        expect(table.code).toBe(0)
        expect(table.stdout).toMatch(/^ID\s+KIND\s+URL/)
        expect(table.stdout).toContain(endpoint.id)

        const secret = JSON.parse((yield* cli(env, "secret", "show", "--json")).stdout).secret as string
        expect(secret).toMatch(/^whsec_/)
        const test = yield* cli(env, "endpoints", "test", endpoint.id, "--json")
        expect(test.code).toBe(0)
        expect(JSON.parse(test.stdout)).toMatchObject({ delivered: true, status_code: 200 })
        expect(hook.received.length).toBe(1)
        expect(verifySignature(secret, hook.received[0]!.body, String(hook.received[0]!.headers["mailroom-signature"]))).toBe(true)

        const listen = startCli(["listen", "--forward-to", local.url("/local"), "--max-events", "1", "--json"], env)
        yield* Effect.promise(() => listen.waitFor(/Ready: forwarding/, 60_000))
        const active = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM listen_sessions WHERE org_id = ${agent.org_id}`
        expect(active[0]!.n).toBe(1)
        yield* sendMail(agent.address, "Listen to me")
        const listened = yield* Effect.promise(() => listen.exit)
        expect(listened.code).toBe(0)
        const line = JSON.parse(listened.stdout.trim())
        expect(line).toMatchObject({ event_type: "email.received", status: 200, error: null })
        expect(local.received.length).toBe(1)
        const forwarded = local.received[0]!
        expect(forwarded.path).toBe("/local")
        expect(forwarded.headers["content-type"]).toBe("application/json")
        expect(verifySignature(secret, forwarded.body, String(forwarded.headers["mailroom-signature"]))).toBe(true)
        expect(forwarded.headers["legacy-signature"]).toBe(forwarded.headers["mailroom-signature"])
        const event = JSON.parse(forwarded.body)
        expect(event.event).toBe("email.received")
        expect(event.email.subject).toBe("Listen to me")
        expect(forwarded.headers["mailroom-event-id"]).toBe(event.id)
        expect(forwarded.headers["mailroom-delivery-id"]).toBe(line.delivery_id)
        // The session ended with the command; no copies are queued for it any more.
        const after = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM listen_sessions WHERE org_id = ${agent.org_id}`
        expect(after[0]!.n).toBe(0)

        // The production endpoint got the same event, byte for byte.
        yield* waitUntil("the webhook delivery", Effect.sync(() => hook.received[1]))
        expect(hook.received[1]!.body).toBe(forwarded.body)
        const listed = yield* waitUntil("a delivered delivery", Effect.map(cli(env, "deliveries", "list", "--json"), (r) => {
          const body = JSON.parse(r.stdout)
          return body.data[0]?.status === "delivered" ? body : undefined
        }))
        expect(listed.meta).toMatchObject({ total: 1, cursor: null })
        const delivery = listed.data[0]
        expect(delivery).toMatchObject({ id: line.delivery_id, endpoint_id: endpoint.id, event_id: event.id })
        const filtered = JSON.parse((yield* cli(env, "deliveries", "list", "--status", "failed", "--json")).stdout)
        expect(filtered.data).toEqual([])

        const replay = yield* cli(env, "deliveries", "replay", delivery.id, "--json")
        expect(replay.code).toBe(0)
        const replayed = JSON.parse(replay.stdout)
        expect(replayed).toMatchObject({ delivered: 1, failed: 0 })
        expect(hook.received.length).toBe(3)
        expect(hook.received[2]!.body).toBe(forwarded.body)
        expect(verifySignature(secret, hook.received[2]!.body, String(hook.received[2]!.headers["mailroom-signature"]))).toBe(true)
        const got = yield* cli(env, "deliveries", "get", replayed.delivery_id, "--json")
        expect(JSON.parse(got.stdout)).toMatchObject({ replay_of: delivery.id, status: "delivered", event_id: event.id })

        const all = JSON.parse((yield* cli(env, "deliveries", "list", "--limit", "1", "--all", "--json")).stdout)
        expect(all.data.map((d: { id: string }) => d.id).sort()).toEqual([delivery.id, replayed.delivery_id].sort())
        expect(all.meta).toMatchObject({ total: 2, cursor: null })

        const emails = JSON.parse((yield* cli(env, "emails", "list", "--json")).stdout)
        expect(emails.data[0]).toMatchObject({ id: event.email.id, subject: "Listen to me" })
        const raw = yield* cli(env, "emails", "raw", event.email.id)
        expect(raw.code).toBe(0)
        expect(raw.stdout).toContain("Subject: Listen to me")
        expect(raw.stdout).toContain("hello from the test")
        const file = join(env.configHome, "message.eml")
        const saved = yield* cli(env, "emails", "raw", event.email.id, "--out", file)
        expect(saved.code).toBe(0)
        expect(readFileSync(file, "utf8")).toBe(raw.stdout)
      }), SLOW)
  })

  describe("exit codes", () => {
    it.effect("usage errors exit 2, API errors 3 with code, remediation and Retry-After, connection errors 4", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const env = yield* cliEnv
        const agent = JSON.parse((yield* cli(env, "agent", "create", "--accept-terms", "--json")).stdout)

        const badChoice = yield* cli(env, "endpoints", "add", "--kind", "carrier-pigeon")
        expect(badChoice.code).toBe(2)
        const badId = yield* cli(env, "deliveries", "get", "not-a-uuid")
        expect(badId.code).toBe(2)
        expect(badId.stderr).toContain("UUID")
        const unknown = yield* cli(env, "frobnicate")
        expect(unknown.code).toBe(2)
        const help = yield* cli(env, "deliveries", "list", "--help")
        expect(help.code).toBe(0)
        expect(help.stdout).toContain("--status")

        const missing = yield* cli(env, "deliveries", "get", "00000000-0000-4000-8000-000000000000")
        expect(missing.code).toBe(3)
        expect(missing.stderr).toContain("error: not_found: delivery not found")
        const missingJson = yield* cli(env, "--json", "emails", "get", "00000000-0000-4000-8000-000000000000")
        expect(missingJson.code).toBe(3)
        expect(JSON.parse(missingJson.stderr).error.code).toBe("not_found")

        expect((yield* cli(env, "secret", "rotate")).code).toBe(0)
        const tooSoon = yield* cli(env, "secret", "rotate")
        expect(tooSoon.code).toBe(3)
        expect(tooSoon.stderr).toContain("error: rate_limit_exceeded")
        expect(tooSoon.stderr).toMatch(/retry after: \d+ s/)

        const badKey = yield* cli({ ...env, extra: { MAILROOM_API_KEY: "mr_live_not_a_key" } }, "whoami")
        expect(badKey.code).toBe(3)
        expect(badKey.stderr).toContain("error: unauthorized")

        // A stored login whose refresh token was revoked: the message says how to recover.
        const file = join(env.configHome, "mailroom", "config.json")
        writeFileSync(file, JSON.stringify({
          profiles: {
            default: {
              auth_method: "oauth",
              access_token: "mr_at_expired",
              refresh_token: "mr_rt_revoked",
              expires_at: new Date(Date.now() - 60_000).toISOString()
            }
          }
        }))
        const stale = yield* cli(env, "whoami")
        expect(stale.code).toBe(3)
        expect(stale.stderr).toContain("error: invalid_grant")
        expect(stale.stderr).toContain("remediation: run `mailroom login` again")

        const closed = yield* Effect.promise(freePort)
        const offline = yield* cli(
          { ...env, baseUrl: `http://127.0.0.1:${closed}`, extra: { MAILROOM_API_KEY: agent.api_key } },
          "account",
          "show"
        )
        expect(offline.code).toBe(4)
        expect(offline.stderr).toContain(`cannot reach http://127.0.0.1:${closed}/v1`)
      }), SLOW)
  })

  describe("output for people and scripts", () => {
    /** Any ANSI escape (colour, cursor movement). */
    const ANSI = /\x1b\[/

    it.effect("--version prints the package's version; help is wrapped, plain text, with examples", () =>
      Effect.gen(function*() {
        const env = yield* cliEnv
        const version = yield* cli(env, "--version")
        expect(version).toEqual({ code: 0, stdout: `mailroom ${pkg.version}\n`, stderr: "" })

        // A pipe without NO_COLOR: still no escapes, since stdout is not a terminal.
        const plain = { ...env, extra: { NO_COLOR: "" } }
        const top = yield* cli(plain, "--help")
        expect(top.code).toBe(0)
        expect(top.stdout).not.toMatch(ANSI)
        expect(top.stdout).toMatchSnapshot("mailroom --help")
        const group = yield* cli(plain, "endpoints", "--help")
        expect(group.code).toBe(0)
        expect(group.stdout).not.toMatch(ANSI)
        expect(group.stdout).toMatchSnapshot("mailroom endpoints --help")
        const add = yield* cli(env, "endpoints", "add", "-h")
        expect(add.stdout).toMatchSnapshot("mailroom endpoints add --help")
        // A group without a subcommand shows its help, like --help.
        expect((yield* cli(env, "endpoints")).stdout).toBe(group.stdout)
        for (const out of [top.stdout, group.stdout, add.stdout]) {
          expect(Math.max(...out.split("\n").map((l) => l.length))).toBeLessThanOrEqual(80)
        }
      }), SLOW)

    it("every command's help fits 80 columns, describes its flags and has an example", () => {
      const visit = (node: Node, path: ReadonlyArray<string>): Array<[string, string, Node]> => {
        const here: [string, string, Node] = [["mailroom", ...path].join(" "), renderHelp(node, path, { width: 80, color: false }), node]
        return node.kind === "group"
          ? [here, ...node.children.flatMap((c) => visit(c, [...path, c.kind === "group" ? c.name : c.spec.name]))]
          : [here]
      }
      const all = visit(root, [])
      expect(all.length).toBeGreaterThan(40)
      for (const [command, help, node] of all) {
        const long = help.split("\n").filter((l) => l.length > 80)
        expect(long, command).toEqual([])
        expect(help, command).not.toContain("A true or false value")
        expect(help, command).not.toMatch(ANSI)
        expect(help, command).toContain(`USAGE\n  ${command} `)
        expect(help, command).toMatch(/EXAMPLES\n  \$ mailroom /)
        if (node.kind === "leaf") {
          for (const f of Object.values(node.spec.flags)) expect(help, command).toContain(`--${f.name}`)
        }
      }
    })

    it.effect("on a real terminal headings are bold, unless NO_COLOR is set", () =>
      Effect.gen(function*() {
        // util-linux `script` gives the CLI a pseudo-terminal for stdout.
        const onTerminal = (noColor: string | undefined) =>
          Effect.promise(() =>
            new Promise<string>((resolve, reject) => {
              const bundle = inject("cliBundle")
              const command = `${JSON.stringify(process.execPath)} ${JSON.stringify(bundle)} --help`
              const { NO_COLOR: _n, ...rest } = process.env
              execFile("script", ["-qc", command, "/dev/null"], {
                env: { ...rest, TERM: "xterm", ...(noColor === undefined ? {} : { NO_COLOR: noColor }) }
              }, (error, stdout) => (error ? reject(error) : resolve(stdout)))
            })
          )
        expect(yield* onTerminal(undefined)).toContain("\u001b[1mUSAGE\u001b[0m")
        const plain = yield* onTerminal("1")
        expect(plain).toContain("USAGE")
        expect(plain).not.toContain("\u001b[")
      }), SLOW)

    it.effect("usage errors name the argument or flag and suggest the fix, on stderr, exit 2", () =>
      Effect.gen(function*() {
        const env = { ...(yield* cliEnv), extra: { NO_COLOR: "" } }
        const badId = yield* cli(env, "endpoints", "test", "not-a-uuid")
        expect(badId.code).toBe(2)
        expect(badId.stdout).toBe("")
        expect(badId.stderr).toMatchSnapshot("endpoints test not-a-uuid")
        expect(badId.stderr).not.toMatch(ANSI)

        const unknownSub = yield* cli(env, "endpoints", "frobnicate")
        expect(unknownSub.code).toBe(2)
        expect(unknownSub.stderr).toContain('unknown command "frobnicate" for `mailroom endpoints`')
        expect(unknownSub.stderr).toContain("Available commands: list, add, update, rm, test.")
        expect(unknownSub.stderr).not.toContain("signup")
        const typo = yield* cli(env, "endpoints", "ad")
        expect(typo.stderr).toContain("Did you mean `mailroom endpoints add`?")
        // Swapped letters count as one edit: `emial` is two from `emails`.
        const swapped = yield* cli(env, "emial", "list")
        expect(swapped.code).toBe(2)
        expect(swapped.stderr).toContain("Did you mean `mailroom emails`?")

        const flagTypo = yield* cli(env, "endpoints", "add", "--ur", "https://example.com/hook")
        expect(flagTypo.code).toBe(2)
        expect(flagTypo.stderr).toContain("unknown flag --ur for `mailroom endpoints add`")
        expect(flagTypo.stderr).toContain("Did you mean --url?")
        const choice = yield* cli(env, "endpoints", "add", "--kind", "htp")
        expect(choice.code).toBe(2)
        expect(choice.stderr).toContain('--kind: "htp" is not one of http, function (did you mean http?)')
        const noValue = yield* cli(env, "deliveries", "list", "--limit")
        expect(noValue.code).toBe(2)
        expect(noValue.stderr).toContain("--limit needs a value: --limit N")
        const range = yield* cli(env, "deliveries", "list", "--limit", "500")
        expect(range.stderr).toContain("--limit: 500 is above the maximum 100")
        const missing = yield* cli(env, "listen")
        expect(missing.code).toBe(2)
        expect(missing.stderr).toContain("missing --forward-to URL")
        const json = yield* cli(env, "--json", "emails", "get", "nope")
        expect(json.code).toBe(2)
        expect(JSON.parse(json.stderr).error).toMatchObject({ code: "usage_error", message: 'argument <id>: "nope" is not a UUID' })
      }), SLOW)

    it.effect("API messages name the flag that was typed, not the request field", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const env = yield* cliEnv
        expect((yield* cli(env, "agent", "create", "--accept-terms")).code).toBe(0)
        const noUrl = yield* cli(env, "endpoints", "add", "--route-target")
        expect(noUrl.code).toBe(3)
        expect(noUrl.stderr).toContain("error: validation_error: --url: ")
        const noFunction = yield* cli(env, "endpoints", "add", "--kind", "function", "--route-target")
        expect(noFunction.code).toBe(3)
        expect(noFunction.stderr).toContain("--function-id")
        expect(noFunction.stderr).not.toContain("function_id")
        const badDomain = yield* cli(env, "endpoints", "add", "--url", "https://example.com/hook", "--domain-id", "nope")
        expect(badDomain.code).toBe(2)
        expect(badDomain.stderr).toContain('--domain-id: "nope" is neither a UUID nor `none`')
      }), SLOW)
  })

  describe("listen API", () => {
    const newAgent = Effect.map(
      call("POST", "/v1/agent/accounts", { body: { terms_accepted: true } }),
      (r) => ({ key: r.body.data.api_key as string, orgId: r.body.data.org_id as string })
    )

    it.effect("sessions: create (no-store), long-poll bounds, tenant isolation, the active cap and delete", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const a = yield* newAgent
        const b = yield* newAgent
        const unauthenticated = yield* call("POST", "/v1/listen/sessions", { body: {} })
        expect(unauthenticated.status).toBe(401)
        const strictBody = yield* call("POST", "/v1/listen/sessions", { token: a.key, body: { forward_to: "x" } })
        expect(strictBody.status).toBe(400)
        expect(strictBody.body.error.code).toBe("validation_error")

        const created = yield* call("POST", "/v1/listen/sessions", { token: a.key, body: { device_name: "laptop" } })
        expect(created.status).toBe(201)
        expect(created.headers.get("cache-control")).toBe("no-store")
        const session = created.body.data
        expect(session).toMatchObject({ device_name: "laptop" })
        // Same body again: a second listener gets a session of its own, not a replay of the first.
        const second = yield* call("POST", "/v1/listen/sessions", { token: a.key, body: { device_name: "laptop" } })
        expect(second.status).toBe(201)
        expect(second.body.data.id).not.toBe(session.id)

        const started = Date.now()
        const empty = yield* call("GET", `/v1/listen/sessions/${session.id}/events?wait=1`, { token: a.key })
        expect(empty.status).toBe(200)
        expect(empty.body.data).toEqual([])
        expect(Date.now() - started).toBeGreaterThanOrEqual(900)
        const tooLong = yield* call("GET", `/v1/listen/sessions/${session.id}/events?wait=31`, { token: a.key })
        expect(tooLong.status).toBe(400)
        expect(tooLong.body.error.code).toBe("validation_error")
        const foreign = yield* call("GET", `/v1/listen/sessions/${session.id}/events?wait=0`, { token: b.key })
        expect(foreign.status).toBe(404)
        const foreignDelete = yield* call("DELETE", `/v1/listen/sessions/${session.id}`, { token: b.key })
        expect(foreignDelete.status).toBe(404)

        for (let i = 0; i < 8; i++) {
          expect((yield* call("POST", "/v1/listen/sessions", { token: a.key, body: {} })).status).toBe(201)
        }
        const capped = yield* call("POST", "/v1/listen/sessions", { token: a.key, body: {} })
        expect(capped.status).toBe(409)
        expect(capped.body.error.code).toBe("conflict")
        expect(capped.body.error.details.remediation).toContain("mailroom listen")
        expect((yield* call("POST", "/v1/listen/sessions", { token: b.key, body: {} })).status).toBe(201)

        const deleted = yield* call("DELETE", `/v1/listen/sessions/${session.id}`, { token: a.key })
        expect(deleted.status).toBe(200)
        expect(deleted.body.data.id).toBe(session.id)
        const gone = yield* call("GET", `/v1/listen/sessions/${session.id}/events?wait=0`, { token: a.key })
        expect(gone.status).toBe(404)
        expect((yield* call("POST", "/v1/listen/sessions", { token: a.key, body: {} })).status).toBe(201)
      }))

    it.effect("a new delivery is queued once for every active session of its organization, never for expired ones", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const sql = yield* SqlClient.SqlClient
        const a = yield* newAgent
        const b = yield* newAgent
        const open = (key: string) => Effect.map(call("POST", "/v1/listen/sessions", { token: key, body: {} }), (r) => r.body.data.id as string)
        const live = yield* open(a.key)
        const expired = yield* open(a.key)
        const other = yield* open(b.key)
        yield* sql`UPDATE listen_sessions SET expires_at = now() - interval '1 second' WHERE id = ${expired}`
        const payload = JSON.stringify({ id: "evt_listen_test", event: "email.received", email: { subject: "ü" } })
        // A finished row: the dispatcher never picks it up, the trigger still fans it out.
        const inserted = yield* sql<{ id: string }>`
          INSERT INTO deliveries (org_id, endpoint_id, event_id, event_type, payload, status)
          VALUES (${a.orgId}, gen_random_uuid(), 'evt_listen_test', 'email.received', ${payload}, 'failed') RETURNING id`
        const queued = yield* sql<{ session_id: string }>`SELECT session_id FROM listen_events WHERE delivery_id = ${inserted[0]!.id}`
        expect(queued.map((r) => r.session_id)).toEqual([live])

        const secret = (yield* call("GET", "/v1/account/webhook-secret", { token: a.key })).body.data.secret as string
        const events = yield* call("GET", `/v1/listen/sessions/${live}/events?wait=5`, { token: a.key })
        expect(events.status).toBe(200)
        expect(events.body.data).toHaveLength(1)
        const event = events.body.data[0]
        expect(event).toMatchObject({
          delivery_id: inserted[0]!.id,
          event_id: "evt_listen_test",
          event_type: "email.received",
          email_id: null,
          replay_of: null,
          payload
        })
        expect(verifySignature(secret, event.payload, event.headers["Mailroom-Signature"])).toBe(true)
        expect(event.headers["mailroom-delivery-id"]).toBe(inserted[0]!.id)
        // Taken once: the next poll has nothing.
        const next = yield* call("GET", `/v1/listen/sessions/${live}/events?wait=0`, { token: a.key })
        expect(next.body.data).toEqual([])
        const otherEvents = yield* call("GET", `/v1/listen/sessions/${other}/events?wait=0`, { token: b.key })
        expect(otherEvents.body.data).toEqual([])
        // Polling keeps a session alive: the expired one is live again and receives later copies.
        expect((yield* call("GET", `/v1/listen/sessions/${expired}/events?wait=0`, { token: a.key })).status).toBe(200)
        const row = yield* sql<{ expires_at: Date }>`SELECT expires_at FROM listen_sessions WHERE id = ${expired}`
        expect(row[0]!.expires_at.getTime()).toBeGreaterThan(Date.now() + 100_000)
      }))
  })
})
