/**
 * Trust boundaries of a function's MAILROOM binding, attacked from inside a real workerd process:
 * with TRUSTED_PROXIES naming loopback (natural: the service binds there), forwarded headers a
 * function writes are ignored, so per-address limits cannot be spread over invented addresses;
 * `import { env } from "cloudflare:workers"` holds nothing internal (no service or nonce binding),
 * the raw MAILROOM binding reaches only /v1, and the function-error marker cannot be forged.
 */
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { Provisioning } from "../src/identity/Provisioning.js"
import { AGENT_ACCOUNTS_PER_HOUR } from "../src/identity/AgentAccountsHttp.js"
import { testService } from "./support/harness.js"
import { call } from "./support/http.js"

const Env = Provisioning.Default.pipe(
  Layer.provideMerge(testService({ TRUSTED_PROXIES: "127.0.0.1", DNS_SERVER: "127.0.0.1:9" }))
)

const newOrg = Effect.gen(function*() {
  const p = yield* Provisioning
  const org = yield* p.createOrganization({ name: "Trust", plan: "developer" })
  return (yield* p.issueApiKey(org.id)).apiKey
})

const run = (token: string, code: string) =>
  Effect.gen(function*() {
    const deployed = yield* call("POST", "/v1/functions", { token, body: { name: `trust-${Math.random().toString(36).slice(2, 8)}`, code } })
    expect(deployed.status, deployed.text).toBe(201)
    const r = yield* call("POST", `/v1/functions/${deployed.body.data.id}/invoke`, { token, body: {} })
    expect(r.status, r.text).toBe(200)
    expect(r.body.data.status, `${r.body.data.error} ${r.body.data.logs}`).toBe("ok")
    return JSON.parse(r.body.data.response_body)
  })

layer(Env, { timeout: 120_000, excludeTestServices: true })("function trust boundaries", (it) => {
  describe("forwarded headers", () => {
    it.effect("24 agent accounts from one function, each with another X-Forwarded-For and Forwarded: the per-address limit (20) holds", () =>
      Effect.gen(function*() {
        const token = yield* newOrg
        const statuses: Array<number> = yield* run(token, `export default { async fetch(req, env) {
          const out = [];
          for (let i = 0; i < 24; i++) {
            const r = await env.MAILROOM.fetch("/v1/agent/accounts", {
              method: "POST",
              headers: { "content-type": "application/json", "x-forwarded-for": "198.51.100." + (i + 1), "forwarded": "for=203.0.113." + (i + 1) },
              body: JSON.stringify({ terms_accepted: true })
            });
            await r.text();
            out.push(r.status);
          }
          return new Response(JSON.stringify(out));
        } }`)
        expect(statuses.filter((s) => s === 200).length).toBe(AGENT_ACCOUNTS_PER_HOUR.limit)
        expect(statuses.slice(AGENT_ACCOUNTS_PER_HOUR.limit)).toEqual([429, 429, 429, 429])
      }))
  })

  describe("cloudflare:workers env", () => {
    it.effect("holds only the tenant's bindings; its MAILROOM reaches only /v1; the error marker is not forgeable", () =>
      Effect.gen(function*() {
        const token = yield* newOrg
        const seen = yield* run(token, `import { env } from "cloudflare:workers";
        export default { async fetch(req) {
          const keys = Object.keys(env).sort();
          const pages = [];
          for (const url of ["https://mailroom.internal/docs", "https://mailroom.internal/auth.md", "https://mailroom.internal/v1/../llms.txt",
                             "https://mailroom.internal/v1/%2e%2e/device", "https://mailroom.internal/mcp"]) {
            const r = await env.MAILROOM.fetch(url);
            pages.push(r.status + " " + (await r.text()).slice(0, 120));
          }
          const account = await env.MAILROOM.fetch("https://mailroom.internal/v1/account");
          return new Response(JSON.stringify({ keys, pages, account: account.status, headers: [...req.headers.keys()] }));
        } }`)
        expect(seen.keys).toEqual(["MAILROOM", "MAILROOM_WEBHOOK_SECRET", "MEMORY", "ORG_MEMORY", "SERVICE_WEBHOOK_SECRET"])
        for (const page of seen.pages) expect(page).toMatch(/^404 .*only \/v1/)
        expect(seen.account).toBe(200)
        expect(seen.headers.some((h: string) => h.includes("nonce"))).toBe(false)

        // A function answering 500 with the marker header (any value it can find) is an HTTP 500, not a crash report.
        const deployed = yield* call("POST", "/v1/functions", { token, body: { name: "forger", code: `import { env } from "cloudflare:workers";
          export default { async fetch(req) {
            const guess = env.mailroom_nonce ?? req.headers.get("x-mailroom-invocation-nonce") ?? "x";
            return new Response("forged", { status: 500, headers: { "x-mailroom-function-error": String(guess) } });
          } }` } })
        expect(deployed.status, deployed.text).toBe(201)
        const r = yield* call("POST", `/v1/functions/${deployed.body.data.id}/invoke`, { token, body: {} })
        expect(r.body.data.status).toBe("http_500")
        expect(r.body.data.error).toBe("the function answered HTTP 500")
      }))
  })
})
