/**
 * Claim of an emailless agent organization: a person's email is verified
 * with a mailed code, becomes the owner, and the organization moves from `agent` to `developer`
 * keeping its id, API keys and managed inbox. A claim link lets a person finish it in the browser.
 */
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Option, Schema } from "effect"
import { randomUUID } from "node:crypto"
import { ClaimExpired, Conflict, InvalidGrant, NotFound } from "../contract/Errors.js"
import { LIMITS, Plan } from "../contract/Plans.js"
import { Mailer } from "../mail/Mailer.js"
import { Templates } from "../mail/Templates.js"
import { AppConfig } from "../platform/Config.js"
import { RateLimiter } from "../platform/RateLimiter.js"
import { allRows, Count, firstRow, NullableTimestamp, Timestamp } from "../platform/Rows.js"
import { constantTimeEqual, randomToken, sha256Hex } from "../platform/Secrets.js"
import { Accounts, normalizeEmail } from "./Accounts.js"
import { CodeHasher } from "./CodeHasher.js"
import { MAX_WRONG_CODES, newNumericCode, RESEND_AFTER_SECONDS, SIGNUP_TTL_SECONDS } from "./Codes.js"
import { Lockout } from "./Lockout.js"
import { tooSoon } from "./Signup.js"

export const CLAIM_TTL_SECONDS = SIGNUP_TTL_SECONDS
export const CLAIM_LINK_TTL_SECONDS = 3600
export const CLAIM_TOKEN_PREFIX = "mr_ct_"

export const CLAIM_LIMITS = {
  startPerOrg: { limit: 10, windowSeconds: 3600 },
  startPerEmail: { limit: 5, windowSeconds: 3600 },
  verifyPerOrg: { limit: 30, windowSeconds: 3600 },
  linkPerOrg: { limit: 10, windowSeconds: 3600 }
} as const

const OrgRow = Schema.Struct({
  id: Schema.String,
  plan: Plan,
  managed_inbox_address: Schema.NullOr(Schema.String),
  members: Count
})

/** A claim session as `verify` reads it, and again under its row lock. */
const SessionRow = Schema.Struct({
  id: Schema.String,
  email: Schema.String,
  code_hash: Schema.String,
  expires_at: Timestamp,
  voided_at: NullableTimestamp
})
const Id = Schema.Struct({ id: Schema.String })

/** Rows of "open claim session". */
const OpenClaimSessionRow = Schema.Struct({ last_sent_at: Timestamp })

/** Rows of "claim wrong code". */
const ClaimWrongCodeRow = Schema.Struct({ failed_attempts: Schema.Number })

/** Rows of "claim link". */
const ClaimLinkRow = Schema.Struct({ id: Schema.String, org_id: Schema.String })

export class Claim extends Effect.Service<Claim>()("mailroom/Claim", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const limiter = yield* RateLimiter
    const mailer = yield* Mailer
    const accounts = yield* Accounts
    const config = yield* AppConfig
    const hasher = yield* CodeHasher
    const lockout = yield* Lockout

    const organization = (orgId: string) =>
      Effect.flatMap(
        sql`SELECT o.id, o.plan, o.managed_inbox_address,
              (SELECT count(*)::int FROM memberships m WHERE m.org_id = o.id) AS members
            FROM organizations o WHERE o.id = ${orgId}`.pipe(allRows(OrgRow, "organization to claim"), Effect.orDie),
        (rows) => rows[0] ? Effect.succeed(rows[0]) : Effect.fail(new NotFound({ message: "organization not found" }))
      )

    /** Only an agent organization nobody owns yet can be claimed. */
    const claimable = (orgId: string) =>
      Effect.flatMap(organization(orgId), (org) =>
        org.plan === "agent" && org.members === 0
          ? Effect.succeed(org)
          : Effect.fail(new Conflict({ message: "this account is already claimed or is not an agent account" })))

    const emailFree = (email: string) =>
      Effect.flatMap(accounts.findUser(email), (u) =>
        Option.isSome(u)
          ? Effect.fail(new Conflict({ message: "this email already belongs to an account; use another address" }))
          : Effect.void)

    /**
     * Answers the same for an address that has an account and one that has none, so the start
     * cannot tell them apart: limits first, then a claim session either way. An unknown address
     * gets the code; a known one gets a notice instead and its session holds the hash of a code
     * nobody is sent, so a verification there is a wrong code like any other.
     */
    const start = (orgId: string, rawEmail: string) =>
      Effect.gen(function*() {
        const email = normalizeEmail(rawEmail)
        const org = yield* claimable(orgId)
        yield* limiter.enforce(`claim-start:org:${orgId}`, CLAIM_LIMITS.startPerOrg, "claim attempts for this account")
        yield* limiter.enforce(`claim-start:email:${email}`, CLAIM_LIMITS.startPerEmail, "claim emails to this address")
        const now = yield* Clock.currentTimeMillis
        const open = yield* sql`
          SELECT last_sent_at FROM claim_sessions
          WHERE org_id = ${orgId} AND completed_at IS NULL AND voided_at IS NULL AND expires_at > ${new Date(now)}
          ORDER BY created_at DESC LIMIT 1`.pipe(allRows(OpenClaimSessionRow, "open claim session"), Effect.orDie)
        if (open[0]) {
          const elapsed = Math.floor((now - open[0].last_sent_at.getTime()) / 1000)
          if (elapsed < RESEND_AFTER_SECONDS) {
            return yield* tooSoon("claim verification email", RESEND_AFTER_SECONDS - elapsed, RESEND_AFTER_SECONDS, now)
          }
        }
        const known = Option.isSome(yield* accounts.findUser(email))
        const id = randomUUID()
        const code = newNumericCode()
        const stored = known ? randomToken(40) : code
        yield* sql.withTransaction(Effect.gen(function*() {
          // A new code replaces every earlier open one.
          yield* sql`UPDATE claim_sessions SET voided_at = ${new Date(now)}
                     WHERE org_id = ${orgId} AND completed_at IS NULL AND voided_at IS NULL`
          yield* sql`INSERT INTO claim_sessions (id, org_id, email, code_hash, last_sent_at, expires_at)
                     VALUES (${id}, ${orgId}, ${email}, ${hasher.code("claim", id, stored)}, ${new Date(now)},
                             ${new Date(now + CLAIM_TTL_SECONDS * 1000)})`
        })).pipe(Effect.orDie)
        const content = known
          ? Templates.claimAttemptNotice(org.managed_inbox_address)
          : Templates.claimCode(code, CLAIM_TTL_SECONDS / 60, org.managed_inbox_address)
        yield* mailer.send({ to: email, ...content }).pipe(Effect.orDie)
        return { claim_session_id: id, resend_after_seconds: RESEND_AFTER_SECONDS, expires_in_seconds: CLAIM_TTL_SECONDS }
      }).pipe(Effect.withSpan("Claim.start"))

    const verify = (orgId: string, code: string) =>
      Effect.gen(function*() {
        yield* organization(orgId)
        yield* limiter.enforce(`claim-verify:org:${orgId}`, CLAIM_LIMITS.verifyPerOrg, "claim verification attempts")
        yield* claimable(orgId)
        const now = yield* Clock.currentTimeMillis
        const rows = yield* sql`
          SELECT id, email, code_hash, expires_at, voided_at FROM claim_sessions
          WHERE org_id = ${orgId} AND completed_at IS NULL ORDER BY created_at DESC LIMIT 1`.pipe(
          allRows(SessionRow, "claim session"),
          Effect.orDie
        )
        const s = rows[0]
        if (!s) {
          return yield* Effect.fail(new NotFound({ message: "no claim in progress; POST /v1/agent/claim/start first" }))
        }
        if (s.voided_at !== null || s.expires_at.getTime() <= now) {
          return yield* Effect.fail(
            new ClaimExpired({ message: "the claim code expired or was voided; start the claim again" })
          )
        }
        // Under the email's lockout; the row is read again inside it (a concurrent guess may have voided it).
        const outcome = yield* lockout.attempt(
          s.email,
          Effect.gen(function*() {
            const rows = yield* sql`
              SELECT code_hash, voided_at FROM claim_sessions WHERE id = ${s.id} FOR UPDATE`.pipe(
              allRows(SessionRow.pipe(Schema.pick("code_hash", "voided_at")), "claim session locked")
            )
            const row = rows[0]
            if (!row || row.voided_at !== null) return { ok: false, void: true, left: 0 } as const
            if (constantTimeEqual(hasher.code("claim", s.id, code), row.code_hash)) return { ok: true, void: false, left: 0 } as const
            const updated = yield* sql`
              UPDATE claim_sessions SET failed_attempts = failed_attempts + 1,
                voided_at = CASE WHEN failed_attempts + 1 >= ${MAX_WRONG_CODES} THEN now() ELSE voided_at END
              WHERE id = ${s.id} RETURNING failed_attempts`.pipe(
              allRows(ClaimWrongCodeRow, "claim wrong code")
            )
            return { ok: false, void: false, left: Math.max(0, MAX_WRONG_CODES - (updated[0]?.failed_attempts ?? MAX_WRONG_CODES)) } as const
          }).pipe(Effect.orDie),
          (o) => !o.ok && !o.void
        )
        if (outcome.void) {
          return yield* Effect.fail(new ClaimExpired({ message: "the claim code expired or was voided; start the claim again" }))
        }
        if (!outcome.ok) {
          const left = outcome.left
          return yield* Effect.fail(
            new InvalidGrant({
              message: left > 0 ? `wrong verification code; ${left} attempts left` : "wrong verification code; the claim is void, start again",
              details: { attempts_left: left }
            })
          )
        }
        yield* emailFree(s.email)
        yield* sql.withTransaction(Effect.gen(function*() {
          const done = yield* sql`UPDATE claim_sessions SET completed_at = ${new Date(now)}
                                  WHERE id = ${s.id} AND completed_at IS NULL RETURNING id`
          const upgraded = yield* sql`UPDATE organizations SET plan = 'developer', updated_at = ${new Date(now)}
                                      WHERE id = ${orgId} AND plan = 'agent' RETURNING id`
          if (done.length === 0 || upgraded.length === 0) {
            return yield* Effect.fail(new Conflict({ message: "this account was claimed meanwhile" }))
          }
          const users = yield* sql`INSERT INTO users (email) VALUES (${s.email}) RETURNING id`.pipe(allRows(Id, "claim user insert"))
          yield* sql`INSERT INTO memberships (org_id, user_id, role) VALUES (${orgId}, ${users[0]!.id}, 'owner')`
          yield* sql`UPDATE claim_links SET used_at = coalesce(used_at, ${new Date(now)}) WHERE org_id = ${orgId}`
        })).pipe(Effect.catchTag("SqlError", Effect.die))
        return { org_id: orgId, plan: "developer" as const, email: s.email, limits: LIMITS.developer }
      }).pipe(Effect.withSpan("Claim.verify"))

    const link = (orgId: string) =>
      Effect.gen(function*() {
        yield* claimable(orgId)
        yield* limiter.enforce(`claim-link:org:${orgId}`, CLAIM_LIMITS.linkPerOrg, "claim links for this account")
        const now = yield* Clock.currentTimeMillis
        const token = `${CLAIM_TOKEN_PREFIX}${randomToken(40)}`
        yield* sql`INSERT INTO claim_links (org_id, token_hash, expires_at)
                   VALUES (${orgId}, ${sha256Hex(token)}, ${new Date(now + CLAIM_LINK_TTL_SECONDS * 1000)})`.pipe(Effect.orDie)
        return {
          claim_token: token,
          claim_url: `${config.publicBaseUrl}/claim?token=${encodeURIComponent(token)}`,
          expires_in_seconds: CLAIM_LINK_TTL_SECONDS
        }
      }).pipe(Effect.withSpan("Claim.link"))

    /** The organization a claim link is for, while it is unused and unexpired. */
    const linkTarget = (token: string) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        return yield* sql`
          SELECT id, org_id FROM claim_links
          WHERE token_hash = ${sha256Hex(token)} AND used_at IS NULL AND expires_at > ${new Date(now)}`.pipe(
          firstRow(ClaimLinkRow, "claim link"),
          Effect.orDie
        )
      })

    return { start, verify, link, linkTarget, organization } as const
  }),
  dependencies: [Accounts.Default, CodeHasher.Default, Lockout.Default]
}) {}
