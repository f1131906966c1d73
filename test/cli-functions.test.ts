/**
 * `mailroom functions …` and `mailroom memories …` as a subprocess against a running service with
 * real workerd: deploy (create, then redeploy by name with secrets), list, get --code, invoke (with
 * an event file, exit 1 on a failing answer), logs (including --follow picking up a new
 * invocation), delete; memories in both scopes with keys that need percent-encoding.
 */
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Provisioning } from "../src/identity/Provisioning.js"
import { type CliEnv, runCli, startCli } from "./support/cli.js"
import { TestServer, testService } from "./support/harness.js"
import { call } from "./support/http.js"

const SLOW = 300_000

const Env = Provisioning.Default.pipe(Layer.provideMerge(testService({ FUNCTION_TIMEOUT: "20s" })))

/** A developer organization and a CLI environment holding its API key. */
const account = Effect.gen(function*() {
  const p = yield* Provisioning
  const server = yield* TestServer
  const org = yield* p.createOrganization({ name: "Cli functions", plan: "developer" })
  const { apiKey } = yield* p.issueApiKey(org.id)
  const env: CliEnv = {
    baseUrl: server.baseUrl,
    configHome: mkdtempSync(join(tmpdir(), "mailroom-cli-fn-")),
    extra: { MAILROOM_API_KEY: apiKey }
  }
  return { env, token: apiKey, inbox: org.managedInboxAddress! }
})

const cli = (env: CliEnv, ...args: Array<string>) => Effect.promise(() => runCli(args, env))

const file = (name: string, text: string) => {
  const dir = mkdtempSync(join(tmpdir(), "mailroom-cli-fn-files-"))
  const path = join(dir, name)
  writeFileSync(path, text)
  return path
}

const echo = (tag: string) => `export default {
  async fetch(request, env) {
    const event = await request.json()
    // The service redacts secret values from responses and logs: their lengths show which one ran.
    console.log("${tag} saw " + event.event + " with a greeting of " + (env.GREETING ?? "").length)
    if (event.fail) return new Response("no", { status: 500 })
    return new Response("${tag}:" + (env.GREETING ?? "").length + ":" + env.GREETING)
  }
}`

layer(Env, { timeout: SLOW, excludeTestServices: true })("cli functions", (it) => {
  describe("functions", () => {
    it.effect("deploy creates then redeploys by name; list, get --code, invoke, logs, delete", () =>
      Effect.gen(function*() {
        const { env, token } = yield* account
        const first = yield* cli(env, "functions", "deploy", file("worker.js", echo("v1")), "--name", "greeter",
          "--secret", "GREETING=hello", "--json")
        expect(first.code, first.stderr).toBe(0)
        const created = JSON.parse(first.stdout) as { id: string; version: number; secret_names: Array<string> }
        expect(created).toMatchObject({ version: 1, secret_names: ["GREETING"] })

        const again = yield* cli(env, "functions", "deploy", file("worker.js", echo("v2")), "--name", "greeter",
          "--secret", "GREETING=bonjour", "--endpoint")
        expect(again.code, again.stderr).toBe(0)
        expect(again.stdout).toMatch(new RegExp(`Redeployed greeter \\(version 2, id ${created.id}\\); endpoint [0-9a-f-]{36}`))
        const endpoints = yield* call("GET", "/v1/endpoints", { token })
        expect(endpoints.body.data).toEqual([expect.objectContaining({ kind: "function", function_id: created.id })])

        const listed = yield* cli(env, "functions", "list")
        expect(listed.stdout).toMatch(/ID\s+NAME\s+VERSION/)
        expect(listed.stdout).toContain("greeter")
        const code = yield* cli(env, "functions", "get", created.id, "--code")
        expect(code.stdout).toBe(echo("v2"))

        const ran = yield* cli(env, "functions", "invoke", created.id)
        expect(ran.code, ran.stderr).toBe(0)
        expect(ran.stdout).toMatch(/^ok \(HTTP 200\) in \d+ ms/)
        expect(ran.stdout).toContain("response: v2:7:[secret GREETING]")
        expect(ran.stdout).toContain("v2 saw email.received with a greeting of 7")
        expect(ran.stdout).not.toContain("bonjour")

        const failing = yield* cli(env, "functions", "invoke", created.id, "--event",
          file("event.json", JSON.stringify({ event: "custom.test", fail: true })))
        expect(failing.code).toBe(1)
        expect(failing.stdout).toContain("http_500 (HTTP 500)")
        const notJson = yield* cli(env, "functions", "invoke", created.id, "--event", file("event.json", "nope"))
        expect(notJson.code).toBe(2)
        expect(notJson.stderr).toContain("is not JSON")

        const logs = yield* cli(env, "functions", "logs", created.id)
        const lines = logs.stdout.split("\n").filter((l) => /^\d{4}-/.test(l))
        expect(lines).toHaveLength(2)
        expect(lines[0]).toMatch(/ok .* email\.received \(invoke\)/)
        expect(lines[1]).toMatch(/http_500 .* custom\.test \(invoke\)/)
        expect(logs.stdout).toContain("| v2 saw custom.test with a greeting of 7")

        // --follow prints an invocation made after it started, as one JSON line with --json.
        const follow = startCli(["functions", "logs", created.id, "--follow", "--json", "--limit", "1"], env)
        yield* Effect.promise(() => follow.waitFor(/"status":"http_500"/))
        yield* call("POST", `/v1/functions/${created.id}/invoke`, { token, body: { event: { event: "late.one" } } })
        const late = yield* Effect.promise(() => follow.waitFor(/\{[^\n]*"event":"late\.one"[^\n]*\}/, 30_000))
        follow.child.kill("SIGINT")
        yield* Effect.promise(() => follow.exit)
        expect(JSON.parse(late[0])).toMatchObject({ status: "ok", event: "late.one", function_id: created.id })

        const badSecret = yield* cli(env, "functions", "deploy", file("worker.js", echo("v3")), "--name", "greeter",
          "--secret", "lower=x")
        expect(badSecret.code).toBe(2)
        expect(badSecret.stderr).toContain('--secret: "lower" is not NAME=VALUE')
        const broken = yield* cli(env, "functions", "deploy", file("worker.js", "export default {"), "--name", "broken")
        expect(broken.code).toBe(3)
        expect(broken.stderr).toContain("validation_error")

        const removed = yield* cli(env, "functions", "delete", created.id)
        expect(removed.code).toBe(0)
        expect((yield* call("GET", `/v1/functions/${created.id}`, { token })).status).toBe(404)
      }), SLOW)
  })

  describe("deploy with an endpoint", () => {
    it.effect("is one step: a refused endpoint leaves no function; --endpoint and --route make route targets beside the fallback", () =>
      Effect.gen(function*() {
        const { env, inbox, token } = yield* account
        const first = yield* cli(env, "functions", "deploy", file("a.js", echo("a")), "--name", "first", "--fallback", "--json")
        expect(first.code, first.stderr).toBe(0)
        const fallback = JSON.parse(first.stdout) as { id: string; endpoint_id: string }
        const eps = yield* call("GET", "/v1/endpoints", { token })
        expect(eps.body.data).toEqual([expect.objectContaining({ id: fallback.endpoint_id, is_route_target: false })])

        // The fallback slot is taken: the second is refused whole, and no function named "second" is left.
        const refused = yield* cli(env, "functions", "deploy", file("b.js", echo("b")), "--name", "second", "--fallback")
        expect(refused.code).toBe(3)
        expect(refused.stderr).toContain("conflict")
        const names = (yield* call("GET", "/v1/functions", { token })).body.data.map((f: { name: string }) => f.name)
        expect(names).toEqual(["first"])
        // The API the same way.
        const direct = yield* call("POST", "/v1/functions", {
          token,
          body: { name: "third", code: echo("c"), endpoint: { is_route_target: false } }
        })
        expect(direct.status, direct.text).toBe(409)
        expect((yield* call("GET", "/v1/functions", { token })).body.meta.total).toBe(1)

        // A function's endpoint is a route target unless asked otherwise: no slot, no conflict.
        const badRoute = yield* cli(env, "functions", "deploy", file("b.js", echo("b")), "--name", "second",
          "--route", "help@example.test")
        expect(badRoute.code).toBe(3)
        expect(badRoute.stderr).toContain("not a verified domain")
        expect((yield* call("GET", "/v1/functions", { token })).body.meta.total).toBe(1)
        const routed = yield* cli(env, "functions", "deploy", file("b.js", echo("b")), "--name", "second",
          "--route", inbox, "--json")
        expect(routed.code, routed.stderr).toBe(0)
        const second = JSON.parse(routed.stdout) as { id: string; endpoint_id: string }
        const routes = yield* call("GET", "/v1/routes", { token })
        expect(routes.body.data).toEqual([expect.objectContaining({ pattern: inbox, endpoint_id: second.endpoint_id })])
        const plain = yield* cli(env, "functions", "deploy", file("c.js", echo("c")), "--name", "third", "--endpoint", "--json")
        expect(plain.code, plain.stderr).toBe(0)
        const third = JSON.parse(plain.stdout) as { endpoint_id: string }
        const all = (yield* call("GET", "/v1/endpoints", { token })).body.data as Array<{ id: string; is_route_target: boolean }>
        expect(all.find((e) => e.id === third.endpoint_id)?.is_route_target).toBe(true)
        expect(all.find((e) => e.id === second.endpoint_id)?.is_route_target).toBe(true)
      }), SLOW)
  })

  describe("memories", () => {
    it.effect("set, get, list and delete in the organization's scope and a function's, keys percent-encoded", () =>
      Effect.gen(function*() {
        const { env, token } = yield* account
        const key = "sender/ada@example.com?x y"
        expect((yield* cli(env, "memories", "set", key, '{"count":3}')).code).toBe(0)
        expect((yield* cli(env, "memories", "set", "plain", "just text", "--ttl", "3600")).stdout).toMatch(/Stored plain \(\d+ bytes, expires /)
        const got = yield* cli(env, "memories", "get", key)
        expect(JSON.parse(got.stdout)).toEqual({ count: 3 })
        const api = yield* call("GET", `/v1/memories/${encodeURIComponent("plain")}`, { token })
        expect(api.body.data.value).toBe("just text")
        const listed = yield* cli(env, "memories", "list", "--prefix", "sender/", "--json")
        expect(JSON.parse(listed.stdout).data.map((k: { key: string }) => k.key)).toEqual([key])

        const fn = yield* cli(env, "functions", "deploy", file("worker.js", echo("m")), "--name", "memo", "--json")
        const id = (JSON.parse(fn.stdout) as { id: string }).id
        expect((yield* cli(env, "memories", "set", "state", "[1,2]", "--function", id)).code).toBe(0)
        const scoped = yield* cli(env, "memories", "get", "state", "--function", id, "--json")
        expect(JSON.parse(scoped.stdout)).toMatchObject({ key: "state", value: [1, 2], scope: "function", function_id: id })
        expect((yield* cli(env, "memories", "get", "state")).code).toBe(3)

        expect((yield* cli(env, "memories", "delete", key)).code).toBe(0)
        const gone = yield* cli(env, "memories", "get", key)
        expect(gone.code).toBe(3)
        expect(gone.stderr).toContain("not_found")
        // --function takes an id or a name: an unknown one is the API's 404.
        const badScope = yield* cli(env, "memories", "list", "--function", "nope")
        expect(badScope.code).toBe(3)
        expect(badScope.stderr).toContain("no function nope")
      }), SLOW)
  })

  describe("templates", () => {
    it.effect("list and show need no login; install creates the function with its route, secrets checked", () =>
      Effect.gen(function*() {
        const { env, token } = yield* account
        const anonymous: CliEnv = { ...env, extra: {} }
        const listed = yield* cli(anonymous, "templates", "list")
        expect(listed.code, listed.stderr).toBe(0)
        expect(listed.stdout).toMatch(/forward-to-webhook\s+Forward to webhook\s+TARGET_URL \[TARGET_AUTHORIZATION\]/)
        const shown = yield* cli(anonymous, "templates", "show", "forward-to-webhook")
        expect(shown.stdout).toContain("# forward-to-webhook")
        expect(shown.stdout).toContain("install: mailroom templates install forward-to-webhook --secret TARGET_URL=…")
        const code = yield* cli(anonymous, "templates", "show", "remember-senders", "--code")
        expect(code.stdout).toContain("export default")
        expect((yield* cli(anonymous, "templates", "show", "nope")).code).toBe(3)

        const missing = yield* cli(env, "templates", "install", "forward-to-webhook")
        expect(missing.code).toBe(3)
        expect(missing.stderr).toContain("TARGET_URL")
        const inbox = (yield* call("GET", "/v1/account", { token })).body.data.managed_inbox_address as string
        const installed = yield* cli(env, "templates", "install", "remember-senders", "--name", "who-writes", "--route", inbox)
        expect(installed.code, installed.stderr).toBe(0)
        expect(installed.stdout).toMatch(new RegExp(`Installed remember-senders as who-writes \\(function [0-9a-f-]{36}, endpoint [0-9a-f-]{36}, route ${inbox.replace(/[.+]/g, "\\$&")}\\)`))
        const routes = yield* call("GET", "/v1/routes", { token })
        expect(routes.body.data).toEqual([expect.objectContaining({ pattern: inbox })])
      }), SLOW)
  })

  describe("wake", () => {
    it.effect("add by function name, list, run, cancel; allowlist set and get; errors name the flag", () =>
      Effect.gen(function*() {
        const { env } = yield* account
        const fn = yield* cli(env, "functions", "deploy", file("worker.js", echo("w")), "--name", "waker", "--json")
        const id = (JSON.parse(fn.stdout) as { id: string }).id
        const added = yield* cli(env, "wake", "add", "waker", "--type", "digest", "--payload", '{"day":"mon"}', "--every", "1h", "--json")
        expect(added.code, added.stderr).toBe(0)
        const wake = JSON.parse(added.stdout) as { id: string; schedule: Record<string, string>; command: unknown }
        expect(wake).toMatchObject({ schedule: { every: "1h" }, command: { type: "digest", payload: { day: "mon" } } })
        const listed = yield* cli(env, "wake", "list")
        expect(listed.stdout).toMatch(new RegExp(`${wake.id}\\s+digest\\s+every 1h\\s+scheduled`))
        const ran = yield* cli(env, "wake", "run", wake.id)
        expect(ran.stdout).toContain("runs so far: 1")
        expect((yield* cli(env, "wake", "cancel", wake.id)).stdout).toContain(`Canceled wake ${wake.id}`)
        expect((yield* cli(env, "wake", "run", wake.id)).code).toBe(3)

        const both = yield* cli(env, "wake", "add", id, "--type", "x", "--in", "5m", "--cron", "0 8 * * *")
        expect(both.code).toBe(3)
        expect(both.stderr).toContain("exactly one of")
        const badPayload = yield* cli(env, "wake", "add", id, "--type", "x", "--in", "5m", "--payload", "{nope")
        expect(badPayload.code).toBe(2)
        expect(badPayload.stderr).toContain("--payload: not JSON")
        expect((yield* cli(env, "wake", "add", "no-such-function", "--type", "x", "--in", "5m")).code).toBe(2)

        const set = yield* cli(env, "wake", "allowlist", "set", "waker", "--sender", "Ops@Acme.com", "--sender", "@acme.com")
        expect(set.stdout).toBe(`fn-${id}@agents.localhost takes commands from: @acme.com, ops@acme.com\n`)
        const got = yield* cli(env, "wake", "allowlist", "get", id)
        expect(got.stdout).toBe(`wake address: fn-${id}@agents.localhost\n@acme.com\nops@acme.com\n`)
        expect((yield* cli(env, "wake", "allowlist", "set", "waker")).stdout).toContain("takes commands from: nobody")
      }), SLOW)
  })

  describe("ids or names", () => {
    it.effect("a function is named by id or by name everywhere (CLI and API paths); a registry by name or by id", () =>
      Effect.gen(function*() {
        const { env, token } = yield* account
        const deployed = yield* cli(env, "functions", "deploy", file("worker.js", echo("n")), "--name", "echo", "--json")
        expect(deployed.code, deployed.stderr).toBe(0)
        const id = (JSON.parse(deployed.stdout) as { id: string }).id

        // CLI: every command that names a function takes its name.
        const invoked = yield* cli(env, "functions", "invoke", "echo")
        expect(invoked.code, invoked.stderr).toBe(0)
        const logs = yield* cli(env, "functions", "logs", "echo")
        expect(logs.code, logs.stderr).toBe(0)
        expect(logs.stdout).toContain("n saw email.received")
        expect((yield* cli(env, "memories", "set", "k", "1", "--function", "echo")).code).toBe(0)
        const mem = yield* call("GET", `/v1/functions/${id}/memories/k`, { token })
        expect(mem.body.data).toMatchObject({ key: "k", value: 1, scope: "function", function_id: id })
        expect((yield* cli(env, "wake", "add", "echo", "--type", "t", "--every", "1h")).code).toBe(0)
        const wakes = yield* cli(env, "wake", "list", "--function", "echo", "--json")
        expect(wakes.code, wakes.stderr).toBe(0)
        expect((JSON.parse(wakes.stdout) as { data: Array<{ function_id: string }> }).data).toEqual([expect.objectContaining({ function_id: id })])
        const inbox = (yield* call("GET", "/v1/account", { token })).body.data.managed_inbox_address as string
        const route = yield* cli(env, "routes", "add", "--pattern", inbox.replace("@", "+echo@"), "--function-id", "echo", "--json")
        expect(route.code, route.stderr).toBe(0)
        expect((yield* call("GET", "/v1/endpoints", { token })).body.data).toContainEqual(expect.objectContaining({ function_id: id }))
        const unknown = yield* cli(env, "functions", "logs", "nope")
        expect(unknown.code).toBe(3)
        expect(unknown.stderr).toContain("no function nope")

        // API: the function's paths take its name as well as its id.
        for (const path of ["", "/invocations", "/memories", "/memories/k", "/wake-allowlist"]) {
          const byName = yield* call("GET", `/v1/functions/echo${path}`, { token })
          expect(byName.status, `${path}: ${byName.text}`).toBe(200)
          const byId = yield* call("GET", `/v1/functions/${id}${path}`, { token })
          expect(byName.body.data, path).toEqual(byId.body.data)
        }
        const bad = yield* call("GET", "/v1/functions/Not%20A%20Name", { token })
        expect(bad.status).toBe(400)
        expect(bad.body.error.code).toBe("validation_error")
        expect((yield* call("GET", "/v1/functions/nope", { token })).status).toBe(404)

        // Registries: by name (as always) and by id.
        const reg = yield* call("POST", "/v1/registries", { token, body: { name: `ids-${id.slice(0, 8)}` } })
        expect(reg.status, reg.text).toBe(201)
        const byRegistryId = yield* call("GET", `/v1/registries/${reg.body.data.id}`, { token })
        expect(byRegistryId.status, byRegistryId.text).toBe(200)
        expect(byRegistryId.body.data.name).toBe(reg.body.data.name)
        const cliRegistry = yield* cli(env, "registries", "show", reg.body.data.id, "--json")
        expect(cliRegistry.code, cliRegistry.stderr).toBe(0)
        expect(JSON.parse(cliRegistry.stdout)).toMatchObject({ id: reg.body.data.id })

        expect((yield* cli(env, "functions", "delete", "echo")).code).toBe(0)
        expect((yield* call("GET", `/v1/functions/${id}`, { token })).status).toBe(404)
      }), SLOW)
  })
})
