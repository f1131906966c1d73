/**
 * Identity over real HTTP with a real SMTP sink: agent accounts and their claim, CLI and agent
 * sign-up, device login (API side), logout, token refresh, secrets at rest and in logs.
 * The browser parts (/device approve and deny in Chromium) are in test/device.test.ts.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { createHash } from "node:crypto"
import { sweepIdentity } from "../src/identity/Maintenance.js"
import { call } from "./support/http.js"
import { TestServer } from "./support/harness.js"
import {
  captureLogs,
  expectTokenSet,
  identityService,
  logLines,
  mailCount,
  nextMail,
  remember,
  resetLimits,
  secrets,
  signUp,
  uniqueEmail
} from "./support/identity.js"
import { codeOf } from "./support/smtpSink.js"

captureLogs()

const sha256 = (s: string) => createHash("sha256").update(s).digest("hex")
const noStore = (r: { headers: Headers }) => expect(r.headers.get("cache-control")).toBe("no-store")

const agentAccount = Effect.gen(function*() {
  const r = yield* call("POST", "/v1/agent/accounts", { body: { terms_accepted: true, device_name: "bot" } })
  expect(r.status).toBe(200)
  remember(r.body.data.api_key)
  return r.body.data as { api_key: string; org_id: string; address: string }
})

const sql = SqlClient.SqlClient

layer(identityService(), { timeout: 180_000, excludeTestServices: true })("identity", (it) => {
  describe("agent account claim", () => {
    it.effect("agent account → claim start/verify → developer plan with the same key, org and inbox", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const agent = yield* agentAccount
        const before = yield* call("GET", "/v1/account", { token: agent.api_key })
        expect(before.body.data).toMatchObject({ id: agent.org_id, plan: "agent", email: agent.address })
        expect(before.body.data.entitlements).toEqual(["send_mail", "send_to_known_addresses"])

        const email = uniqueEmail("owner")
        const seen = yield* mailCount(email)
        const start = yield* call("POST", "/v1/agent/claim/start", { token: agent.api_key, body: { email } })
        expect(start.status).toBe(200)
        noStore(start)
        expect(start.body.data).toEqual({
          claim_session_id: expect.any(String),
          resend_after_seconds: 60,
          expires_in_seconds: 900
        })
        const mail = yield* nextMail(email, seen)
        expect(mail.subject).toContain("claim")
        expect(mail.contentTypes).toContain("text/plain")
        const code = codeOf(mail)
        remember(code)

        const wrong = yield* call("POST", "/v1/agent/claim/verify", {
          token: agent.api_key,
          body: { verification_code: code === "000000" ? "111111" : "000000" }
        })
        expect(wrong.status).toBe(400)
        expect(wrong.body.error.code).toBe("invalid_grant")
        expect(wrong.body.error.details.attempts_left).toBe(4)

        const verify = yield* call("POST", "/v1/agent/claim/verify", { token: agent.api_key, body: { verification_code: code } })
        expect(verify.status).toBe(200)
        noStore(verify)
        expect(verify.body.data).toEqual({
          org_id: agent.org_id,
          plan: "developer",
          email,
          limits: expect.objectContaining({ send_per_hour: 100, send_per_day: 1000, storage_mb: 1024 })
        })

        const after = yield* call("GET", "/v1/account", { token: agent.api_key })
        expect(after.status).toBe(200)
        expect(after.body.data).toMatchObject({
          id: agent.org_id,
          plan: "developer",
          email,
          managed_inbox_address: agent.address
        })
        expect(after.body.data.limits.send_per_hour).toBe(100)
        const owners = yield* (yield* sql)<{ role: string; email: string }>`
          SELECT m.role, u.email FROM memberships m JOIN users u ON u.id = m.user_id WHERE m.org_id = ${agent.org_id}`
        expect(owners).toEqual([{ role: "owner", email }])

        const again = yield* call("POST", "/v1/agent/claim/verify", { token: agent.api_key, body: { verification_code: code } })
        expect(again.status).toBe(409)
        expect(again.body.error.code).toBe("conflict")
        const restart = yield* call("POST", "/v1/agent/claim/start", { token: agent.api_key, body: { email: uniqueEmail("x") } })
        expect(restart.status).toBe(409)
        const link = yield* call("POST", "/v1/agent/claim/link", { token: agent.api_key })
        expect(link.status).toBe(409)
      }))

    it.effect("claim errors: 401, strict body, email in use answered alike, resend too soon 429, no session 404, expired 410, void after 5 wrong", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const db = yield* sql
        const noAuth = yield* call("POST", "/v1/agent/claim/start", { body: { email: uniqueEmail("n") } })
        expect(noAuth.status).toBe(401)
        expect(noAuth.headers.get("www-authenticate")).toContain("Bearer")

        const agent = yield* agentAccount
        const strict = yield* call("POST", "/v1/agent/claim/start", { token: agent.api_key, body: { email: uniqueEmail("s"), x: 1 } })
        expect(strict.status).toBe(400)
        expect(strict.body.error.code).toBe("validation_error")
        const badEmail = yield* call("POST", "/v1/agent/claim/start", { token: agent.api_key, body: { email: "not-an-email" } })
        expect(badEmail.status).toBe(400)

        const noSession = yield* call("POST", "/v1/agent/claim/verify", { token: agent.api_key, body: { verification_code: "123456" } })
        expect(noSession.status).toBe(404)
        expect(noSession.body.error.code).toBe("not_found")

        const taken = yield* signUp("cli", uniqueEmail("taken"))
        const takenEmail = (yield* db<{ email: string }>`
          SELECT u.email FROM users u JOIN memberships m ON m.user_id = u.id WHERE m.org_id = ${taken.org_id}`)[0]!.email
        // An address with an account is answered like any other (its owner is told by mail); the
        // claim cannot finish: no code was sent for it.
        const otherAgent = yield* agentAccount
        const inUse = yield* call("POST", "/v1/agent/claim/start", { token: otherAgent.api_key, body: { email: takenEmail } })
        expect(inUse.status).toBe(200)
        const inUseVerify = yield* call("POST", "/v1/agent/claim/verify", { token: otherAgent.api_key, body: { verification_code: "123456" } })
        expect(inUseVerify.status).toBe(400)
        expect(inUseVerify.body.error.code).toBe("invalid_grant")

        const email = uniqueEmail("claimer")
        const first = yield* call("POST", "/v1/agent/claim/start", { token: agent.api_key, body: { email } })
        expect(first.status).toBe(200)
        const tooSoon = yield* call("POST", "/v1/agent/claim/start", { token: agent.api_key, body: { email } })
        expect(tooSoon.status).toBe(429)
        expect(tooSoon.body.error.code).toBe("rate_limit_exceeded")
        expect(Number(tooSoon.headers.get("retry-after"))).toBeGreaterThan(0)

        yield* db`UPDATE claim_sessions SET expires_at = now() - interval '1 second' WHERE org_id = ${agent.org_id}`
        const expired = yield* call("POST", "/v1/agent/claim/verify", { token: agent.api_key, body: { verification_code: "123456" } })
        expect(expired.status).toBe(410)
        expect(expired.body.error.code).toBe("claim_expired")

        const seen = yield* mailCount(email)
        const second = yield* call("POST", "/v1/agent/claim/start", { token: agent.api_key, body: { email } })
        expect(second.status).toBe(200)
        const code = codeOf(yield* nextMail(email, seen))
        remember(code)
        const wrongCode = code === "000000" ? "111111" : "000000"
        for (let i = 1; i <= 5; i++) {
          const r = yield* call("POST", "/v1/agent/claim/verify", { token: agent.api_key, body: { verification_code: wrongCode } })
          expect(r.status).toBe(400)
          expect(r.body.error.details.attempts_left).toBe(5 - i)
        }
        const voided = yield* call("POST", "/v1/agent/claim/verify", { token: agent.api_key, body: { verification_code: code } })
        expect(voided.status).toBe(410)
        expect(voided.body.error.code).toBe("claim_expired")
        const account = yield* call("GET", "/v1/account", { token: agent.api_key })
        expect(account.body.data.plan).toBe("agent")
      }))

    it.effect("claim link: single-use claim_url a person opens to claim in the browser", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const server = yield* TestServer
        const agent = yield* agentAccount
        const strict = yield* call("POST", "/v1/agent/claim/link", { token: agent.api_key, body: { extra: true } })
        expect(strict.status).toBe(400)
        expect(strict.body.error.code).toBe("validation_error")
        const empty = yield* call("POST", "/v1/agent/claim/link", { token: agent.api_key, body: {} })
        expect(empty.status).toBe(200)
        const link = yield* call("POST", "/v1/agent/claim/link", { token: agent.api_key })
        expect(link.status).toBe(200)
        noStore(link)
        const data = link.body.data
        remember(data.claim_token, empty.body.data.claim_token)
        expect(data.claim_token).toMatch(/^mr_ct_/)
        expect(data.expires_in_seconds).toBe(3600)
        expect(data.claim_url).toBe(`${server.baseUrl}/claim?token=${data.claim_token}`)

        const pageRes = yield* Effect.promise(() => fetch(data.claim_url))
        expect(pageRes.status).toBe(200)
        const html = yield* Effect.promise(() => pageRes.text())
        expect(html).toContain('<label for="email">Email</label>')
        expect(html).toContain("Send code")
        expect(html).not.toContain("<script")

        const form = (path: string, fields: Record<string, string>, origin?: string) =>
          Effect.promise(() =>
            fetch(`${server.baseUrl}${path}`, {
              method: "POST",
              redirect: "manual",
              headers: { "content-type": "application/x-www-form-urlencoded", ...(origin ? { origin } : {}) },
              body: new URLSearchParams(fields).toString()
            }))
        const crossSite = yield* form("/claim/send-code", { token: data.claim_token, email: "a@example.com" }, "https://evil.example")
        expect(crossSite.status).toBe(403)

        const email = uniqueEmail("browser")
        const seen = yield* mailCount(email)
        const sent = yield* form("/claim/send-code", { token: data.claim_token, email }, server.baseUrl)
        expect(sent.status).toBe(303)
        const code = codeOf(yield* nextMail(email, seen))
        remember(code)
        const codePage = yield* Effect.promise(() => fetch(data.claim_url).then((r) => r.text()))
        expect(codePage).toContain('<label for="code">Code</label>')
        const wrong = yield* form("/claim/verify", { token: data.claim_token, code: code === "000000" ? "111111" : "000000" })
        expect(wrong.status).toBe(400)
        const done = yield* form("/claim/verify", { token: data.claim_token, code })
        expect(done.status).toBe(303)
        expect(done.headers.get("location")).toBe("/claim?done=1")

        const account = yield* call("GET", "/v1/account", { token: agent.api_key })
        expect(account.body.data).toMatchObject({ plan: "developer", email })
        const reused = yield* Effect.promise(() => fetch(data.claim_url))
        expect(reused.status).toBe(404)
      }))
  })

  describe("CLI sign-up", () => {
    it.effect("start mails a code to a real SMTP server; verify creates the account and returns the token set once", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const db = yield* sql
        const email = uniqueEmail("Cli").toUpperCase()
        const lower = email.toLowerCase()
        const seen = yield* mailCount(lower)
        const start = yield* call("POST", "/v1/cli/signup/start", {
          body: { email, terms_accepted: true, device_name: "laptop", metadata: { os: "linux" } }
        })
        expect(start.status).toBe(201)
        noStore(start)
        expect(start.body.data).toEqual({
          signup_token: expect.stringMatching(/^mr_st_/),
          email: lower,
          expires_in: 900,
          resend_after: 60,
          verification_code_length: 6
        })
        remember(start.body.data.signup_token)
        const mail = yield* nextMail(lower, seen)
        expect(mail.subject).toBe("Your Mailroom sign-up code")
        expect(mail.contentTypes).toEqual(expect.arrayContaining(["text/plain", "text/html"]))
        const code = codeOf(mail)
        remember(code)
        expect(mail.html).toContain(code)

        const wrong = yield* call("POST", "/v1/cli/signup/verify", {
          body: { signup_token: start.body.data.signup_token, verification_code: code === "000000" ? "111111" : "000000" }
        })
        expect(wrong.status).toBe(400)
        expect(wrong.body.error.code).toBe("invalid_grant")
        expect(wrong.text).not.toContain(code)

        const shortPassword = yield* call("POST", "/v1/cli/signup/verify", {
          body: { signup_token: start.body.data.signup_token, verification_code: code, password: "short" }
        })
        expect(shortPassword.status).toBe(400)
        expect(shortPassword.body.error.code).toBe("validation_error")
        expect(shortPassword.text).not.toContain("short\"")

        const password = "correct horse battery staple"
        remember(password)
        const verify = yield* call("POST", "/v1/cli/signup/verify", {
          body: { signup_token: start.body.data.signup_token, verification_code: code, password }
        })
        expect(verify.status).toBe(200)
        noStore(verify)
        expectTokenSet(verify.body.data)
        expect(verify.body.data.oauth_client_id).toBe("mailroom-cli")

        const account = yield* call("GET", "/v1/account", { token: verify.body.data.access_token })
        expect(account.status).toBe(200)
        expect(account.body.data).toMatchObject({ id: verify.body.data.org_id, plan: "developer", email: lower })
        const user = (yield* db<{ password_hash: string }>`SELECT password_hash FROM users WHERE email = ${lower}`)[0]!
        expect(user.password_hash).toMatch(/^scrypt\$32768\$8\$1\$/)
        const grant = (yield* db<{ device_name: string; access_token_hash: string }>`
          SELECT device_name, access_token_hash FROM oauth_grants WHERE id = ${verify.body.data.oauth_grant_id}`)[0]!
        expect(grant).toEqual({ device_name: "laptop", access_token_hash: sha256(verify.body.data.access_token) })

        const reuse = yield* call("POST", "/v1/cli/signup/verify", {
          body: { signup_token: start.body.data.signup_token, verification_code: code }
        })
        expect(reuse.status).toBe(400)
        expect(reuse.body.error.code).toBe("invalid_grant")
      }))

    it.effect("expired sign-up: verify and resend answer 400 expired_token", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const db = yield* sql
        const email = uniqueEmail("exp")
        const seen = yield* mailCount(email)
        const start = yield* call("POST", "/v1/cli/signup/start", { body: { email, terms_accepted: true } })
        const code = codeOf(yield* nextMail(email, seen))
        remember(code, start.body.data.signup_token)
        yield* db`UPDATE signup_sessions SET expires_at = now() - interval '1 second', last_sent_at = now() - interval '16 minutes'
                  WHERE email = ${email}`
        const verify = yield* call("POST", "/v1/cli/signup/verify", {
          body: { signup_token: start.body.data.signup_token, verification_code: code }
        })
        expect(verify.status).toBe(400)
        expect(verify.body.error.code).toBe("expired_token")
        const resend = yield* call("POST", "/v1/cli/signup/resend", { body: { signup_token: start.body.data.signup_token } })
        expect(resend.status).toBe(400)
        expect(resend.body.error.code).toBe("expired_token")
        const unknown = yield* call("POST", "/v1/cli/signup/verify", { body: { signup_token: "mr_st_nope", verification_code: "123456" } })
        expect(unknown.status).toBe(400)
        expect(unknown.body.error.code).toBe("invalid_grant")
      }))

    it.effect("5 wrong codes void the sign-up: the right code no longer works", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const email = uniqueEmail("void")
        const seen = yield* mailCount(email)
        const start = yield* call("POST", "/v1/cli/signup/start", { body: { email, terms_accepted: true } })
        const code = codeOf(yield* nextMail(email, seen))
        remember(code, start.body.data.signup_token)
        const wrong = code === "000000" ? "111111" : "000000"
        for (let i = 1; i <= 5; i++) {
          const r = yield* call("POST", "/v1/cli/signup/verify", {
            body: { signup_token: start.body.data.signup_token, verification_code: wrong }
          })
          expect(r.status).toBe(400)
          expect(r.body.error.code).toBe("invalid_grant")
          expect(r.body.error.details.attempts_left).toBe(5 - i)
        }
        const right = yield* call("POST", "/v1/cli/signup/verify", {
          body: { signup_token: start.body.data.signup_token, verification_code: code }
        })
        expect(right.status).toBe(400)
        expect(right.body.error.code).toBe("invalid_grant")
        expect(right.body.error.message).toContain("voided")
        const resend = yield* call("POST", "/v1/cli/signup/resend", { body: { signup_token: start.body.data.signup_token } })
        expect(resend.status).toBe(400)
        const users = yield* (yield* sql)`SELECT 1 FROM users WHERE email = ${email}`
        expect(users.length).toBe(0)
      }))

    it.effect("resend too soon is 429 with Retry-After; later a new code replaces the old one", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const db = yield* sql
        const email = uniqueEmail("resend")
        const seen = yield* mailCount(email)
        const start = yield* call("POST", "/v1/agent/signup/start", { body: { email, terms_accepted: true } })
        const oldCode = codeOf(yield* nextMail(email, seen))
        remember(oldCode, start.body.data.signup_token)
        const soon = yield* call("POST", "/v1/agent/signup/resend", { body: { signup_token: start.body.data.signup_token } })
        expect(soon.status).toBe(429)
        expect(soon.body.error.code).toBe("rate_limit_exceeded")
        const retryAfter = Number(soon.headers.get("retry-after"))
        expect(retryAfter).toBeGreaterThan(55)
        expect(retryAfter).toBeLessThanOrEqual(60)
        // The CLI's token is not the agent's: flows do not mix.
        const wrongFlow = yield* call("POST", "/v1/cli/signup/resend", { body: { signup_token: start.body.data.signup_token } })
        expect(wrongFlow.status).toBe(400)
        expect(wrongFlow.body.error.code).toBe("invalid_grant")

        yield* db`UPDATE signup_sessions SET last_sent_at = now() - interval '61 seconds' WHERE email = ${email}`
        const resend = yield* call("POST", "/v1/agent/signup/resend", { body: { signup_token: start.body.data.signup_token } })
        expect(resend.status).toBe(200)
        noStore(resend)
        expect(resend.body.data).toEqual({ email, expires_in: 900, resend_after: 60, verification_code_length: 6 })
        const newCode = codeOf(yield* nextMail(email, seen + 1))
        remember(newCode)
        if (newCode !== oldCode) {
          const old = yield* call("POST", "/v1/agent/signup/verify", {
            body: { signup_token: start.body.data.signup_token, verification_code: oldCode }
          })
          expect(old.status).toBe(400)
        }
        const ok = yield* call("POST", "/v1/agent/signup/verify", {
          body: { signup_token: start.body.data.signup_token, verification_code: newCode }
        })
        expect(ok.status).toBe(200)
        remember(ok.body.data.access_token, ok.body.data.refresh_token)
      }))

    it.effect("strict bodies, terms, email length and the 2048-byte metadata limit", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const bad = [
          { email: uniqueEmail("a"), terms_accepted: true, unknown: 1 },
          { email: uniqueEmail("a"), terms_accepted: false },
          { email: uniqueEmail("a") },
          { email: `${"a".repeat(250)}@example.com`, terms_accepted: true },
          { email: uniqueEmail("a"), terms_accepted: true, device_name: "" },
          { email: uniqueEmail("a"), terms_accepted: true, device_name: "x".repeat(81) },
          { email: uniqueEmail("a"), terms_accepted: true, signup_code: "x".repeat(129) },
          { email: uniqueEmail("a"), terms_accepted: true, metadata: { blob: "x".repeat(2040) } },
          { email: uniqueEmail("a"), terms_accepted: true, metadata: "text" }
        ]
        for (const body of bad) {
          for (const flow of ["cli", "agent"]) {
            const r = yield* call("POST", `/v1/${flow}/signup/start`, { body })
            expect(r.status, JSON.stringify(body).slice(0, 80)).toBe(400)
            expect(r.body.error.code).toBe("validation_error")
          }
        }
        const big = yield* call("POST", "/v1/cli/login/start", { body: { metadata: { blob: "x".repeat(2040) } } })
        expect(big.status).toBe(400)
        expect(big.body.error.message).toContain("metadata")
        // {"blob":"…"} is 11 bytes of JSON around the value: 2037 characters make exactly 2048 bytes.
        const exact = yield* call("POST", "/v1/cli/login/start", { body: { metadata: { blob: "x".repeat(2037) } } })
        expect(exact.status).toBe(201)
        remember(exact.body.data.device_code)
        const over = yield* call("POST", "/v1/cli/login/start", { body: { metadata: { blob: "x".repeat(2038) } } })
        expect(over.status).toBe(400)
        const strictPoll = yield* call("POST", "/v1/cli/login/poll", { body: { device_code: "x", more: 1 } })
        expect(strictPoll.status).toBe(400)
        expect(strictPoll.body.error.code).toBe("validation_error")
        const emptyPoll = yield* call("POST", "/v1/cli/login/poll", { body: { device_code: "" } })
        expect(emptyPoll.status).toBe(400)
        const verifyLong = yield* call("POST", "/v1/cli/signup/verify", {
          body: { signup_token: "t", verification_code: "1".repeat(33) }
        })
        expect(verifyLong.status).toBe(400)
        expect(verifyLong.body.error.code).toBe("validation_error")
        const agentOrg = yield* call("POST", "/v1/agent/signup/verify", {
          body: { signup_token: "t", verification_code: "123456", org_id: "nope" }
        })
        expect(agentOrg.status).toBe(400)
        const cliOrg = yield* call("POST", "/v1/cli/signup/verify", {
          body: { signup_token: "t", verification_code: "123456", org_id: "00000000-0000-0000-0000-000000000000" }
        })
        expect(cliOrg.status).toBe(400)
      }))

    it.effect("per-email limiter: the 6th sign-up start for one email within an hour is 429 rate_limit_exceeded", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const email = uniqueEmail("limit")
        for (let i = 0; i < 5; i++) {
          const r = yield* call("POST", "/v1/cli/signup/start", { body: { email, terms_accepted: true } })
          expect(r.status).toBe(201)
          remember(r.body.data.signup_token)
        }
        const sixth = yield* call("POST", "/v1/agent/signup/start", { body: { email, terms_accepted: true } })
        expect(sixth.status).toBe(429)
        expect(sixth.body.error.code).toBe("rate_limit_exceeded")
        expect(sixth.headers.get("retry-after")).not.toBeNull()
        expect(sixth.headers.get("ratelimit-policy")).toBe("5;w=3600")
        const other = yield* call("POST", "/v1/cli/signup/start", { body: { email: uniqueEmail("other"), terms_accepted: true } })
        expect(other.status).toBe(201)
        remember(other.body.data.signup_token)
      }))

    it.effect("reserved signup codes: unknown is 400; a valid one is redeemed once and sets the plan", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const db = yield* sql
        const reserved = `RESERVED-${Date.now()}`
        remember(reserved)
        yield* db`INSERT INTO signup_codes (code_hash, plan) VALUES (${sha256(`signup_code:${reserved}`)}, 'pro')`
        const unknown = yield* call("POST", "/v1/cli/signup/start", {
          body: { email: uniqueEmail("code"), terms_accepted: true, signup_code: "NOPE" }
        })
        expect(unknown.status).toBe(400)
        expect(unknown.body.error.code).toBe("validation_error")
        expect(unknown.body.error.message).toContain("signup_code")

        const email = uniqueEmail("code")
        const seen = yield* mailCount(email)
        const start = yield* call("POST", "/v1/cli/signup/start", { body: { email, terms_accepted: true, signup_code: reserved } })
        expect(start.status).toBe(201)
        const code = codeOf(yield* nextMail(email, seen))
        remember(code, start.body.data.signup_token)
        const verify = yield* call("POST", "/v1/cli/signup/verify", {
          body: { signup_token: start.body.data.signup_token, verification_code: code }
        })
        expect(verify.status).toBe(200)
        remember(verify.body.data.access_token, verify.body.data.refresh_token)
        const account = yield* call("GET", "/v1/account", { token: verify.body.data.access_token })
        expect(account.body.data.plan).toBe("pro")
        const row = (yield* db<{ redeemed_org_id: string }>`SELECT redeemed_org_id FROM signup_codes WHERE code_hash = ${sha256(`signup_code:${reserved}`)}`)[0]!
        expect(row.redeemed_org_id).toBe(verify.body.data.org_id)
        const second = yield* call("POST", "/v1/cli/signup/start", {
          body: { email: uniqueEmail("code2"), terms_accepted: true, signup_code: reserved }
        })
        expect(second.status).toBe(400)
      }))
  })

  describe("agent sign-up", () => {
    it.effect("verify returns orgs; org_id selects the workspace; foreign org 403; no workspace 409", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const db = yield* sql
        const email = uniqueEmail("agent")
        const first = yield* signUp("agent", email)
        expectTokenSet(first, ["orgs"])
        expect(first.oauth_client_id).toBe("mailroom-agent")
        expect(first.orgs).toEqual([{ id: first.org_id, name: null }])

        // The same person also belongs to a second, named workspace.
        const second = (yield* db<{ id: string }>`
          INSERT INTO organizations (name, plan, managed_inbox_address)
          VALUES ('Team', 'developer', ${`team-${Date.now()}@agents.localhost`}) RETURNING id`)[0]!.id
        yield* db`INSERT INTO memberships (org_id, user_id, role)
                  SELECT ${second}, id, 'member' FROM users WHERE email = ${email}`

        const chosen = yield* signUp("agent", email, { org_id: second })
        expectTokenSet(chosen, ["orgs"])
        expect(chosen.org_id).toBe(second)
        expect(chosen.org_name).toBe("Team")
        expect(chosen.orgs).toEqual([{ id: first.org_id, name: null }, { id: second, name: "Team" }])
        const account = yield* call("GET", "/v1/account", { token: chosen.access_token })
        expect(account.body.data.id).toBe(second)

        const byDefault = yield* signUp("agent", email)
        expect(byDefault.org_id).toBe(first.org_id)
        const orgCount = (yield* db<{ n: number }>`
          SELECT count(*)::int AS n FROM memberships m JOIN users u ON u.id = m.user_id WHERE u.email = ${email}`)[0]!.n
        expect(orgCount).toBe(2)

        const stranger = yield* agentAccount
        const seen = yield* mailCount(email)
        const start = yield* call("POST", "/v1/agent/signup/start", { body: { email, terms_accepted: true } })
        const code = codeOf(yield* nextMail(email, seen))
        remember(code, start.body.data.signup_token)
        const foreign = yield* call("POST", "/v1/agent/signup/verify", {
          body: { signup_token: start.body.data.signup_token, verification_code: code, org_id: stranger.org_id }
        })
        expect(foreign.status).toBe(403)
        expect(foreign.body.error.code).toBe("forbidden")

        yield* db`DELETE FROM memberships WHERE user_id = (SELECT id FROM users WHERE email = ${email})`
        const orphan = yield* call("POST", "/v1/agent/signup/verify", {
          body: { signup_token: start.body.data.signup_token, verification_code: code }
        })
        expect(orphan.status).toBe(409)
        expect(orphan.body.error.code).toBe("conflict")
      }))
  })

  describe("device login (API side)", () => {
    it.effect("start answers the spec's fields; poll: pending, slow_down raises the interval, invalid, expired", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const server = yield* TestServer
        const db = yield* sql
        const start = yield* call("POST", "/v1/cli/login/start")
        expect(start.status).toBe(201)
        noStore(start)
        const d = start.body.data
        remember(d.device_code)
        expect(Object.keys(d).sort()).toEqual(
          ["device_code", "expires_in", "interval", "user_code", "verification_uri", "verification_uri_complete"]
        )
        expect(d.user_code).toMatch(/^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$/)
        expect(d.verification_uri).toBe(`${server.baseUrl}/device`)
        expect(d.verification_uri_complete).toBe(`${server.baseUrl}/device?user_code=${d.user_code}`)
        expect(d.expires_in).toBe(900)
        expect(d.interval).toBe(5)

        const named = yield* call("POST", "/v1/cli/login/start", { body: { device_name: "ci", metadata: { a: 1 } } })
        expect(named.status).toBe(201)
        remember(named.body.data.device_code)
        const malformed = yield* call("POST", "/v1/cli/login/start", { raw: "{", headers: { "content-type": "application/json" } })
        expect(malformed.status).toBe(400)
        expect(malformed.body.error.code).toBe("validation_error")

        const pending = yield* call("POST", "/v1/cli/login/poll", { body: { device_code: d.device_code } })
        expect(pending.status).toBe(400)
        expect(pending.body.error.code).toBe("authorization_pending")
        const fast = yield* call("POST", "/v1/cli/login/poll", { body: { device_code: d.device_code } })
        expect(fast.status).toBe(400)
        expect(fast.body.error.code).toBe("slow_down")
        expect(fast.body.error.details.interval).toBe(10)
        const row = (yield* db<{ interval_seconds: number }>`
          SELECT interval_seconds FROM device_logins WHERE device_code_hash = ${sha256(d.device_code)}`)[0]!
        expect(row.interval_seconds).toBe(10)
        yield* db`UPDATE device_logins SET last_polled_at = now() - interval '11 seconds' WHERE device_code_hash = ${sha256(d.device_code)}`
        const later = yield* call("POST", "/v1/cli/login/poll", { body: { device_code: d.device_code } })
        expect(later.body.error.code).toBe("authorization_pending")

        const invalid = yield* call("POST", "/v1/cli/login/poll", { body: { device_code: "mr_dc_unknown" } })
        expect(invalid.status).toBe(400)
        expect(invalid.body.error.code).toBe("invalid_grant")

        yield* db`UPDATE device_logins SET expires_at = now() - interval '1 second' WHERE device_code_hash = ${sha256(d.device_code)}`
        const expired = yield* call("POST", "/v1/cli/login/poll", { body: { device_code: d.device_code } })
        expect(expired.status).toBe(400)
        expect(expired.body.error.code).toBe("expired_token")
        const stale = yield* Effect.promise(() => fetch(d.verification_uri_complete))
        expect(stale.status).toBe(404)
      }))
  })

  describe("logout and refresh", () => {
    it.effect("OAuth logout revokes the grant (then 401); API-key logout deletes nothing; key_id rules", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const set = yield* signUp("cli", uniqueEmail("logout"))
        const wrongBody = yield* call("POST", "/v1/cli/logout", { token: set.access_token, body: { key_id: "x" } })
        expect(wrongBody.status).toBe(400)
        const extra = yield* call("POST", "/v1/cli/logout", { token: set.access_token, body: { foo: 1 } })
        expect(extra.status).toBe(400)
        const unknown = yield* call("POST", "/v1/cli/logout", {
          token: set.access_token,
          body: { key_id: "00000000-0000-4000-8000-000000000000" }
        })
        expect(unknown.status).toBe(404)
        expect(unknown.body.error.code).toBe("not_found")

        // A second grant of the same organization: naming it is forbidden.
        const refreshed = yield* signUp("cli", (yield* (yield* sql)<{ email: string }>`
          SELECT u.email FROM users u JOIN memberships m ON m.user_id = u.id WHERE m.org_id = ${set.org_id}`)[0]!.email)
        const other = yield* call("POST", "/v1/cli/logout", { token: set.access_token, body: { key_id: refreshed.oauth_grant_id } })
        expect(other.status).toBe(403)
        expect(other.body.error.code).toBe("forbidden")

        const out = yield* call("POST", "/v1/cli/logout", { token: set.access_token, body: { key_id: set.oauth_grant_id } })
        expect(out.status).toBe(200)
        expect(out.body.data).toEqual({ revoked: true, oauth_grant_id: set.oauth_grant_id })
        const after = yield* call("GET", "/v1/account", { token: set.access_token })
        expect(after.status).toBe(401)
        expect(after.body.error.code).toBe("unauthorized")
        const refreshAfter = yield* call("POST", "/v1/cli/token/refresh", { body: { refresh_token: set.refresh_token } })
        expect(refreshAfter.status).toBe(400)
        expect(refreshAfter.body.error.code).toBe("invalid_grant")
        const stillOther = yield* call("GET", "/v1/account", { token: refreshed.access_token })
        expect(stillOther.status).toBe(200)

        // Same organization, same (empty) body, back to back: each logout revokes its own grant.
        const sibling = yield* call("POST", "/v1/cli/token/refresh", { body: { refresh_token: refreshed.refresh_token } })
        remember(sibling.body.data.access_token, sibling.body.data.refresh_token)
        const third = yield* signUp("cli", (yield* (yield* sql)<{ email: string }>`
          SELECT u.email FROM users u JOIN memberships m ON m.user_id = u.id WHERE m.org_id = ${set.org_id}`)[0]!.email)
        const outA = yield* call("POST", "/v1/cli/logout", { token: sibling.body.data.access_token })
        const outB = yield* call("POST", "/v1/cli/logout", { token: third.access_token })
        expect(outA.body.data).toEqual({ revoked: true, oauth_grant_id: refreshed.oauth_grant_id })
        expect(outB.body.data).toEqual({ revoked: true, oauth_grant_id: third.oauth_grant_id })
        expect(outB.headers.get("idempotent-replayed")).toBeNull()
        expect((yield* call("GET", "/v1/account", { token: third.access_token })).status).toBe(401)

        const agent = yield* agentAccount
        const keyId = (yield* (yield* sql)<{ id: string }>`SELECT id FROM api_keys WHERE org_id = ${agent.org_id}`)[0]!.id
        const legacy = yield* call("POST", "/v1/cli/logout", { token: agent.api_key })
        expect(legacy.status).toBe(200)
        expect(legacy.body.data).toEqual({ revoked: false, key_id: keyId })
        const legacyMatching = yield* call("POST", "/v1/cli/logout", { token: agent.api_key, body: { key_id: keyId } })
        expect(legacyMatching.status).toBe(200)
        const stillWorks = yield* call("GET", "/v1/account", { token: agent.api_key })
        expect(stillWorks.status).toBe(200)
        const none = yield* call("POST", "/v1/cli/logout")
        expect(none.status).toBe(401)
      }))

    it.effect("refresh rotates: new tokens work, the old access and refresh tokens do not, reuse revokes the grant", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const set = yield* signUp("cli", uniqueEmail("refresh"))
        const r1 = yield* call("POST", "/v1/cli/token/refresh", { body: { refresh_token: set.refresh_token } })
        expect(r1.status).toBe(200)
        noStore(r1)
        expectTokenSet(r1.body.data)
        const next = r1.body.data
        expect(next.oauth_grant_id).toBe(set.oauth_grant_id)
        expect(next.org_id).toBe(set.org_id)
        expect(next.access_token).not.toBe(set.access_token)
        expect(next.refresh_token).not.toBe(set.refresh_token)
        expect((yield* call("GET", "/v1/account", { token: next.access_token })).status).toBe(200)
        expect((yield* call("GET", "/v1/account", { token: set.access_token })).status).toBe(401)

        const r2 = yield* call("POST", "/v1/cli/token/refresh", { body: { refresh_token: next.refresh_token } })
        expect(r2.status).toBe(200)
        remember(r2.body.data.access_token, r2.body.data.refresh_token)

        const old = yield* call("POST", "/v1/cli/token/refresh", { body: { refresh_token: set.refresh_token } })
        expect(old.status).toBe(400)
        expect(old.body.error.code).toBe("invalid_grant")
        // Reuse of a rotated token revokes the whole grant.
        expect((yield* call("GET", "/v1/account", { token: r2.body.data.access_token })).status).toBe(401)
        const latest = yield* call("POST", "/v1/cli/token/refresh", { body: { refresh_token: r2.body.data.refresh_token } })
        expect(latest.status).toBe(400)
        const strict = yield* call("POST", "/v1/cli/token/refresh", { body: { refresh_token: "x", grant_type: "refresh_token" } })
        expect(strict.status).toBe(400)
        expect(strict.body.error.code).toBe("validation_error")
        const unknown = yield* call("POST", "/v1/cli/token/refresh", { body: { refresh_token: "mr_rt_unknown" } })
        expect(unknown.body.error.code).toBe("invalid_grant")
      }))

    it.effect("expired access tokens are refused; the refresh token still renews them", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const set = yield* signUp("cli", uniqueEmail("expiry"))
        yield* (yield* sql)`UPDATE oauth_grants SET access_expires_at = now() - interval '1 second' WHERE id = ${set.oauth_grant_id}`
        expect((yield* call("GET", "/v1/account", { token: set.access_token })).status).toBe(401)
        const r = yield* call("POST", "/v1/cli/token/refresh", { body: { refresh_token: set.refresh_token } })
        expect(r.status).toBe(200)
        remember(r.body.data.access_token, r.body.data.refresh_token)
        expect((yield* call("GET", "/v1/account", { token: r.body.data.access_token })).status).toBe(200)
      }))
  })

  describe("housekeeping", () => {
    it.effect("the identity sweep deletes rows expired a day ago, nothing live", () =>
      Effect.gen(function*() {
        const db = yield* sql
        const live = (yield* db<{ n: number }>`SELECT count(*)::int AS n FROM signup_sessions`)[0]!.n
        yield* db`INSERT INTO signup_sessions (flow, token_hash, email, code_hash, last_sent_at, expires_at)
                  VALUES ('cli', ${sha256("old-session")}, 'old@example.com', 'x', now() - interval '3 days', now() - interval '2 days')`
        yield* db`INSERT INTO device_logins (device_code_hash, user_code_hash, interval_seconds, expires_at)
                  VALUES (${sha256("old-device")}, ${sha256("old-user")}, 5, now() - interval '2 days')`
        yield* sweepIdentity
        expect((yield* db<{ n: number }>`SELECT count(*)::int AS n FROM signup_sessions`)[0]!.n).toBe(live)
        expect((yield* db`SELECT 1 FROM device_logins WHERE device_code_hash = ${sha256("old-device")}`).length).toBe(0)
      }))
  })

  describe("secrets", () => {
    it.effect("the database holds no raw secret: every identity table is read and searched", () =>
      Effect.gen(function*() {
        const db = yield* sql
        const tables = [
          "organizations", "users", "memberships", "api_keys", "oauth_grants", "oauth_rotated_refresh_tokens",
          "signup_codes", "signup_sessions", "device_logins", "device_web_sessions", "claim_sessions", "claim_links",
          "idempotency_keys", "rate_limit_windows"
        ]
        let rows = 0
        const dump: Array<string> = []
        for (const table of tables) {
          const result = yield* db.unsafe<{ row: string }>(`SELECT row_to_json(t)::text AS row FROM ${table} t`)
          rows += result.length
          for (const r of result) dump.push(r.row)
        }
        expect(rows).toBeGreaterThan(50)
        expect(secrets.size).toBeGreaterThan(40)
        const text = dump.join("\n")
        for (const secret of secrets) {
          const found = secret.length <= 8 ? new RegExp(`(?<![0-9A-Za-z])${secret}(?![0-9A-Za-z])`).test(text) : text.includes(secret)
          expect(found, `secret ${secret.slice(0, 8)}… stored in clear`).toBe(false)
        }
        // What is stored is the hash.
        const someToken = [...secrets].find((s) => s.startsWith("mr_at_"))!
        const hashed = yield* db`SELECT 1 FROM oauth_grants WHERE access_token_hash = ${sha256(someToken)}
                                 UNION ALL SELECT 1 FROM oauth_rotated_refresh_tokens LIMIT 1`
        expect(hashed.length).toBeGreaterThan(0)
      }))

    it.effect("no secret appears in the service's log output", () =>
      Effect.gen(function*() {
        expect(logLines.length).toBeGreaterThan(50)
        expect(logLines.some((l) => l.includes("POST /v1/cli/signup/verify 200"))).toBe(true)
        const text = logLines.join("\n")
        for (const secret of secrets) {
          const found = secret.length <= 8 ? new RegExp(`(?<![0-9A-Za-z])${secret}(?![0-9A-Za-z])`).test(text) : text.includes(secret)
          expect(found, `secret ${secret.slice(0, 8)}… logged`).toBe(false)
        }
      }))
  })
})
