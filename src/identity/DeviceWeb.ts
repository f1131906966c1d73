/**
 * Browser sessions of the `/device` page: a cookie (stored hashed) that first holds an emailed
 * sign-in code, then the signed-in person. Short-lived; 5 wrong codes drop the pending sign-in.
 */
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Option } from "effect"
import { randomUUID } from "node:crypto"
import { Mailer } from "../mail/Mailer.js"
import { Templates } from "../mail/Templates.js"
import { constantTimeEqual, sha256Hex } from "../platform/Secrets.js"
import { Accounts, normalizeEmail } from "./Accounts.js"
import { codeHash, MAX_WRONG_CODES, newNumericCode } from "./Codes.js"

export const WEB_SESSION_TTL_SECONDS = 30 * 60
export const WEB_CODE_TTL_SECONDS = 10 * 60
export const COOKIE_NAME = "mr_device"

export interface WebSession {
  readonly id: string
  readonly userId: string | null
  readonly pendingEmail: string | null
  readonly codeExpiresAt: Date | null
}

export type CodeCheck = "ok" | "wrong" | "expired" | "none"

export class DeviceWeb extends Effect.Service<DeviceWeb>()("mailroom/DeviceWeb", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const mailer = yield* Mailer
    const accounts = yield* Accounts

    /** The session of a cookie, if it has a live row. */
    const find = (token: string) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const rows = yield* sql<{ id: string; user_id: string | null; pending_email: string | null; code_expires_at: Date | null }>`
          SELECT id, user_id, pending_email, code_expires_at FROM device_web_sessions
          WHERE token_hash = ${sha256Hex(token)} AND expires_at > ${new Date(now)}`
        return Option.map(Option.fromNullable(rows[0]), (r): WebSession => ({
          id: r.id,
          userId: r.user_id,
          pendingEmail: r.pending_email,
          codeExpiresAt: r.code_expires_at
        }))
      }).pipe(Effect.orDie)

    /**
     * The row behind a cookie, created on the first form post only: the GET of the page is exempt
     * from rate limiting, so it must not write. An expired row is reset for the same cookie.
     */
    const ensure = (token: string) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const expires = new Date(now + WEB_SESSION_TTL_SECONDS * 1000)
        const rows = yield* sql<{ id: string; user_id: string | null; pending_email: string | null; code_expires_at: Date | null }>`
          INSERT INTO device_web_sessions AS s (id, token_hash, expires_at)
          VALUES (${randomUUID()}, ${sha256Hex(token)}, ${expires})
          ON CONFLICT (token_hash) DO UPDATE SET
            user_id = CASE WHEN s.expires_at > ${new Date(now)} THEN s.user_id END,
            pending_email = CASE WHEN s.expires_at > ${new Date(now)} THEN s.pending_email END,
            code_hash = CASE WHEN s.expires_at > ${new Date(now)} THEN s.code_hash END,
            code_expires_at = CASE WHEN s.expires_at > ${new Date(now)} THEN s.code_expires_at END,
            expires_at = CASE WHEN s.expires_at > ${new Date(now)} THEN s.expires_at ELSE ${expires} END
          RETURNING id, user_id, pending_email, code_expires_at`
        const r = rows[0]!
        return { id: r.id, userId: r.user_id, pendingEmail: r.pending_email, codeExpiresAt: r.code_expires_at } satisfies WebSession
      }).pipe(Effect.orDie)

    /** Mails a sign-in code when the address has an account, a hint otherwise; the page says the same either way. */
    const sendCode = (sessionId: string, rawEmail: string, signupHint: string) =>
      Effect.gen(function*() {
        const email = normalizeEmail(rawEmail)
        const now = yield* Clock.currentTimeMillis
        const user = yield* accounts.findUser(email)
        const code = newNumericCode()
        yield* sql`UPDATE device_web_sessions SET pending_email = ${email},
                     code_hash = ${Option.isSome(user) ? codeHash("device", sessionId, code) : null},
                     code_expires_at = ${new Date(now + WEB_CODE_TTL_SECONDS * 1000)}, failed_attempts = 0, user_id = NULL
                   WHERE id = ${sessionId}`.pipe(Effect.orDie)
        const content = Option.isSome(user)
          ? Templates.deviceSignInCode(code, WEB_CODE_TTL_SECONDS / 60)
          : Templates.noAccount(signupHint)
        yield* mailer.send({ to: email, ...content }).pipe(Effect.orDie)
      })

    const verifyCode = (sessionId: string, code: string) =>
      Effect.gen(function*(): Effect.fn.Return<CodeCheck, never, never> {
        const now = yield* Clock.currentTimeMillis
        const rows = yield* sql<{ pending_email: string | null; code_hash: string | null; code_expires_at: Date | null }>`
          SELECT pending_email, code_hash, code_expires_at FROM device_web_sessions WHERE id = ${sessionId}`.pipe(Effect.orDie)
        const s = rows[0]
        if (!s || s.pending_email === null || s.code_expires_at === null) return "none"
        if (s.code_expires_at.getTime() <= now) return "expired"
        if (s.code_hash === null || !constantTimeEqual(codeHash("device", sessionId, code), s.code_hash)) {
          yield* sql`UPDATE device_web_sessions SET failed_attempts = failed_attempts + 1,
                       code_expires_at = CASE WHEN failed_attempts + 1 >= ${MAX_WRONG_CODES} THEN ${new Date(now)} ELSE code_expires_at END
                     WHERE id = ${sessionId}`.pipe(Effect.orDie)
          return "wrong"
        }
        const user = yield* accounts.findUser(s.pending_email)
        if (Option.isNone(user)) return "wrong"
        yield* sql`UPDATE device_web_sessions SET user_id = ${user.value.id}, code_hash = NULL, code_expires_at = NULL,
                     failed_attempts = 0 WHERE id = ${sessionId}`.pipe(Effect.orDie)
        return "ok"
      })

    return { find, ensure, sendCode, verifyCode } as const
  }),
  dependencies: [Accounts.Default]
}) {}
