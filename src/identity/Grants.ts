/**
 * OAuth grants: one access token (short-lived) and one rotating refresh token per grant, both
 * stored only as hashes. A refresh token that was already rotated out and is presented again
 * revokes its grant (refresh-token reuse detection, RFC 9700 §4.14).
 */
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Clock, Effect, Option, Schema } from "effect"
import { InvalidGrant } from "../contract/Errors.js"
import { Credentials } from "../platform/Credentials.js"
import { allRows } from "../platform/Rows.js"
import { displayPrefix, newAccessToken, newRefreshToken, sha256Hex } from "../platform/Secrets.js"
import type { TokenSet } from "./Api.js"

export const ACCESS_TOKEN_TTL_SECONDS = 3600
export const REFRESH_TOKEN_TTL_SECONDS = 30 * 24 * 3600

export const CLIENT_IDS = { cli: "mailroom-cli", agent: "mailroom-agent" } as const

export interface GrantInput {
  readonly orgId: string
  readonly userId: string
  readonly clientId: string
  readonly deviceName: string | null
}

const GrantRow = Schema.Struct({ id: Schema.String, org_id: Schema.String, client_id: Schema.String })

/** Rows of "organization name". */
const OrganizationNameRow = Schema.Struct({ name: Schema.NullOr(Schema.String) })

/** Rows of "grant insert". */
const GrantInsertRow = Schema.Struct({ id: Schema.String })

/** Rows of "reused grant revoke". */
const ReusedGrantRevokeRow = Schema.Struct({ grant_id: Schema.String })

export class Grants extends Effect.Service<Grants>()("mailroom/Grants", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    // The request pipeline keeps resolved credentials for a few seconds: a grant this process
    // revokes or rotates is dropped from it at once (other processes hear of it by NOTIFY).
    const credentials = yield* Effect.serviceOption(Credentials)
    const forget = (grantIds: ReadonlyArray<string>) =>
      Option.isSome(credentials) ? Effect.forEach(grantIds, credentials.value.forgetGrant, { discard: true }) : Effect.void

    const orgName = (orgId: string) =>
      sql`SELECT name FROM organizations WHERE id = ${orgId}`.pipe(
        allRows(OrganizationNameRow, "organization name"),
        Effect.map((r) => r[0]?.name ?? null)
      )

    const tokenSet = (grantId: string, clientId: string, orgId: string, access: string, refresh: string) =>
      Effect.map(orgName(orgId), (name): TokenSet => ({
        api_key: access,
        key_id: grantId,
        key_prefix: displayPrefix(access),
        access_token: access,
        refresh_token: refresh,
        token_type: "Bearer",
        expires_in: ACCESS_TOKEN_TTL_SECONDS,
        auth_method: "oauth",
        oauth_grant_id: grantId,
        oauth_client_id: clientId,
        org_id: orgId,
        org_name: name
      }))

    /** A new grant; its tokens exist only in the returned set. */
    const issue = (input: GrantInput) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const access = newAccessToken()
        const refresh = newRefreshToken()
        const rows = yield* sql`
          INSERT INTO oauth_grants (org_id, user_id, client_id, device_name, access_token_hash, access_expires_at,
                                    refresh_token_hash, refresh_expires_at)
          VALUES (${input.orgId}, ${input.userId}, ${input.clientId}, ${input.deviceName}, ${sha256Hex(access)},
                  ${new Date(now + ACCESS_TOKEN_TTL_SECONDS * 1000)}, ${sha256Hex(refresh)},
                  ${new Date(now + REFRESH_TOKEN_TTL_SECONDS * 1000)})
          RETURNING id`.pipe(allRows(GrantInsertRow, "grant insert"))
        return yield* tokenSet(rows[0]!.id, input.clientId, input.orgId, access, refresh)
      }).pipe(Effect.orDie, Effect.withSpan("Grants.issue"))

    /** Rotates inside a transaction; a failure is returned, not raised, so a reuse revocation commits. */
    const rotate = (refreshToken: string, touched: Array<string>) =>
      sql.withTransaction(Effect.gen(function*(): Effect.fn.Return<TokenSet | InvalidGrant, SqlError> {
        const now = yield* Clock.currentTimeMillis
        const hash = sha256Hex(refreshToken)
        const rows = yield* sql`
          SELECT g.id, g.org_id, g.client_id FROM oauth_grants g
          JOIN memberships m ON m.org_id = g.org_id AND m.user_id = g.user_id
          WHERE g.refresh_token_hash = ${hash} AND g.revoked_at IS NULL
            AND (g.refresh_expires_at IS NULL OR g.refresh_expires_at > ${new Date(now)})
          FOR UPDATE OF g`.pipe(allRows(GrantRow, "grant to rotate"))
        const grant = rows[0]
        if (!grant) {
          const reused = yield* sql`
            UPDATE oauth_grants SET revoked_at = coalesce(revoked_at, ${new Date(now)}), updated_at = ${new Date(now)}
            WHERE id = (SELECT grant_id FROM oauth_rotated_refresh_tokens WHERE token_hash = ${hash})
            RETURNING id AS grant_id`.pipe(allRows(ReusedGrantRevokeRow, "reused grant revoke"))
          touched.push(...reused.map((r) => r.grant_id))
          return new InvalidGrant({
            message: reused.length > 0
              ? "refresh token already used: the grant is revoked as a precaution; sign in again"
              : "unknown, expired or revoked refresh token"
          })
        }
        touched.push(grant.id)
        const access = newAccessToken()
        const next = newRefreshToken()
        yield* sql`INSERT INTO oauth_rotated_refresh_tokens (token_hash, grant_id, rotated_at)
                   VALUES (${hash}, ${grant.id}, ${new Date(now)})`
        yield* sql`
          UPDATE oauth_grants SET access_token_hash = ${sha256Hex(access)},
            access_expires_at = ${new Date(now + ACCESS_TOKEN_TTL_SECONDS * 1000)},
            refresh_token_hash = ${sha256Hex(next)},
            refresh_expires_at = ${new Date(now + REFRESH_TOKEN_TTL_SECONDS * 1000)},
            updated_at = ${new Date(now)}
          WHERE id = ${grant.id}`
        return yield* tokenSet(grant.id, grant.client_id, grant.org_id, access, next)
      }))

    const refresh = (refreshToken: string) =>
      Effect.suspend(() => {
        const touched: Array<string> = []
        return rotate(refreshToken, touched).pipe(Effect.ensuring(Effect.suspend(() => forget(touched))))
      }).pipe(
        Effect.orDie,
        Effect.flatMap((r) => r instanceof InvalidGrant ? Effect.fail(r) : Effect.succeed(r)),
        Effect.withSpan("Grants.refresh")
      )

    const revoke = (grantId: string) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        yield* sql`UPDATE oauth_grants SET revoked_at = coalesce(revoked_at, ${new Date(now)}), updated_at = ${new Date(now)}
                   WHERE id = ${grantId}`
        yield* forget([grantId])
      }).pipe(Effect.orDie)

    /** Whether `id` names an API key or OAuth grant of the organization (revoked or not). */
    const credentialExists = (orgId: string, id: string) =>
      sql`SELECT id FROM api_keys WHERE id = ${id} AND org_id = ${orgId}
          UNION ALL SELECT id FROM oauth_grants WHERE id = ${id} AND org_id = ${orgId}`.pipe(
        Effect.map((rows) => rows.length > 0),
        Effect.orDie
      )

    return { issue, refresh, revoke, credentialExists } as const
  })
}) {}
