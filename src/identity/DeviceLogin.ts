/**
 * CLI device login (RFC 8628): the CLI starts a session and polls; a person approves or denies it
 * on the `/device` page. The grant is created at the first poll after approval, so its tokens are
 * returned exactly once and never stored.
 */
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Option, Schema } from "effect"
import { AccessDenied, AuthorizationPending, ExpiredToken, InvalidGrant, SlowDown } from "../contract/Errors.js"
import { AppConfig } from "../platform/Config.js"
import { allRows, Enum, NullableTimestamp, Timestamp } from "../platform/Rows.js"
import { randomToken, sha256Hex } from "../platform/Secrets.js"
import type { TokenSet } from "./Api.js"
import { CodeHasher } from "./CodeHasher.js"
import { newUserCode, normalizeUserCode } from "./Codes.js"
import { CLIENT_IDS, Grants } from "./Grants.js"

export const LOGIN_TTL_SECONDS = 900
export const POLL_INTERVAL_SECONDS = 5
/** RFC 8628 §3.5: each slow_down adds 5 s to the interval. */
export const SLOW_DOWN_STEP_SECONDS = 5
export const DEVICE_CODE_PREFIX = "mr_dc_"

export interface PendingLogin {
  readonly id: string
  readonly userCode: string
  readonly deviceName: string | null
  readonly expiresAt: Date
}

type PollOutcome =
  | { readonly _tag: "Token"; readonly set: TokenSet }
  | { readonly _tag: "Fail"; readonly error: AuthorizationPending | SlowDown | ExpiredToken | InvalidGrant | AccessDenied }

/** A device login as the poll reads it. */
const LoginRow = Schema.Struct({
  id: Schema.String,
  status: Enum("pending", "approved", "denied", "consumed"),
  interval_seconds: Schema.Number,
  last_polled_at: NullableTimestamp,
  expires_at: Timestamp,
  user_id: Schema.NullOr(Schema.String),
  org_id: Schema.NullOr(Schema.String),
  device_name: Schema.NullOr(Schema.String)
})
const PendingRow = LoginRow.pipe(Schema.pick("id", "device_name", "expires_at"))

export class DeviceLogin extends Effect.Service<DeviceLogin>()("mailroom/DeviceLogin", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const config = yield* AppConfig
    const grants = yield* Grants
    const hasher = yield* CodeHasher

    const start = (input: { readonly device_name?: string; readonly metadata?: { readonly [k: string]: unknown } }) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const deviceCode = `${DEVICE_CODE_PREFIX}${randomToken(40)}`
        // A pending user code is unique; a collision (1 in 25 billion) just draws again.
        const insert = (userCode: string) =>
          sql`INSERT INTO device_logins (device_code_hash, user_code_hash, device_name, metadata, interval_seconds, expires_at)
              VALUES (${sha256Hex(deviceCode)}, ${hasher.userCode(userCode)}, ${input.device_name ?? null},
                      ${input.metadata === undefined ? null : JSON.stringify(input.metadata)}::jsonb,
                      ${POLL_INTERVAL_SECONDS}, ${new Date(now + LOGIN_TTL_SECONDS * 1000)})`.pipe(Effect.as(userCode))
        const userCode = yield* Effect.suspend(() => insert(newUserCode())).pipe(
          Effect.retry({ times: 3 }),
          Effect.orDie
        )
        const uri = `${config.publicBaseUrl}/device`
        return {
          device_code: deviceCode,
          user_code: userCode,
          verification_uri: uri,
          verification_uri_complete: `${uri}?user_code=${userCode}`,
          expires_in: LOGIN_TTL_SECONDS,
          interval: POLL_INTERVAL_SECONDS
        }
      }).pipe(Effect.withSpan("DeviceLogin.start"))

    const decide = (deviceCode: string) =>
      sql.withTransaction(Effect.gen(function*(): Effect.fn.Return<PollOutcome, never, never> {
        const now = yield* Clock.currentTimeMillis
        const rows = yield* sql`SELECT id, status, interval_seconds, last_polled_at, expires_at, user_id, org_id, device_name
           FROM device_logins WHERE device_code_hash = ${sha256Hex(deviceCode)} FOR UPDATE`.pipe(
          allRows(LoginRow, "device login poll"),
          Effect.orDie
        )
        const row = rows[0]
        const fail = (error: PollOutcome & { _tag: "Fail" }) => error
        if (!row || row.status === "consumed") {
          return fail({ _tag: "Fail", error: new InvalidGrant({ message: "unknown or already used device_code" }) })
        }
        if (row.status === "denied") {
          return fail({ _tag: "Fail", error: new AccessDenied({ message: "the login was denied in the browser" }) })
        }
        if (row.expires_at.getTime() <= now) {
          return fail({ _tag: "Fail", error: new ExpiredToken({ message: "the login expired; start a new one" }) })
        }
        if (row.last_polled_at !== null && now - row.last_polled_at.getTime() < row.interval_seconds * 1000) {
          const interval = row.interval_seconds + SLOW_DOWN_STEP_SECONDS
          yield* sql`UPDATE device_logins SET interval_seconds = ${interval}, last_polled_at = ${new Date(now)}
                     WHERE id = ${row.id}`.pipe(Effect.orDie)
          return fail({
            _tag: "Fail",
            error: new SlowDown({
              message: `polled faster than the interval; wait at least ${interval} s between polls`,
              details: { interval }
            })
          })
        }
        if (row.status === "pending") {
          yield* sql`UPDATE device_logins SET last_polled_at = ${new Date(now)} WHERE id = ${row.id}`.pipe(Effect.orDie)
          return fail({
            _tag: "Fail",
            error: new AuthorizationPending({
              message: "waiting for approval in the browser",
              details: { interval: row.interval_seconds }
            })
          })
        }
        const set = yield* grants.issue({
          orgId: row.org_id!,
          userId: row.user_id!,
          clientId: CLIENT_IDS.cli,
          deviceName: row.device_name
        })
        yield* sql`UPDATE device_logins SET status = 'consumed', grant_id = ${set.oauth_grant_id},
                     last_polled_at = ${new Date(now)} WHERE id = ${row.id}`.pipe(Effect.orDie)
        return { _tag: "Token", set } as const
      })).pipe(Effect.orDie)

    /** The outcome is committed first (last poll time, raised interval), then reported. */
    const poll = (deviceCode: string) =>
      Effect.flatMap(decide(deviceCode), (o) => o._tag === "Token" ? Effect.succeed(o.set) : Effect.fail(o.error))
        .pipe(Effect.withSpan("DeviceLogin.poll"))

    /** A login still waiting for a decision, by the code the person typed. */
    const pending = (rawUserCode: string) =>
      Effect.gen(function*() {
        const userCode = normalizeUserCode(rawUserCode)
        if (userCode === "") return Option.none<PendingLogin>()
        const now = yield* Clock.currentTimeMillis
        const rows = yield* sql`
          SELECT id, device_name, expires_at FROM device_logins
          WHERE user_code_hash = ${hasher.userCode(userCode)} AND status = 'pending' AND expires_at > ${new Date(now)}`.pipe(
          allRows(PendingRow, "pending device login")
        )
        return Option.map(Option.fromNullable(rows[0]), (r): PendingLogin => ({
          id: r.id,
          userCode,
          deviceName: r.device_name,
          expiresAt: r.expires_at
        }))
      }).pipe(Effect.orDie)

    const approve = (loginId: string, userId: string, orgId: string) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const rows = yield* sql`
          UPDATE device_logins SET status = 'approved', user_id = ${userId}, org_id = ${orgId}, decided_at = ${new Date(now)}
          WHERE id = ${loginId} AND status = 'pending' AND expires_at > ${new Date(now)}
            AND EXISTS (SELECT 1 FROM memberships WHERE user_id = ${userId} AND org_id = ${orgId})
          RETURNING id`
        return rows.length > 0
      }).pipe(Effect.orDie)

    const deny = (loginId: string) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const rows = yield* sql`
          UPDATE device_logins SET status = 'denied', decided_at = ${new Date(now)}
          WHERE id = ${loginId} AND status = 'pending' RETURNING id`
        return rows.length > 0
      }).pipe(Effect.orDie)

    return { start, poll, pending, approve, deny } as const
  }),
  dependencies: [Grants.Default, CodeHasher.Default]
}) {}
