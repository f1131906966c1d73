/**
 * Browser sessions of the `/device` page: a cookie (stored hashed) that first holds an emailed
 * sign-in code, then the signed-in person. Short-lived; 5 wrong codes drop the pending sign-in.
 *
 * Against session fixation: the page accepts only cookies it signed itself (CodeHasher), the
 * cookie is replaced at sign-in (a cookie known before sign-in is worthless after it), and a
 * sign-in holds for the one CLI login (user code) it was made for.
 */
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Option, Schema } from "effect"
import { randomUUID } from "node:crypto"
import { Mailer } from "../mail/Mailer.js"
import { Templates } from "../mail/Templates.js"
import { allRows, firstRow, NullableTimestamp } from "../platform/Rows.js"
import { constantTimeEqual, sha256Hex } from "../platform/Secrets.js"
import { Accounts, normalizeEmail } from "./Accounts.js"
import { CodeHasher } from "./CodeHasher.js"
import { MAX_WRONG_CODES, newNumericCode } from "./Codes.js"
import { Lockout } from "./Lockout.js"

export const WEB_SESSION_TTL_SECONDS = 30 * 60
export const WEB_CODE_TTL_SECONDS = 10 * 60
export const COOKIE_NAME = "mr_device"

export interface WebSession {
  readonly id: string
  readonly userId: string | null
  readonly pendingEmail: string | null
  readonly codeExpiresAt: Date | null
  /** The device login this session signs in for (set when the code is sent). */
  readonly loginId: string | null
}

export type CodeCheck =
  | { readonly _tag: "Ok"; readonly cookie: string }
  | { readonly _tag: "Wrong" }
  | { readonly _tag: "Expired" }
  | { readonly _tag: "None" }

const Row = Schema.Struct({
  id: Schema.String,
  user_id: Schema.NullOr(Schema.String),
  pending_email: Schema.NullOr(Schema.String),
  code_expires_at: NullableTimestamp,
  login_id: Schema.NullOr(Schema.String)
})
type Row = typeof Row.Type

/** What checking a code reads, before and under the row lock. */
const Pending = Row.pipe(Schema.pick("pending_email", "code_expires_at", "login_id"))
const Locked = Schema.Struct({
  pending_email: Row.fields.pending_email,
  code_expires_at: Row.fields.code_expires_at,
  code_hash: Schema.NullOr(Schema.String)
})

const toSession = (r: Row): WebSession => ({
  id: r.id,
  userId: r.user_id,
  pendingEmail: r.pending_email,
  codeExpiresAt: r.code_expires_at,
  loginId: r.login_id
})

export class DeviceWeb extends Effect.Service<DeviceWeb>()("mailroom/DeviceWeb", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const mailer = yield* Mailer
    const accounts = yield* Accounts
    const hasher = yield* CodeHasher
    const lockout = yield* Lockout

    /** The session of a cookie the page issued, if it has a live row. */
    const find = (token: string) =>
      Effect.gen(function*() {
        if (!hasher.issuedCookie(token)) return Option.none<WebSession>()
        const now = yield* Clock.currentTimeMillis
        const row = yield* sql`
          SELECT id, user_id, pending_email, code_expires_at, login_id FROM device_web_sessions
          WHERE token_hash = ${sha256Hex(token)} AND expires_at > ${new Date(now)}`.pipe(firstRow(Row, "device web session"))
        return Option.map(row, toSession)
      }).pipe(Effect.orDie)

    /**
     * The row behind an issued cookie, created on the first form post only (a page view writes
     * nothing). An expired row is reset for the same cookie.
     */
    const ensure = (token: string) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const expires = new Date(now + WEB_SESSION_TTL_SECONDS * 1000)
        const live = sql`s.expires_at > ${new Date(now)}`
        const rows = yield* sql`
          INSERT INTO device_web_sessions AS s (id, token_hash, expires_at)
          VALUES (${randomUUID()}, ${sha256Hex(token)}, ${expires})
          ON CONFLICT (token_hash) DO UPDATE SET
            user_id = CASE WHEN ${live} THEN s.user_id END,
            pending_email = CASE WHEN ${live} THEN s.pending_email END,
            code_hash = CASE WHEN ${live} THEN s.code_hash END,
            code_expires_at = CASE WHEN ${live} THEN s.code_expires_at END,
            login_id = CASE WHEN ${live} THEN s.login_id END,
            expires_at = CASE WHEN ${live} THEN s.expires_at ELSE ${expires} END
          RETURNING id, user_id, pending_email, code_expires_at, login_id`.pipe(allRows(Row, "device web session upsert"))
        return toSession(rows[0]!)
      }).pipe(Effect.orDie)

    /**
     * Mails a sign-in code for one device login when the address has an account, a hint
     * otherwise; the page says the same either way. Any earlier sign-in of the session ends.
     */
    const sendCode = (sessionId: string, rawEmail: string, loginId: string, signupHint: string) =>
      Effect.gen(function*() {
        const email = normalizeEmail(rawEmail)
        const now = yield* Clock.currentTimeMillis
        const user = yield* accounts.findUser(email)
        const code = newNumericCode()
        yield* sql`UPDATE device_web_sessions SET pending_email = ${email}, login_id = ${loginId},
                     code_hash = ${Option.isSome(user) ? hasher.code("device", sessionId, code) : null},
                     code_expires_at = ${new Date(now + WEB_CODE_TTL_SECONDS * 1000)}, failed_attempts = 0, user_id = NULL
                   WHERE id = ${sessionId}`.pipe(Effect.orDie)
        const content = Option.isSome(user)
          ? Templates.deviceSignInCode(code, WEB_CODE_TTL_SECONDS / 60)
          : Templates.noAccount(signupHint)
        yield* mailer.send({ to: email, ...content }).pipe(Effect.orDie)
      })

    /**
     * Signs the session in when the code is right and was sent for this login; the session then
     * gets a new cookie (returned), the old one stops working. Wrong codes count per session and
     * per email (Lockout: 429 once the email is locked).
     */
    const verifyCode = (sessionId: string, code: string, loginId: string) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const rows = yield* sql`
          SELECT pending_email, code_expires_at, login_id FROM device_web_sessions WHERE id = ${sessionId}`.pipe(
          allRows(Pending, "device web code"),
          Effect.orDie
        )
        const s = rows[0]
        if (!s || s.pending_email === null || s.code_expires_at === null || s.login_id !== loginId) {
          return { _tag: "None" } as CodeCheck
        }
        if (s.code_expires_at.getTime() <= now) return { _tag: "Expired" } as CodeCheck
        const email = s.pending_email
        return yield* lockout.attempt(
          email,
          Effect.gen(function*(): Effect.fn.Return<CodeCheck, never, never> {
            const locked = yield* sql`
              SELECT code_hash, code_expires_at, pending_email FROM device_web_sessions WHERE id = ${sessionId} FOR UPDATE`
              .pipe(allRows(Locked, "device web code locked"), Effect.orDie)
            const row = locked[0]
            if (!row || row.pending_email !== email || row.code_expires_at === null || row.code_expires_at.getTime() <= now) {
              return { _tag: "Expired" }
            }
            if (row.code_hash === null || !constantTimeEqual(hasher.code("device", sessionId, code), row.code_hash)) {
              yield* sql`UPDATE device_web_sessions SET failed_attempts = failed_attempts + 1,
                           code_expires_at = CASE WHEN failed_attempts + 1 >= ${MAX_WRONG_CODES} THEN ${new Date(now)} ELSE code_expires_at END
                         WHERE id = ${sessionId}`.pipe(Effect.orDie)
              return { _tag: "Wrong" }
            }
            const user = yield* accounts.findUser(email)
            if (Option.isNone(user)) return { _tag: "Wrong" }
            const cookie = hasher.newCookie()
            yield* sql`UPDATE device_web_sessions SET user_id = ${user.value.id}, token_hash = ${sha256Hex(cookie)},
                         code_hash = NULL, code_expires_at = NULL, failed_attempts = 0
                       WHERE id = ${sessionId}`.pipe(Effect.orDie)
            return { _tag: "Ok", cookie }
          }),
          (o) => o._tag === "Wrong"
        )
      })

    /** A user code as the limiter's tables may hold it (keyed hash, shortened). */
    const userCodeKey = (userCode: string) => hasher.userCode(userCode).slice(0, 32)

    return { find, ensure, sendCode, verifyCode, userCodeKey, newCookie: hasher.newCookie, issuedCookie: hasher.issuedCookie } as const
  }),
  dependencies: [Accounts.Default, CodeHasher.Default, Lockout.Default]
}) {}
