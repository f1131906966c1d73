/**
 * The `/device` page end to end in headless Chromium (Debian's package driven by playwright-core):
 * a CLI login started over the API, approved or denied by a person who signs in with an emailed
 * code read from a real SMTP sink; then the CLI's poll. Also the page's CSRF and limiter rules.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { createHash } from "node:crypto"
import type { Page } from "playwright-core"
import { TestBrowser, TestBrowserLive } from "./support/browser.js"
import { call } from "./support/http.js"
import { TestServer } from "./support/harness.js"
import { expectTokenSet, identityService, nextMail, resetLimits, signUp, uniqueEmail } from "./support/identity.js"
import { codeOf, SmtpSink } from "./support/smtpSink.js"

const sha256 = (s: string) => createHash("sha256").update(s).digest("hex")

const withPage = <A>(f: (page: Page) => Promise<A>) =>
  Effect.flatMap(TestBrowser, (browser) =>
    Effect.acquireUseRelease(
      Effect.promise(() => browser.newContext()),
      (context) => Effect.promise(async () => f(await context.newPage())),
      (context) => Effect.promise(() => context.close())
    ))

/** Lets the next poll through without waiting out the interval. */
const rewindPoll = (deviceCode: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql`UPDATE device_logins SET last_polled_at = now() - interval '1 hour' WHERE device_code_hash = ${sha256(deviceCode)}`)

/** Opens the verification page, signs in with the emailed code and clicks `button`. */
const approveInBrowser = (uri: string, userCode: string, email: string, button: "Approve" | "Deny") =>
  Effect.gen(function*() {
    const sink = yield* SmtpSink
    const seen = sink.count(email)
    return yield* withPage(async (page) => {
      await page.goto(uri)
      expect(await page.locator("#user-code").textContent()).toBe(userCode)
      await page.getByLabel("Email").fill(email)
      await page.getByRole("button", { name: "Send code" }).click()
      await page.getByLabel("Code").waitFor({ timeout: 5000 }).catch(async (e) => {
        throw new Error(`${String(e)}\n${page.url()}\n${await page.content()}`)
      })
      const code = codeOf(await sink.next(email, seen))
      // A wrong code first: the page says so and stays on the form.
      await page.getByLabel("Code").fill(code === "000000" ? "111111" : "000000")
      await page.getByRole("button", { name: "Sign in" }).click()
      expect(await page.getByRole("alert").textContent()).toContain("not right")
      await page.getByLabel("Code").fill(code)
      await page.getByRole("button", { name: "Sign in" }).click()
      await page.getByRole("button", { name: button }).click()
      await page.waitForURL(/done=/)
      return (await page.locator("body").textContent()) ?? ""
    })
  })

const Env = Layer.mergeAll(identityService(), TestBrowserLive)

layer(Env, { timeout: 180_000, excludeTestServices: true })("device page", (it) => {
  describe("CLI device login in Chromium", () => {
    it.effect("approved in the browser: the poll returns a working token set, once", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const email = uniqueEmail("device")
        yield* signUp("cli", email)
        const start = yield* call("POST", "/v1/cli/login/start", { body: { device_name: "my laptop" } })
        expect(start.status).toBe(201)
        const d = start.body.data
        const pending = yield* call("POST", "/v1/cli/login/poll", { body: { device_code: d.device_code } })
        expect(pending.body.error.code).toBe("authorization_pending")

        const text = yield* approveInBrowser(d.verification_uri_complete, d.user_code, email, "Approve")
        expect(text).toContain("Approved")

        yield* rewindPoll(d.device_code)
        const poll = yield* call("POST", "/v1/cli/login/poll", { body: { device_code: d.device_code } })
        expect(poll.status).toBe(200)
        expect(poll.headers.get("cache-control")).toBe("no-store")
        expectTokenSet(poll.body.data)
        expect(poll.body.data.oauth_client_id).toBe("mailroom-cli")
        const account = yield* call("GET", "/v1/account", { token: poll.body.data.access_token })
        expect(account.status).toBe(200)
        expect(account.body.data.email).toBe(email)

        yield* rewindPoll(d.device_code)
        const again = yield* call("POST", "/v1/cli/login/poll", { body: { device_code: d.device_code } })
        expect(again.status).toBe(400)
        expect(again.body.error.code).toBe("invalid_grant")
        const grant = (yield* (yield* SqlClient.SqlClient)<{ device_name: string }>`
          SELECT device_name FROM oauth_grants WHERE id = ${poll.body.data.oauth_grant_id}`)[0]!
        expect(grant.device_name).toBe("my laptop")
      }))

    it.effect("denied in the browser: the poll answers 403 access_denied", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const email = uniqueEmail("deny")
        yield* signUp("cli", email)
        const start = yield* call("POST", "/v1/cli/login/start")
        const d = start.body.data
        const text = yield* approveInBrowser(d.verification_uri_complete, d.user_code, email, "Deny")
        expect(text).toContain("Denied")
        yield* rewindPoll(d.device_code)
        const poll = yield* call("POST", "/v1/cli/login/poll", { body: { device_code: d.device_code } })
        expect(poll.status).toBe(403)
        expect(poll.body.error.code).toBe("access_denied")
        const grants = yield* (yield* SqlClient.SqlClient)`SELECT 1 FROM device_logins WHERE grant_id IS NOT NULL
                                                           AND device_code_hash = ${sha256(d.device_code)}`
        expect(grants.length).toBe(0)
      }))
  })

  describe("claim page in Chromium", () => {
    it.effect("a person opens claim_url, confirms their email with the mailed code and claims the account", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const sink = yield* SmtpSink
        const agent = yield* call("POST", "/v1/agent/accounts", { body: { terms_accepted: true } })
        const apiKey = agent.body.data.api_key
        const link = yield* call("POST", "/v1/agent/claim/link", { token: apiKey, body: {} })
        expect(link.status).toBe(200)
        const email = uniqueEmail("claim-browser")
        const text = yield* withPage(async (page) => {
          await page.goto(link.body.data.claim_url)
          await page.getByLabel("Email").fill(email)
          await page.getByRole("button", { name: "Send code" }).click()
          await page.getByLabel("Code").waitFor({ timeout: 10_000 })
          const code = codeOf(await sink.next(email, 0))
          await page.getByLabel("Code").fill(code)
          await page.getByRole("button", { name: "Claim account" }).click()
          await page.waitForURL(/done=1/)
          return (await page.locator("body").textContent()) ?? ""
        })
        expect(text).toContain("Claimed")
        const account = yield* call("GET", "/v1/account", { token: apiKey })
        expect(account.body.data).toMatchObject({ plan: "developer", email, id: agent.body.data.org_id })
      }))
  })

  describe("page rules", () => {
    it.effect("GET /device writes nothing and is counted by the limiters; unknown codes are 404; no scripts", () =>
      Effect.gen(function*() {
        const server = yield* TestServer
        const db = yield* SqlClient.SqlClient
        const count = () => db<{ n: number }>`SELECT count(*)::int AS n FROM device_web_sessions`.pipe(Effect.map((r) => r[0]!.n))
        const before = yield* count()
        const res = yield* Effect.promise(() => fetch(`${server.baseUrl}/device`))
        // The GET writes no session: a session row appears with the first form post only.
        expect(yield* count()).toBe(before)
        expect(res.status).toBe(200)
        expect(res.headers.get("ratelimit-limit")).not.toBeNull()
        expect(res.headers.get("content-type")).toContain("text/html")
        expect(res.headers.get("set-cookie")).toMatch(/mr_device=.*HttpOnly.*SameSite=Lax/i)
        const html = yield* Effect.promise(() => res.text())
        expect(html).not.toContain("<script")
        const unknown = yield* Effect.promise(() => fetch(`${server.baseUrl}/device?user_code=BBBB-CCCC`))
        expect(unknown.status).toBe(404)
      }))

    it.effect("form posts need the session's CSRF token and a same-origin Origin; they are limited per address", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const server = yield* TestServer
        const start = yield* call("POST", "/v1/cli/login/start")
        const d = start.body.data
        const page = yield* Effect.promise(() => fetch(d.verification_uri_complete))
        const cookie = (page.headers.get("set-cookie") ?? "").split(";")[0]!
        const html = yield* Effect.promise(() => page.text())
        const csrf = /name="csrf" value="([0-9a-f]+)"/.exec(html)![1]!
        const post = (fields: Record<string, string>, headers: Record<string, string>) =>
          Effect.promise(() =>
            fetch(`${server.baseUrl}/device/send-code`, {
              method: "POST",
              redirect: "manual",
              headers: { "content-type": "application/x-www-form-urlencoded", ...headers },
              body: new URLSearchParams(fields).toString()
            }))
        const email = uniqueEmail("csrf")
        const noToken = yield* post({ user_code: d.user_code, email }, { cookie })
        expect(noToken.status).toBe(403)
        const noCookie = yield* post({ user_code: d.user_code, email, csrf }, {})
        expect(noCookie.status).toBe(403)
        const crossSite = yield* post({ user_code: d.user_code, email, csrf }, { cookie, origin: "https://evil.example" })
        expect(crossSite.status).toBe(403)
        const ok = yield* post({ user_code: d.user_code, email, csrf }, { cookie, origin: server.baseUrl })
        expect(ok.status).toBe(303)
        // An address without an account gets a hint by mail, not a code; the page says the same either way.
        const mail = yield* nextMail(email, 0)
        expect(mail.subject).toContain("no account")
        expect(mail.text).not.toMatch(/\b\d{6}\b/)

        let last = 0
        for (let i = 0; i < 40 && last !== 429; i++) {
          const r = yield* post({ user_code: d.user_code, email: uniqueEmail("flood"), csrf }, { cookie })
          last = r.status
        }
        expect(last).toBe(429)
      }))
  })
})
