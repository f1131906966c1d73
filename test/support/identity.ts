/** Helpers of the identity tests: a service mailing through a test SMTP sink, sign-up shortcuts, log capture. */
import { SqlClient } from "@effect/sql"
import { Effect, Layer } from "effect"
import { expect, vi } from "vitest"
import { call } from "./http.js"
import { testService } from "./harness.js"
import { codeOf, SmtpSink, startSmtpSink } from "./smtpSink.js"

/** Every secret a test saw; nothing of this set may appear in logs or (unhashed) in the database. */
export const secrets = new Set<string>()
export const remember = (...values: Array<string | undefined>) => {
  for (const v of values) if (typeof v === "string" && v.length > 0) secrets.add(v)
}

/** Every line the service logs while the file runs (the logger writes through `console`). */
export const logLines: Array<string> = []
export const captureLogs = () => {
  for (const method of ["log", "info", "warn", "error", "debug", "trace"] as const) {
    vi.spyOn(console, method).mockImplementation((...args: Array<unknown>) => {
      logLines.push(args.map((a) => (typeof a === "string" ? a : JSON.stringify(a) ?? String(a))).join(" "))
    })
  }
}

/** A test service whose outbound mail goes to a fresh SMTP sink, logging everything. */
export const identityService = (overrides: Record<string, string> = {}) =>
  Layer.unwrapScoped(Effect.gen(function*() {
    const sink = yield* startSmtpSink
    return testService({ OUTBOUND_SMTP_URL: `smtp://127.0.0.1:${sink.port}`, LOG_LEVEL: "all", ...overrides }).pipe(
      Layer.merge(Layer.succeed(SmtpSink, sink))
    )
  }))

/** Per-resource and per-address limiters are not under test in most cases: start each test clean. */
export const resetLimits = Effect.flatMap(SqlClient.SqlClient, (sql) => sql`DELETE FROM rate_limit_windows`).pipe(Effect.orDie)

export const nextMail = (to: string, seen: number) =>
  Effect.flatMap(SmtpSink, (sink) => Effect.promise(() => sink.next(to, seen)))

export const mailCount = (to: string) => Effect.map(SmtpSink, (sink) => sink.count(to))

let counter = 0
export const uniqueEmail = (tag: string) => `${tag}-${Date.now().toString(36)}-${counter++}@example.com`

export const TOKEN_SET_KEYS = [
  "access_token", "api_key", "auth_method", "expires_in", "key_id", "key_prefix", "oauth_client_id",
  "oauth_grant_id", "org_id", "org_name", "refresh_token", "token_type"
].sort()

export const expectTokenSet = (data: Record<string, unknown>, extra: ReadonlyArray<string> = []) => {
  expect(Object.keys(data).sort()).toEqual([...TOKEN_SET_KEYS, ...extra].sort())
  expect(data.token_type).toBe("Bearer")
  expect(data.auth_method).toBe("oauth")
  expect(data.api_key).toBe(data.access_token)
  expect(data.key_id).toBe(data.oauth_grant_id)
  expect(String(data.access_token)).toMatch(/^mr_at_/)
  expect(String(data.refresh_token)).toMatch(/^mr_rt_/)
  expect(String(data.access_token).startsWith(String(data.key_prefix))).toBe(true)
  expect(String(data.key_prefix).length).toBeLessThan(String(data.access_token).length)
  expect(data.expires_in).toBe(3600)
  remember(String(data.access_token), String(data.refresh_token))
}

/** A complete sign-up through the API with the code read from the sink; returns the token set. */
export const signUp = (flow: "cli" | "agent", email: string, extra: Record<string, unknown> = {}) =>
  Effect.gen(function*() {
    const seen = yield* mailCount(email)
    const start = yield* call("POST", `/v1/${flow}/signup/start`, { body: { email, terms_accepted: true } })
    expect(start.status).toBe(201)
    remember(start.body.data.signup_token)
    const code = codeOf(yield* nextMail(email, seen))
    remember(code)
    const verify = yield* call("POST", `/v1/${flow}/signup/verify`, {
      body: { signup_token: start.body.data.signup_token, verification_code: code, ...extra }
    })
    expect(verify.status).toBe(200)
    expect(verify.headers.get("cache-control")).toBe("no-store")
    remember(verify.body.data.access_token, verify.body.data.refresh_token)
    return verify.body.data as Record<string, any>
  })
