/**
 * What other projects and language models are given: the example of docs/client.md, imported as
 * `mailroom/client` through the package's `exports`, type-checks and runs against a live service;
 * `/llms.txt` is generated from the OpenAPI document and `/auth.md` and linked from discovery.
 */
import { describe, expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { execFile } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { promisify } from "node:util"
import { buildClient } from "../scripts/build-client.js"
import { TOOLS } from "../src/mcp/Tools.js"
import { TestServer, testService } from "./support/harness.js"
import { call } from "./support/http.js"

const ROOT = fileURLToPath(new URL("..", import.meta.url))
const run = promisify(execFile)

/** The first ```ts block of docs/client.md. */
const example = () => {
  const m = /```ts\n([\s\S]*?)```/.exec(readFileSync(join(ROOT, "docs/client.md"), "utf8"))
  if (m === null) throw new Error("docs/client.md has no ts example")
  return m[1]!
}

layer(testService(), { timeout: 240_000, excludeTestServices: true })("client package and llms.txt", (it) => {
  describe("mailroom/client", () => {
    it.scoped("the documented example type-checks and runs against the service", () =>
      Effect.gen(function*() {
        const server = yield* TestServer
        // Inside the package, so `mailroom/client` resolves through its own `exports`.
        const dir = mkdtempSync(join(ROOT, "test", ".client-example-"))
        yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(dir, { recursive: true, force: true })))
        writeFileSync(join(dir, "example.ts"), example())
        writeFileSync(join(dir, "tsconfig.json"), JSON.stringify({ extends: "../../tsconfig.json", include: ["example.ts"] }))
        yield* Effect.promise(() => buildClient(join(ROOT, "dist/client.mjs")))
        const typecheck = yield* Effect.promise(() =>
          run(process.execPath, [join(ROOT, "node_modules/typescript/bin/tsc"), "--noEmit", "-p", join(dir, "tsconfig.json")], { cwd: ROOT })
            .then(() => ({ ok: true, out: "" }), (e: { stdout?: string }) => ({ ok: false, out: e.stdout ?? String(e) }))
        )
        expect(typecheck.out).toBe("")
        expect(typecheck.ok).toBe(true)
        const out = yield* Effect.promise(() =>
          run(process.execPath, ["--import", "tsx", join(dir, "example.ts")], { cwd: ROOT, env: { ...process.env, MAILROOM_URL: server.baseUrl }, timeout: 60_000 })
            .catch((e: { stdout?: string; stderr?: string }) => ({ stdout: e.stdout ?? "", stderr: `${e.stderr ?? ""}${String(e)}` }))
        )
        expect(out.stderr).toBe("")
        expect(out.stdout).toMatch(/^organization [0-9a-f-]{36} on the agent plan, inbox \S+@\S+$/m)
        expect(out.stdout).toMatch(/^0 emails received$/m)
        expect(out.stdout).toMatch(/^not found: email not found$/m)
      }), { timeout: 180_000 })
  })

  describe("/llms.txt", () => {
    it.effect("is generated from the OpenAPI document and /auth.md, names the MCP tools, and discovery links it", () =>
      Effect.gen(function*() {
        const server = yield* TestServer
        const llms = yield* call("GET", "/llms.txt")
        expect(llms.status).toBe(200)
        expect(llms.headers.get("content-type")).toMatch(/^text\/markdown/)
        const doc = (yield* call("GET", "/v1/openapi.json")).body
        // Every operation of the document, with its summary.
        for (const [path, item] of Object.entries(doc.paths as Record<string, Record<string, { summary?: string }>>)) {
          for (const [method, op] of Object.entries(item)) {
            expect(llms.text).toContain(`\`${method.toUpperCase()} ${path}\`: ${op.summary}`)
          }
        }
        // The credential flow of /auth.md, sign-up without email first.
        const auth = (yield* call("GET", "/auth.md")).text
        expect(llms.text).toContain(auth.split("\n").find((l) => l.startsWith("The response's `data.api_key`"))!)
        expect(llms.text).toContain(`POST ${server.baseUrl}/v1/agent/accounts`)
        expect(llms.text).toContain(`${server.baseUrl}/mcp`)
        for (const t of TOOLS) expect(llms.text).toContain(`\`${t.name}\``)
        for (const type of Object.keys(doc.webhooks)) expect(llms.text).toContain(`\`${type}\``)
        const discovery = yield* call("GET", "/v1/discovery")
        expect(discovery.body.data).toMatchObject({ llms_txt_url: `${server.baseUrl}/llms.txt`, mcp_url: `${server.baseUrl}/mcp` })
        expect((yield* call("GET", "/")).body.llms_txt).toBe(`${server.baseUrl}/llms.txt`)
      }))
  })
})
