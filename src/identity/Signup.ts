/**
 * CLI and agent sign-up: start (mail a 6-digit code), resend, verify (account + token set).
 * Pending sign-ups expire 15 min after the last code was sent; 5 wrong codes void one; every step
 * is metered per email and per client address (429 `rate_limit_exceeded`).
 */
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Option, Schema } from "effect"
import { randomUUID } from "node:crypto"
import {
  Conflict,
  ExpiredToken,
  Forbidden,
  InvalidGrant,
  RateLimitExceeded,
  ValidationError
} from "../contract/Errors.js"
import { Plan } from "../contract/Plans.js"
import { Mailer } from "../mail/Mailer.js"
import { Templates } from "../mail/Templates.js"
import { RateLimiter, setLimitHeaders } from "../platform/RateLimiter.js"
import { allRows, NullableTimestamp, Timestamp } from "../platform/Rows.js"
import { constantTimeEqual, randomToken, sha256Hex } from "../platform/Secrets.js"
import { Accounts, normalizeEmail } from "./Accounts.js"
import type { TokenSet } from "./Api.js"
import { CodeHasher } from "./CodeHasher.js"
import {
  CODE_LENGTH,
  hashPassword,
  MAX_WRONG_CODES,
  newNumericCode,
  passwordProblem,
  RESEND_AFTER_SECONDS,
  SIGNUP_TTL_SECONDS
} from "./Codes.js"
import { CLIENT_IDS, Grants } from "./Grants.js"
import { Lockout } from "./Lockout.js"
import { inboxNameFromEmail } from "./Provisioning.js"

export type Flow = "cli" | "agent"

export const SIGNUP_LIMITS = {
  startPerEmail: { limit: 5, windowSeconds: 3600 },
  startPerAddress: { limit: 20, windowSeconds: 3600 },
  resendPerEmail: { limit: 10, windowSeconds: 3600 },
  verifyPerAddress: { limit: 60, windowSeconds: 3600 }
} as const

export const SIGNUP_TOKEN_PREFIX = "mr_st_"
export const signupCodeHash = (code: string) => sha256Hex(`signup_code:${code.trim()}`)

const SessionRow = Schema.Struct({
  id: Schema.String,
  email: Schema.String,
  code_hash: Schema.String,
  failed_attempts: Schema.Number,
  last_sent_at: Timestamp,
  expires_at: Timestamp,
  signup_code_id: Schema.NullOr(Schema.String),
  device_name: Schema.NullOr(Schema.String),
  voided_at: NullableTimestamp,
  completed_at: NullableTimestamp
})
type SessionRow = typeof SessionRow.Type
const Id = Schema.Struct({ id: Schema.String })

export interface StartInput {
  readonly email: string
  readonly signup_code?: string
  readonly device_name?: string
  readonly metadata?: { readonly [k: string]: unknown }
}

/** A per-resource 429 for "too soon", with the headers of the limiter that refused it. */
export const tooSoon = (what: string, retryAfter: number, windowSeconds: number, nowMs: number) =>
  Effect.zipRight(
    setLimitHeaders({
      allowed: false,
      limit: 1,
      remaining: 0,
      reset: Math.ceil(nowMs / 1000) + retryAfter,
      retryAfter,
      windowSeconds
    }, true),
    Effect.fail(
      new RateLimitExceeded({
        message: `${what}: wait ${retryAfter} s before asking again`,
        details: { retry_after: retryAfter }
      })
    )
  )

/** Rows of "signup code redeem". */
const SignupCodeRedeemRow = Schema.Struct({ plan: Plan })

export class Signup extends Effect.Service<Signup>()("mailroom/Signup", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const limiter = yield* RateLimiter
    const mailer = yield* Mailer
    const accounts = yield* Accounts
    const grants = yield* Grants
    const hasher = yield* CodeHasher
    const lockout = yield* Lockout

    const invalidSignupCode = () =>
      new ValidationError({
        message: "signup_code: unknown, expired or already redeemed",
        details: { issues: [{ field: "signup_code", reason: "unknown, expired or already redeemed" }] }
      })

    const sendCode = (email: string, code: string) =>
      mailer.send({ to: email, ...Templates.signupCode(code, SIGNUP_TTL_SECONDS / 60) })

    const start = (flow: Flow, input: StartInput, client: string) =>
      Effect.gen(function*() {
        const email = normalizeEmail(input.email)
        yield* limiter.enforce(`signup-start:email:${email}`, SIGNUP_LIMITS.startPerEmail, "sign-ups for this email")
        yield* limiter.enforce(`signup-start:ip:${client}`, SIGNUP_LIMITS.startPerAddress, "sign-ups from this address")
        const now = yield* Clock.currentTimeMillis
        let signupCodeId: string | null = null
        if (input.signup_code !== undefined) {
          const rows = yield* sql`
            SELECT id FROM signup_codes WHERE code_hash = ${signupCodeHash(input.signup_code)}
              AND redeemed_at IS NULL AND (expires_at IS NULL OR expires_at > ${new Date(now)})`.pipe(
            allRows(Id, "signup code"),
            Effect.orDie
          )
          if (!rows[0]) return yield* Effect.fail(invalidSignupCode())
          signupCodeId = rows[0].id
        }
        const id = randomUUID()
        const token = `${SIGNUP_TOKEN_PREFIX}${randomToken(40)}`
        const code = newNumericCode()
        yield* sql`
          INSERT INTO signup_sessions (id, flow, token_hash, email, code_hash, last_sent_at, expires_at,
                                       signup_code_id, device_name, metadata)
          VALUES (${id}, ${flow}, ${sha256Hex(token)}, ${email}, ${hasher.code("signup", id, code)}, ${new Date(now)},
                  ${new Date(now + SIGNUP_TTL_SECONDS * 1000)}, ${signupCodeId}, ${input.device_name ?? null},
                  ${input.metadata === undefined ? null : JSON.stringify(input.metadata)}::jsonb)`.pipe(Effect.orDie)
        yield* sendCode(email, code).pipe(
          Effect.tapError(() => sql`DELETE FROM signup_sessions WHERE id = ${id}`.pipe(Effect.ignore)),
          Effect.orDie
        )
        return {
          signup_token: token,
          email,
          expires_in: SIGNUP_TTL_SECONDS,
          resend_after: RESEND_AFTER_SECONDS,
          verification_code_length: CODE_LENGTH
        }
      }).pipe(Effect.withSpan("Signup.start", { attributes: { flow } }))

    /** The usable session behind a signup token, or the error the caller gets. */
    const usable = (flow: Flow, token: string) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const rows = yield* sql`
          SELECT id, email, code_hash, failed_attempts, last_sent_at, expires_at, signup_code_id, device_name,
                 voided_at, completed_at
          FROM signup_sessions WHERE token_hash = ${sha256Hex(token)} AND flow = ${flow}`.pipe(
          allRows(SessionRow, "signup session"),
          Effect.orDie
        )
        const s = rows[0]
        if (!s || s.completed_at !== null) {
          return yield* Effect.fail(new InvalidGrant({ message: "unknown or already used signup_token" }))
        }
        if (s.voided_at !== null) {
          return yield* Effect.fail(
            new InvalidGrant({ message: `sign-up voided after ${MAX_WRONG_CODES} wrong codes; start again` })
          )
        }
        if (s.expires_at.getTime() <= now) {
          return yield* Effect.fail(new ExpiredToken({ message: "the pending sign-up expired; start again" }))
        }
        return { session: s, now }
      })

    const resend = (flow: Flow, token: string) =>
      Effect.gen(function*() {
        const { session, now } = yield* usable(flow, token)
        const elapsed = Math.floor((now - session.last_sent_at.getTime()) / 1000)
        if (elapsed < RESEND_AFTER_SECONDS) {
          return yield* tooSoon("verification email resend", RESEND_AFTER_SECONDS - elapsed, RESEND_AFTER_SECONDS, now)
        }
        yield* limiter.enforce(`signup-resend:email:${session.email}`, SIGNUP_LIMITS.resendPerEmail, "verification emails to this address")
        const code = newNumericCode()
        yield* sql`UPDATE signup_sessions SET code_hash = ${hasher.code("signup", session.id, code)},
                     last_sent_at = ${new Date(now)}, expires_at = ${new Date(now + SIGNUP_TTL_SECONDS * 1000)}
                   WHERE id = ${session.id}`.pipe(Effect.orDie)
        yield* sendCode(session.email, code).pipe(Effect.orDie)
        return {
          email: session.email,
          expires_in: SIGNUP_TTL_SECONDS,
          resend_after: RESEND_AFTER_SECONDS,
          verification_code_length: CODE_LENGTH
        }
      }).pipe(Effect.withSpan("Signup.resend", { attributes: { flow } }))

    /**
     * Checks the code under the email's lockout; a wrong one counts for the session (the fifth
     * voids it) and for the email. The row is read again inside the lock: a concurrent guess may
     * have voided it since `usable` read it.
     */
    const checkCode = (session: SessionRow, code: string) =>
      Effect.gen(function*() {
        const outcome = yield* lockout.attempt(
          session.email,
          Effect.gen(function*() {
            const rows = yield* sql`
              SELECT code_hash, voided_at FROM signup_sessions WHERE id = ${session.id} FOR UPDATE`.pipe(
              allRows(SessionRow.pipe(Schema.pick("code_hash", "voided_at")), "signup session locked")
            )
            const row = rows[0]
            if (!row || row.voided_at !== null) return { ok: false, left: 0 } as const
            if (constantTimeEqual(hasher.code("signup", session.id, code), row.code_hash)) return { ok: true, left: 0 } as const
            const updated = yield* sql`
              UPDATE signup_sessions SET failed_attempts = failed_attempts + 1,
                voided_at = CASE WHEN failed_attempts + 1 >= ${MAX_WRONG_CODES} THEN now() ELSE voided_at END
              WHERE id = ${session.id} RETURNING failed_attempts`.pipe(
              allRows(SessionRow.pipe(Schema.pick("failed_attempts")), "signup wrong code")
            )
            return { ok: false, left: Math.max(0, MAX_WRONG_CODES - (updated[0]?.failed_attempts ?? MAX_WRONG_CODES)) } as const
          }).pipe(Effect.orDie),
          (o) => !o.ok
        )
        if (outcome.ok) return
        const left = outcome.left
        return yield* Effect.fail(
          new InvalidGrant({
            message: left > 0
              ? `wrong verification code; ${left} attempt${left === 1 ? "" : "s"} left`
              : `wrong verification code; the sign-up is void after ${MAX_WRONG_CODES} wrong codes, start again`,
            details: { attempts_left: left }
          })
        )
      })

    /** Marks the session used exactly once (two concurrent verifies: one wins). */
    const complete = (sessionId: string) =>
      Effect.flatMap(
        sql`UPDATE signup_sessions SET completed_at = now()
            WHERE id = ${sessionId} AND completed_at IS NULL RETURNING id`.pipe(Effect.orDie),
        (rows) => rows.length > 0 ? Effect.void : Effect.fail(new InvalidGrant({ message: "signup_token already used" }))
      )

    /** New person: their own developer organization (plan from a redeemed signup code). */
    const createAccount = (session: SessionRow, passwordHash: string | null) =>
      Effect.gen(function*() {
        let plan: Plan = "developer"
        if (session.signup_code_id !== null) {
          const rows = yield* sql`
            UPDATE signup_codes SET redeemed_at = now() WHERE id = ${session.signup_code_id} AND redeemed_at IS NULL
            RETURNING plan`.pipe(allRows(SignupCodeRedeemRow, "signup code redeem"), Effect.orDie)
          if (!rows[0]) return yield* Effect.fail(invalidSignupCode())
          plan = rows[0].plan
        }
        const created = yield* accounts.createUserWithOrganization({
          email: session.email,
          passwordHash,
          plan,
          orgName: null,
          inboxName: inboxNameFromEmail(session.email)
        })
        if (session.signup_code_id !== null) {
          yield* sql`UPDATE signup_codes SET redeemed_org_id = ${created.orgId} WHERE id = ${session.signup_code_id}`
            .pipe(Effect.orDie)
        }
        return created
      })

    const rateVerify = (client: string) =>
      limiter.enforce(`signup-verify:ip:${client}`, SIGNUP_LIMITS.verifyPerAddress, "verification attempts from this address")

    const verifyCli = (input: { readonly signup_token: string; readonly verification_code: string; readonly password?: string }, client: string) =>
      Effect.gen(function*() {
        yield* rateVerify(client)
        if (input.password !== undefined) {
          const problem = passwordProblem(input.password)
          if (problem !== null) {
            return yield* Effect.fail(
              new ValidationError({ message: `password: ${problem}`, details: { issues: [{ field: "password", reason: problem }] } })
            )
          }
        }
        const { session } = yield* usable("cli", input.signup_token)
        yield* checkCode(session, input.verification_code)
        const existing = yield* accounts.findUser(session.email)
        if (Option.isSome(existing) && input.password !== undefined) {
          return yield* Effect.fail(
            new ValidationError({
              message: "password: this email already has an account; verify without a password to sign in",
              details: { issues: [{ field: "password", reason: "cannot be set for an existing account" }] }
            })
          )
        }
        const passwordHash = input.password === undefined ? null : yield* hashPassword(input.password)
        const target = yield* sql.withTransaction(Effect.gen(function*() {
          yield* complete(session.id)
          if (Option.isSome(existing)) {
            const orgs = yield* accounts.workspaces(existing.value.id)
            const first = orgs[0]
            if (!first) {
              return yield* Effect.fail(
                new ValidationError({ message: "email: this account has no workspace; contact support", details: {} })
              )
            }
            return { userId: existing.value.id, orgId: first.id }
          }
          return yield* createAccount(session, passwordHash)
        })).pipe(Effect.catchTag("SqlError", Effect.die))
        return yield* grants.issue({
          orgId: target.orgId,
          userId: target.userId,
          clientId: CLIENT_IDS.cli,
          deviceName: session.device_name
        })
      }).pipe(Effect.withSpan("Signup.verifyCli"))

    const verifyAgent = (
      input: { readonly signup_token: string; readonly verification_code: string; readonly org_id?: string },
      client: string
    ) =>
      Effect.gen(function*() {
        yield* rateVerify(client)
        const { session } = yield* usable("agent", input.signup_token)
        yield* checkCode(session, input.verification_code)
        const existing = yield* accounts.findUser(session.email)
        const target = yield* sql.withTransaction(Effect.gen(function*() {
          if (Option.isSome(existing)) {
            const orgs = yield* accounts.workspaces(existing.value.id)
            if (orgs.length === 0) {
              return yield* Effect.fail(
                new Conflict({ message: "this email's account has no usable workspace; contact support" })
              )
            }
            const chosen = input.org_id === undefined ? orgs[0]! : orgs.find((o) => o.id === input.org_id)
            if (!chosen) {
              return yield* Effect.fail(
                new Forbidden({
                  message: "org_id is not a workspace of this email",
                  details: { orgs: orgs.map((o) => ({ id: o.id, name: o.name })) }
                })
              )
            }
            yield* complete(session.id)
            return { userId: existing.value.id, orgId: chosen.id, orgs }
          }
          if (input.org_id !== undefined) {
            return yield* Effect.fail(new Forbidden({ message: "org_id is not a workspace of this email" }))
          }
          yield* complete(session.id)
          const created = yield* createAccount(session, null)
          return { ...created, orgs: [{ id: created.orgId, name: created.orgName }] }
        })).pipe(Effect.catchTag("SqlError", Effect.die))
        const set: TokenSet = yield* grants.issue({
          orgId: target.orgId,
          userId: target.userId,
          clientId: CLIENT_IDS.agent,
          deviceName: session.device_name
        })
        return { ...set, orgs: target.orgs.map((o) => ({ id: o.id, name: o.name })) }
      }).pipe(Effect.withSpan("Signup.verifyAgent"))

    return { start, resend, verifyCli, verifyAgent } as const
  }),
  dependencies: [Accounts.Default, Grants.Default, CodeHasher.Default, Lockout.Default]
}) {}
