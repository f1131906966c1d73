/**
 * Identity attacks from an outside review, each reproduced over plain HTTP against a real service
 * and SMTP sink: /device session fixation and cross-code approval, unlimited user-code lookups,
 * verification-code grinding across codes, code hashes a database leak would reverse, claim start
 * revealing known addresses, email fields a mail library re-parses; plus the inbox name of a
 * person's sign-up.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Exit, Layer, Option, Redacted } from "effect"
import { createHash, createHmac, hkdfSync } from "node:crypto"
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { sweepIdentity } from "../src/identity/Maintenance.js"
import { Mailer } from "../src/mail/Mailer.js"
import { AppConfig } from "../src/platform/Config.js"
import { isExempt } from "../src/platform/RateLimits.js"
import { MASTER_KEY_FILE, parseMasterKey, ServiceKey } from "../src/platform/ServiceKey.js"
import { isPlainEmailAddress } from "../src/contract/EmailAddress.js"
import { DeliveryServicesLive, HttpLive, loggerLayer, PlatformServicesLive } from "../src/Server.js"
import { call } from "./support/http.js"
import { freePort, TestServer } from "./support/harness.js"
import { identityService, mailCount, nextMail, resetLimits, signUp, uniqueEmail } from "./support/identity.js"
import { codeOf, SmtpSink } from "./support/smtpSink.js"

const sql = SqlClient.SqlClient
const sha256 = (s: string) => createHash("sha256").update(s).digest("hex")

/** A browser of one person: a cookie jar, same-origin form posts, no redirects followed. */
const browser = (baseUrl: string, cookies: Record<string, string> = {}) => {
  const jar = { ...cookies }
  const remember = (res: Response) => {
    for (const line of res.headers.getSetCookie()) {
      const [pair] = line.split(";")
      const eq = pair!.indexOf("=")
      jar[pair!.slice(0, eq).trim()] = pair!.slice(eq + 1).trim()
    }
  }
  const cookieHeader = () => Object.entries(jar).map(([k, v]) => `${k}=${v}`).join("; ")
  const get = (path: string, headers: Record<string, string> = {}) =>
    Effect.promise(async () => {
      const res = await fetch(`${baseUrl}${path}`, { redirect: "manual", headers: { cookie: cookieHeader(), ...headers } })
      remember(res)
      return { status: res.status, headers: res.headers, html: await res.text() }
    })
  const post = (path: string, fields: Record<string, string>) =>
    Effect.promise(async () => {
      const res = await fetch(`${baseUrl}${path}`, {
        method: "POST",
        redirect: "manual",
        headers: { "content-type": "application/x-www-form-urlencoded", origin: baseUrl, cookie: cookieHeader() },
        body: new URLSearchParams(fields).toString()
      })
      remember(res)
      return { status: res.status, headers: res.headers, html: await res.text() }
    })
  return { jar, get, post }
}
type Browser = ReturnType<typeof browser>

const csrfOf = (html: string) => /name="csrf" value="([0-9a-f]+)"/.exec(html)?.[1] ?? ""

/** Opens the page for `userCode`, mails a code to `email` and signs in with it. */
const signInOnPage = (b: Browser, userCode: string, email: string) =>
  Effect.gen(function*() {
    const opened = yield* b.get(`/device?user_code=${userCode}`)
    expect(opened.status).toBe(200)
    const seen = yield* mailCount(email)
    const sent = yield* b.post("/device/send-code", { csrf: csrfOf(opened.html), user_code: userCode, email })
    expect(sent.status).toBe(303)
    const code = codeOf(yield* nextMail(email, seen))
    const form = yield* b.get(`/device?user_code=${userCode}`)
    const signedIn = yield* b.post("/device/sign-in", { csrf: csrfOf(form.html), user_code: userCode, code })
    expect(signedIn.status).toBe(303)
    return yield* b.get(`/device?user_code=${userCode}`)
  })

/** What an attacker holding the cookie can do: open their own code's page and press Approve. */
const approveAs = (b: Browser, userCode: string) =>
  Effect.gen(function*() {
    const opened = yield* b.get(`/device?user_code=${userCode}`)
    return yield* b.post("/device/decision", { csrf: csrfOf(opened.html), user_code: userCode, decision: "approve" })
  })

const startLogin = Effect.map(call("POST", "/v1/cli/login/start", { body: { device_name: "attacker" } }), (r) => {
  expect(r.status).toBe(201)
  return r.body.data as { device_code: string; user_code: string }
})

const pollNow = (deviceCode: string) =>
  Effect.gen(function*() {
    const db = yield* sql
    yield* db`UPDATE device_logins SET last_polled_at = NULL WHERE device_code_hash = ${sha256(deviceCode)}`
    return yield* call("POST", "/v1/cli/login/poll", { body: { device_code: deviceCode } })
  })

const agentAccount = Effect.map(call("POST", "/v1/agent/accounts", { body: { terms_accepted: true } }), (r) => {
  expect(r.status).toBe(200)
  return r.body.data as { api_key: string; org_id: string; address: string }
})

/** The master key, from its file in DATA_DIR (the database holds only a check value of it). */
const masterKey = Effect.map(AppConfig, (c) => Buffer.from(readFileSync(join(c.dataDir, MASTER_KEY_FILE), "utf8").trim(), "hex"))
const codeKey = (master: Buffer) => Buffer.from(hkdfSync("sha256", master, Buffer.alloc(0), Buffer.from("identity/codes"), 32))
const hmac = (key: Buffer, s: string) => createHmac("sha256", key).update(s).digest("hex")

layer(identityService({ LOG_LEVEL: "warning" }), { timeout: 180_000, excludeTestServices: true })("identity security", (it) => {
  describe("/device session fixation", () => {
    it.effect("a cookie the attacker chose and planted does not let them approve their login with the victim's sign-in", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const server = yield* TestServer
        const victimEmail = uniqueEmail("victim")
        yield* signUp("cli", victimEmail)
        const own = yield* startLogin
        const attack = yield* startLogin

        const planted = "attacker-chosen-session-cookie-0123456789"
        const victim = browser(server.baseUrl, { mr_device: planted })
        const page = yield* signInOnPage(victim, own.user_code, victimEmail)
        expect(page.html).toContain("Signed in as")

        const attacker = browser(server.baseUrl, { mr_device: planted })
        const decision = yield* approveAs(attacker, attack.user_code)
        const poll = yield* pollNow(attack.device_code)
        expect(poll.status).toBe(400)
        expect(poll.body.error.code).toBe("authorization_pending")
        expect(decision.status).toBe(403)
        // The server replaced the planted value with one it issued.
        expect(victim.jar["mr_device"]).not.toBe(planted)
      }))

    it.effect("a cookie the server issued to the attacker, planted before sign-in, is worthless after it (rotated)", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const server = yield* TestServer
        const victimEmail = uniqueEmail("victim2")
        yield* signUp("cli", victimEmail)
        const own = yield* startLogin
        const attack = yield* startLogin

        const attacker = browser(server.baseUrl)
        yield* attacker.get(`/device?user_code=${attack.user_code}`)
        const issued = attacker.jar["mr_device"]!

        const victim = browser(server.baseUrl, { mr_device: issued })
        const page = yield* signInOnPage(victim, own.user_code, victimEmail)
        expect(page.html).toContain("Signed in as")

        const decision = yield* approveAs(attacker, attack.user_code)
        const poll = yield* pollNow(attack.device_code)
        expect(poll.body.error.code).toBe("authorization_pending")
        expect(decision.status).toBe(403)
        expect(issued).toMatch(/^[A-Za-z0-9]{32}\.[0-9a-f]{32}$/)
        expect(victim.jar["mr_device"]).not.toBe(issued)

        // The victim's own approval still works with the rotated cookie.
        const mine = yield* victim.post("/device/decision", { csrf: csrfOf(page.html), user_code: own.user_code, decision: "approve" })
        expect(mine.status).toBe(303)
        expect(mine.headers.get("location")).toBe("/device?done=approved")
        const token = yield* pollNow(own.device_code)
        expect(token.status).toBe(200)
      }))

    it.effect("a sign-in approves only the user code it was made for, not another code opened in the same session", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const server = yield* TestServer
        const email = uniqueEmail("bound")
        yield* signUp("cli", email)
        const own = yield* startLogin
        const other = yield* startLogin
        const person = browser(server.baseUrl)
        yield* signInOnPage(person, own.user_code, email)

        const otherPage = yield* person.get(`/device?user_code=${other.user_code}`)
        expect(otherPage.status).toBe(200)
        const decision = yield* person.post("/device/decision", {
          csrf: csrfOf(otherPage.html),
          user_code: other.user_code,
          decision: "approve"
        })
        const poll = yield* pollNow(other.device_code)
        expect(poll.body.error.code).toBe("authorization_pending")
        expect(decision.status).toBe(403)
        // The page asks to sign in for this code instead of offering Approve.
        expect(otherPage.html).not.toContain('value="approve"')
        expect(otherPage.html).toContain("Send code")
      }))

    it.effect("cookies: HttpOnly, SameSite=Lax, path /device; Secure when the public base URL is https", () =>
      Effect.gen(function*() {
        const server = yield* TestServer
        const plain = yield* browser(server.baseUrl).get("/device")
        const cookie = plain.headers.get("set-cookie") ?? ""
        expect(cookie).toMatch(/^mr_device=[A-Za-z0-9]{32}\.[0-9a-f]{32};/)
        expect(cookie).toMatch(/HttpOnly/i)
        expect(cookie).toMatch(/SameSite=Lax/i)
        expect(cookie).toMatch(/Path=\/device/i)
        expect(cookie).not.toMatch(/Secure/i)

        const base = yield* AppConfig
        const db = yield* sql
        const port = yield* Effect.promise(freePort)
        yield* Layer.build(
          HttpLive.pipe(
            Layer.provide(DeliveryServicesLive),
            Layer.provide(PlatformServicesLive),
            Layer.provide(loggerLayer),
            Layer.provide(Layer.succeed(AppConfig, { ...base, port, publicBaseUrl: "https://mailroom.example" })),
            Layer.provide(Layer.succeed(SqlClient.SqlClient, db))
          )
        )
        const https = yield* browser(`http://127.0.0.1:${port}`).get("/device")
        expect(https.status).toBe(200)
        expect(https.headers.get("set-cookie") ?? "").toMatch(/;\s*Secure/i)
        expect(https.headers.get("set-cookie") ?? "").toMatch(/SameSite=Lax/i)
      }).pipe(Effect.scoped))
  })

  describe("user code lookups are rate limited", () => {
    it("only the page's static assets stay exempt", () => {
      expect(isExempt("GET", "/device")).toBe(false)
      expect(isExempt("GET", "/device/assets/site.css")).toBe(true)
      expect(isExempt("POST", "/device/send-code")).toBe(false)
    })

    it.effect("per client address: guessing codes gets an HTML 429 with Retry-After and the limiter's headers", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const server = yield* TestServer
        const guesser = browser(server.baseUrl)
        const letters = "BCDFGHJKLMNPQRSTVWXZ"
        const guess = (i: number) =>
          `${letters[i % 20]}${letters[(i >> 2) % 20]}${letters[(i >> 4) % 20]}B-CDF${letters[(i * 7) % 20]}`
        let refused: { status: number; headers: Headers; html: string } | undefined
        let answered = 0
        for (let i = 0; i < 40 && refused === undefined; i++) {
          const r = yield* guesser.get(`/device?user_code=${guess(i)}`)
          if (r.status === 429) refused = r
          else answered++
        }
        expect(answered).toBe(30)
        expect(refused!.headers.get("content-type")).toContain("text/html")
        expect(refused!.html).toContain("Too many attempts")
        expect(Number(refused!.headers.get("retry-after"))).toBeGreaterThan(0)
        expect(refused!.headers.get("ratelimit-policy")).toBe("30;w=600")
        expect(refused!.headers.get("ratelimit-remaining")).toBe("0")

        const asJson = yield* guesser.get(`/device?user_code=BBBB-BBBB`, { accept: "application/json" })
        expect(asJson.status).toBe(429)
        const body = JSON.parse(asJson.html)
        expect(body.success).toBe(false)
        expect(body.error.code).toBe("rate_limit_exceeded")
        expect(asJson.headers.get("retry-after")).not.toBeNull()

        // The page without a code (and its static parts) is no look-up.
        const form = yield* guesser.get("/device")
        expect(form.status).toBe(200)
      }))

    it.effect("per user code: one code hammered is refused while other codes are still answered", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const server = yield* TestServer
        const login = yield* startLogin
        const b = browser(server.baseUrl)
        const statuses: Array<number> = []
        for (let i = 0; i < 21; i++) statuses.push((yield* b.get(`/device?user_code=${login.user_code}`)).status)
        expect(statuses.slice(0, 20).every((s) => s === 200)).toBe(true)
        expect(statuses[20]).toBe(429)
        const refused = yield* b.get(`/device?user_code=${login.user_code.toLowerCase()}`)
        expect(refused.status).toBe(429)
        expect(refused.headers.get("ratelimit-policy")).toBe("20;w=600")
        const another = yield* b.get("/device?user_code=BBBB-CCCC")
        expect(another.status).toBe(404)
        // The limiter's table holds no user code.
        const keys = yield* (yield* sql)<{ key: string }>`SELECT key FROM rate_limit_windows`
        expect(keys.some((k) => k.key.includes(login.user_code))).toBe(false)
      }))
  })

  describe("verification codes", () => {
    it.effect("at most 10 wrong codes per email a day across codes; then 429 for that email, correct code or not, from any address", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const email = uniqueEmail("grind")
        const wrongFor = (code: string) => code === "000000" ? "111111" : "000000"
        const session = () =>
          Effect.gen(function*() {
            const seen = yield* mailCount(email)
            const start = yield* call("POST", "/v1/cli/signup/start", { body: { email, terms_accepted: true } })
            expect(start.status).toBe(201)
            return { token: start.body.data.signup_token as string, code: codeOf(yield* nextMail(email, seen)) }
          })
        for (let round = 0; round < 2; round++) {
          const s = yield* session()
          for (let i = 0; i < 5; i++) {
            const r = yield* call("POST", "/v1/cli/signup/verify", { body: { signup_token: s.token, verification_code: wrongFor(s.code) } })
            expect(r.status).toBe(400)
            expect(r.body.error.code).toBe("invalid_grant")
          }
        }
        // Limits per address forgotten (another source address): the email stays locked.
        yield* resetLimits
        const last = yield* session()
        const locked = yield* call("POST", "/v1/cli/signup/verify", { body: { signup_token: last.token, verification_code: last.code } })
        expect(locked.status).toBe(429)
        expect(locked.body.error.code).toBe("rate_limit_exceeded")
        expect(locked.headers.get("ratelimit-policy")).toBe("10;w=86400")
        expect(Number(locked.headers.get("retry-after"))).toBeGreaterThan(86_000)
        const users = yield* (yield* sql)`SELECT 1 FROM users WHERE email = ${email}`
        expect(users.length).toBe(0)

        // The lockout is per email, not per flow: the agent sign-up of that email is locked too.
        const seen = yield* mailCount(email)
        const agent = yield* call("POST", "/v1/agent/signup/start", { body: { email, terms_accepted: true } })
        const agentCode = codeOf(yield* nextMail(email, seen))
        const agentVerify = yield* call("POST", "/v1/agent/signup/verify", {
          body: { signup_token: agent.body.data.signup_token, verification_code: agentCode }
        })
        expect(agentVerify.status).toBe(429)

        // Another email is unaffected.
        yield* signUp("cli", uniqueEmail("other"))
      }))

    it.effect("the lockout covers the /device sign-in and claim verification of the same email", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const server = yield* TestServer
        const db = yield* sql
        const email = uniqueEmail("locked")
        yield* signUp("cli", email)
        yield* db`INSERT INTO verification_failures (email) SELECT ${email} FROM generate_series(1, 10)`
        const login = yield* startLogin
        const b = browser(server.baseUrl)
        const opened = yield* b.get(`/device?user_code=${login.user_code}`)
        const seen = yield* mailCount(email)
        yield* b.post("/device/send-code", { csrf: csrfOf(opened.html), user_code: login.user_code, email })
        const code = codeOf(yield* nextMail(email, seen))
        const signIn = yield* b.post("/device/sign-in", { csrf: csrfOf(opened.html), user_code: login.user_code, code })
        expect(signIn.status).toBe(429)
        expect(signIn.headers.get("content-type")).toContain("text/html")
        expect(signIn.headers.get("retry-after")).not.toBeNull()

        const unknown = uniqueEmail("claim-locked")
        yield* db`INSERT INTO verification_failures (email) SELECT ${unknown} FROM generate_series(1, 10)`
        const agent = yield* agentAccount
        const before = yield* mailCount(unknown)
        const start = yield* call("POST", "/v1/agent/claim/start", { token: agent.api_key, body: { email: unknown } })
        expect(start.status).toBe(200)
        const claimCode = codeOf(yield* nextMail(unknown, before))
        const verify = yield* call("POST", "/v1/agent/claim/verify", { token: agent.api_key, body: { verification_code: claimCode } })
        expect(verify.status).toBe(429)
        expect(verify.body.error.code).toBe("rate_limit_exceeded")
      }))

    it.effect("the identity sweep forgets failures older than the lockout's day, not newer ones", () =>
      Effect.gen(function*() {
        const db = yield* sql
        const email = uniqueEmail("sweep")
        yield* db`INSERT INTO verification_failures (email, failed_at) VALUES (${email}, now() - interval '25 hours'), (${email}, now() - interval '23 hours')`
        yield* sweepIdentity
        const left = yield* db<{ n: number }>`SELECT count(*)::int AS n FROM verification_failures WHERE email = ${email}`
        expect(left[0]!.n).toBe(1)
      }))

    it.effect("codes and user codes are stored as HMAC under a key kept apart from them, not as bare SHA-256", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const db = yield* sql
        const email = uniqueEmail("keyed")
        const seen = yield* mailCount(email)
        const start = yield* call("POST", "/v1/cli/signup/start", { body: { email, terms_accepted: true } })
        const code = codeOf(yield* nextMail(email, seen))
        const row = (yield* db<{ id: string; code_hash: string }>`
          SELECT id, code_hash FROM signup_sessions WHERE token_hash = ${sha256(start.body.data.signup_token)}`)[0]!
        expect(row.code_hash).not.toBe(sha256(`signup:${row.id}:${code}`))
        const master = yield* masterKey
        expect(master.length).toBe(32)
        expect(row.code_hash).toBe(hmac(codeKey(master), `signup:${row.id}:${code}`))

        const login = yield* startLogin
        const stored = (yield* db<{ user_code_hash: string }>`
          SELECT user_code_hash FROM device_logins WHERE device_code_hash = ${sha256(login.device_code)}`)[0]!
        expect(stored.user_code_hash).not.toBe(sha256(`user_code:${login.user_code}`))
        expect(stored.user_code_hash).toBe(hmac(codeKey(master), `user_code:${login.user_code}`))

        // Enumerating every 6-digit code against the row finds nothing without the key.
        let found = false
        for (let i = 0; i < 1_000_000 && !found; i++) {
          found = sha256(`signup:${row.id}:${String(i).padStart(6, "0")}`) === row.code_hash
        }
        expect(found).toBe(false)
      }))

    it.effect("service key: created once and shared (a second instance derives the same keys); MAILROOM_SECRET_KEY wins; another key stops", () =>
      Effect.gen(function*() {
        const derive = (purpose: string) =>
          Effect.flatMap(ServiceKey, (k) => k.derive(purpose)).pipe(Effect.provide(ServiceKey.Default))
        const [a, b] = yield* Effect.all([derive("test/one"), derive("test/one")], { concurrency: 2 })
        expect(a.equals(b)).toBe(true)
        expect(a.length).toBe(32)
        const other = yield* derive("test/two")
        expect(other.equals(a)).toBe(false)
        const master = yield* masterKey
        expect(a.equals(Buffer.from(hkdfSync("sha256", master, Buffer.alloc(0), Buffer.from("test/one"), 32)))).toBe(true)

        // The variable wins over the file: a process without a key file uses it and writes none.
        const elsewhere = mkdtempSync(join(tmpdir(), "mailroom-key-"))
        const config = yield* AppConfig
        const withKey = (key: string) =>
          Effect.flatMap(ServiceKey, (k) => k.derive("test/one")).pipe(
            Effect.provide(ServiceKey.Default.pipe(Layer.provide(Layer.succeed(AppConfig, {
              ...config,
              dataDir: elsewhere,
              masterKey: Option.some(Redacted.make(key))
            })))),
            Effect.exit
          )
        const configured = yield* withKey(master.toString("base64"))
        expect(Exit.isSuccess(configured) && configured.value.equals(a)).toBe(true)
        expect(existsSync(join(elsewhere, MASTER_KEY_FILE))).toBe(false)
        // Another key than the one the database's secrets were sealed with stops the start.
        expect(Exit.isFailure(yield* withKey("ab".repeat(32)))).toBe(true)
        expect(Exit.isFailure(yield* withKey("too-short"))).toBe(true)
        rmSync(elsewhere, { recursive: true, force: true })
        const parsed = parseMasterKey(Buffer.alloc(32, 7).toString("base64"))
        expect(Buffer.isBuffer(parsed) ? parsed.length : parsed).toBe(32)
        expect(typeof parseMasterKey("ab".repeat(31))).toBe("string")
      }))
  })

  describe("claim start", () => {
    it.effect("answers the same for an address with an account and one without; the owner is told by mail; limits come first", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const known = uniqueEmail("known")
        yield* signUp("cli", known)
        const unknown = uniqueEmail("unknown")

        const agentA = yield* agentAccount
        const agentB = yield* agentAccount
        const seenKnown = yield* mailCount(known)
        const forKnown = yield* call("POST", "/v1/agent/claim/start", { token: agentA.api_key, body: { email: known } })
        const forUnknown = yield* call("POST", "/v1/agent/claim/start", { token: agentB.api_key, body: { email: unknown } })
        expect(forKnown.status).toBe(200)
        expect(forUnknown.status).toBe(200)
        expect(Object.keys(forKnown.body.data).sort()).toEqual(Object.keys(forUnknown.body.data).sort())
        expect(forKnown.body.data.expires_in_seconds).toBe(forUnknown.body.data.expires_in_seconds)
        expect(forKnown.headers.get("cache-control")).toBe("no-store")

        const notice = yield* nextMail(known, seenKnown)
        expect(notice.subject).toContain("refused")
        expect(notice.text).not.toMatch(/\b\d{6}\b/)
        yield* nextMail(unknown, 0)

        // A verification of the known address's claim is a wrong code like any other.
        const wrongKnown = yield* call("POST", "/v1/agent/claim/verify", { token: agentA.api_key, body: { verification_code: "123456" } })
        const wrongUnknown = yield* call("POST", "/v1/agent/claim/verify", { token: agentB.api_key, body: { verification_code: "123456" } })
        expect(wrongKnown.status).toBe(400)
        expect(wrongKnown.body.error).toMatchObject({ code: "invalid_grant", details: { attempts_left: 4 } })
        expect(wrongUnknown.body.error.details.attempts_left).toBe(4)
        const still = yield* call("GET", "/v1/account", { token: agentA.api_key })
        expect(still.body.data.plan).toBe("agent")

        // The per-email limit answers before anything about the address: 5 claims an hour, known or not.
        const statuses: Array<number> = []
        for (let i = 0; i < 5; i++) {
          const agent = yield* agentAccount
          statuses.push((yield* call("POST", "/v1/agent/claim/start", { token: agent.api_key, body: { email: known } })).status)
        }
        expect(statuses).toEqual([200, 200, 200, 200, 429])
      }))

    it.effect("an address that gets an account between start and verify: the right code answers 409", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const agent = yield* agentAccount
        const email = uniqueEmail("raced")
        const start = yield* call("POST", "/v1/agent/claim/start", { token: agent.api_key, body: { email } })
        expect(start.status).toBe(200)
        const code = codeOf(yield* nextMail(email, 0))
        yield* signUp("cli", email)
        const verify = yield* call("POST", "/v1/agent/claim/verify", { token: agent.api_key, body: { verification_code: code } })
        expect(verify.status).toBe(409)
        expect(verify.body.error.code).toBe("conflict")
      }))
  })

  describe("email fields", () => {
    const hostile = [
      "ceo@corp.test<attacker>",
      "ceo@corp.test<attacker@evil.test>",
      "Ceo <ceo@corp.test>",
      "ceo@corp.test,attacker@evil.test",
      "ceo@corp.test;attacker@evil.test",
      "\"ceo\"@corp.test",
      "ceo@[127.0.0.1]",
      "ceo@corp.test\r\nbcc:attacker@evil.test",
      "ceo(comment)@corp.test",
      "ceo@corp..test",
      ".ceo@corp.test",
      "ceo@corp.123"
    ]

    it("one plain addr-spec is accepted, nothing else", () => {
      for (const s of hostile) expect(isPlainEmailAddress(s), s).toBe(false)
      for (const s of ["a@b.co", "first.last+tag@sub.example.com", "o'brien@example.ie", "x_y-z@xn--bcher-kva.example"]) {
        expect(isPlainEmailAddress(s), s).toBe(true)
      }
      expect(isPlainEmailAddress(`${"a".repeat(65)}@example.com`)).toBe(false)
    })

    it.effect("sign-up, claim start and the /device form refuse them with 400 and mail nobody", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const server = yield* TestServer
        const sink = yield* SmtpSink
        const db = yield* sql
        const agent = yield* agentAccount
        const login = yield* startLogin
        const b = browser(server.baseUrl)
        const opened = yield* b.get(`/device?user_code=${login.user_code}`)
        const mailsBefore = sink.messages.length
        const sessionsBefore = (yield* db<{ n: number }>`SELECT count(*)::int AS n FROM signup_sessions`)[0]!.n
        for (const email of hostile) {
          for (const flow of ["cli", "agent"]) {
            const r = yield* call("POST", `/v1/${flow}/signup/start`, { body: { email, terms_accepted: true } })
            expect(r.status, `${flow} ${email}`).toBe(400)
            expect(r.body.error.code).toBe("validation_error")
          }
          const claim = yield* call("POST", "/v1/agent/claim/start", { token: agent.api_key, body: { email } })
          expect(claim.status, email).toBe(400)
          expect(claim.body.error.code).toBe("validation_error")
          const form = yield* b.post("/device/send-code", { csrf: csrfOf(opened.html), user_code: login.user_code, email })
          expect(form.status, email).toBe(400)
          expect(form.html).toContain("Enter one valid email address")
        }
        yield* Effect.sleep("300 millis")
        expect(sink.messages.length).toBe(mailsBefore)
        expect((yield* db<{ n: number }>`SELECT count(*)::int AS n FROM signup_sessions`)[0]!.n).toBe(sessionsBefore)
      }))

    it.effect("the mailer sends to exactly the recorded address (SMTP envelope) and refuses a string that is not one", () =>
      Effect.gen(function*() {
        const sink = yield* SmtpSink
        const mailer = yield* Effect.provide(Mailer, Mailer.Default)
        const content = { subject: "hello", text: "hello", html: "<p>hello</p>" }
        const hostileTo = "victim@corp.test<attacker@evil.test>"
        const refused = yield* Effect.either(mailer.send({ to: hostileTo, ...content }))
        expect(refused._tag).toBe("Left")
        yield* Effect.sleep("200 millis")
        expect(sink.count("attacker@evil.test")).toBe(0)

        const to = uniqueEmail("exact")
        yield* mailer.send({ to, ...content })
        const got = yield* nextMail(to, 0)
        expect(got.to).toEqual([to])
      }))
  })

  describe("inbox names", () => {
    it.effect("a person's sign-up gets an inbox named after the email's local part, unique; agent accounts keep agent-…", () =>
      Effect.gen(function*() {
        yield* resetLimits
        const config = yield* AppConfig
        const domain = config.managedInboxDomain
        const tag = `jane${Date.now().toString(36)}`
        const inboxOf = (set: Record<string, any>) =>
          Effect.map(call("GET", "/v1/account", { token: set.access_token }), (r) => r.body.data.managed_inbox_address as string)

        const first = yield* signUp("cli", `${tag}.doe+news@example.com`)
        expect(yield* inboxOf(first)).toBe(`${tag}-doe@${domain}`)
        const second = yield* signUp("agent", `${tag}.doe@other.example`)
        const taken = yield* inboxOf(second)
        expect(taken).toMatch(new RegExp(`^${tag}-doe-[a-z0-9]{4}@${domain.replace(/\./g, "\\.")}$`))

        const role = yield* signUp("cli", `postmaster@${tag}.example`)
        expect(yield* inboxOf(role)).toMatch(new RegExp(`^postmaster-inbox(-[a-z0-9]{4})?@`))

        const agent = yield* agentAccount
        expect(agent.address).toMatch(/^agent-[a-z0-9]{10}@/)
      }))
  })
})
