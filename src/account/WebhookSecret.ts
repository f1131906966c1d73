/**
 * The account-wide webhook signing secret: created on first read,
 * rotated at most once per 60 minutes. After a rotation the replaced secret keeps signing, next to
 * the new one, for ROTATION_GRACE_SECONDS, so receivers can switch without dropping deliveries.
 *
 * The service must be able to use the secret (it signs with it), so it cannot be hashed; it is kept
 * sealed with AES-256-GCM under a key derived from the service key (platform/ServiceKey.ts), bound
 * to its organization. Values stored in clear by earlier versions are sealed at start-up, and read
 * correctly until then.
 */
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Option } from "effect"
import { randomBytes } from "node:crypto"
import { RateLimitExceeded } from "../contract/Errors.js"
import { type Decision, setLimitHeaders } from "../platform/RateLimiter.js"
import { isSealed, open, seal } from "../platform/Sealed.js"
import { ServiceKey } from "../platform/ServiceKey.js"

export const ROTATION_INTERVAL_SECONDS = 3600
/** How long a rotated-out secret keeps signing deliveries next to the new one. */
export const ROTATION_GRACE_SECONDS = 24 * 3600
export const SEAL_PURPOSE = "mailroom/webhook-secret/v1"

/** 32 random bytes written in base64: looks base64, but is used as the UTF-8 string it is. */
export const newWebhookSecret = () => `whsec_${randomBytes(32).toString("base64")}`

/** The organization's columns as stored (sealed, or clear when written by an earlier version). */
export interface StoredSecrets {
  readonly current: string | null
  readonly previous: string | null
  readonly previousExpiresAt: Date | null
}

/** What the account shows: the secret, and until when the replaced one still signs (null: none). */
export interface SecretStatus {
  readonly secret: string
  readonly previous_expires_at: Date | null
}

/** Every secret the organization has, for diagnosing a signature. */
export interface KnownSecrets {
  readonly current: string
  readonly previous: Option.Option<{ readonly secret: string; readonly expiresAt: Date }>
}

interface SecretRow {
  readonly webhook_secret: string | null
  readonly webhook_secret_previous: string | null
  readonly webhook_secret_previous_expires_at: Date | null
}

const toStored = (row: SecretRow): StoredSecrets => ({
  current: row.webhook_secret,
  previous: row.webhook_secret_previous,
  previousExpiresAt: row.webhook_secret_previous_expires_at
})

const SEAL_BATCH = 500

export class WebhookSecrets extends Effect.Service<WebhookSecrets>()("mailroom/WebhookSecrets", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const key = yield* Effect.flatMap(ServiceKey, (k) => k.derive(SEAL_PURPOSE))
    const aad = (orgId: string) => `organizations.webhook_secret:${orgId}`

    const sealFor = (orgId: string, secret: string) => seal(key, secret, aad(orgId))

    /** The usable secret of a stored value: opened when sealed, as is when stored before sealing. */
    const reveal = (orgId: string, stored: string): Effect.Effect<string> => {
      if (!isSealed(stored)) return Effect.succeed(stored)
      const secret = open(key, stored, aad(orgId))
      return secret !== undefined ? Effect.succeed(secret) : Effect.dieMessage(
        `the webhook secret of organization ${orgId} does not decrypt: the service key ` +
          "(MAILROOM_SECRET_KEY, or DATA_DIR/secret.key) is not the one it was sealed with"
      )
    }

    /**
     * Seals every value still stored in clear, by keyset pages; each write only replaces the exact
     * value read, so a rotation racing with it wins and nothing is sealed twice.
     */
    const sealClearValues = Effect.gen(function*() {
      let after = "00000000-0000-0000-0000-000000000000"
      for (;;) {
        const rows = yield* sql<{ id: string } & SecretRow>`
          SELECT id, webhook_secret, webhook_secret_previous, webhook_secret_previous_expires_at FROM organizations
          WHERE id > ${after}
            AND ((webhook_secret IS NOT NULL AND webhook_secret NOT LIKE 'v1:%')
              OR (webhook_secret_previous IS NOT NULL AND webhook_secret_previous NOT LIKE 'v1:%'))
          ORDER BY id LIMIT ${SEAL_BATCH}`
        if (rows.length === 0) return
        const updates = rows.map((r) => {
          const sealIfClear = (v: string | null) => (v === null || isSealed(v) ? v : sealFor(r.id, v))
          return {
            id: r.id,
            cur: r.webhook_secret,
            prev: r.webhook_secret_previous,
            cur_sealed: sealIfClear(r.webhook_secret),
            prev_sealed: sealIfClear(r.webhook_secret_previous)
          }
        })
        yield* sql`
          UPDATE organizations o
          SET webhook_secret = v.cur_sealed, webhook_secret_previous = v.prev_sealed
          FROM jsonb_to_recordset(${JSON.stringify(updates)}::jsonb)
            AS v(id uuid, cur text, prev text, cur_sealed text, prev_sealed text)
          WHERE o.id = v.id AND o.webhook_secret IS NOT DISTINCT FROM v.cur
            AND o.webhook_secret_previous IS NOT DISTINCT FROM v.prev`
        after = rows[rows.length - 1]!.id
      }
    })
    yield* sealClearValues.pipe(Effect.orDie)

    const read = (orgId: string) =>
      sql<SecretRow>`
        SELECT webhook_secret, webhook_secret_previous, webhook_secret_previous_expires_at
        FROM organizations WHERE id = ${orgId}`.pipe(Effect.map((rows) => Option.map(Option.fromNullable(rows[0]), toStored)))

    /** The current secret, created atomically when the organization has none. */
    const currentOf = (orgId: string, stored: StoredSecrets) =>
      Effect.gen(function*() {
        if (stored.current !== null) return yield* reveal(orgId, stored.current)
        const rows = yield* sql<{ webhook_secret: string }>`
          UPDATE organizations SET webhook_secret = coalesce(webhook_secret, ${sealFor(orgId, newWebhookSecret())})
          WHERE id = ${orgId} RETURNING webhook_secret`.pipe(Effect.orDie)
        // Gone in between: the organization was deleted; nothing signs for it any more.
        if (rows[0] === undefined) return yield* Effect.dieMessage(`organization ${orgId} no longer exists`)
        return yield* reveal(orgId, rows[0].webhook_secret)
      })

    /** The replaced secret while it still signs, as of `now`. */
    const previousInGrace = (orgId: string, stored: StoredSecrets, now: number) =>
      stored.previous !== null && stored.previousExpiresAt !== null && stored.previousExpiresAt.getTime() > now
        ? Effect.map(reveal(orgId, stored.previous), Option.some)
        : Effect.succeed(Option.none<string>())

    /** The organization's secret, created atomically if it has none (None: no such organization). */
    const get = (orgId: string) =>
      Effect.gen(function*() {
        const stored = yield* read(orgId)
        if (Option.isNone(stored)) return Option.none<string>()
        return Option.some(yield* currentOf(orgId, stored.value))
      }).pipe(Effect.orDie)

    /** The secret with the end of the replaced one's grace period (null when none signs any more). */
    const status = (orgId: string) =>
      Effect.gen(function*() {
        const stored = yield* read(orgId)
        if (Option.isNone(stored)) return Option.none<SecretStatus>()
        const now = yield* Clock.currentTimeMillis
        const secret = yield* currentOf(orgId, stored.value)
        const expires = stored.value.previous !== null && stored.value.previousExpiresAt !== null &&
            stored.value.previousExpiresAt.getTime() > now
          ? stored.value.previousExpiresAt
          : null
        return Option.some<SecretStatus>({ secret, previous_expires_at: expires })
      }).pipe(Effect.orDie)

    /**
     * The secrets a delivery is signed with, current first, from the columns the caller already
     * read (the delivery claim reads them with the row), or read now when it has none.
     */
    const signingFrom = (orgId: string, stored: StoredSecrets | null) =>
      Effect.gen(function*() {
        const row = stored !== null && stored.current !== null ? Option.some(stored) : yield* read(orgId)
        if (Option.isNone(row)) return Option.none<ReadonlyArray<string>>()
        const now = yield* Clock.currentTimeMillis
        const current = yield* currentOf(orgId, row.value)
        const previous = yield* previousInGrace(orgId, row.value, now)
        return Option.some<ReadonlyArray<string>>(Option.isSome(previous) ? [current, previous.value] : [current])
      }).pipe(Effect.orDie)

    /** The secrets a delivery of this organization is signed with now. */
    const signing = (orgId: string) => signingFrom(orgId, null)

    /** The current and the last replaced secret (even past its grace), for diagnosing signatures. */
    const known = (orgId: string) =>
      Effect.gen(function*() {
        const stored = yield* read(orgId)
        if (Option.isNone(stored)) return Option.none<KnownSecrets>()
        const current = yield* currentOf(orgId, stored.value)
        const { previous, previousExpiresAt } = stored.value
        if (previous === null || previousExpiresAt === null) return Option.some<KnownSecrets>({ current, previous: Option.none() })
        const secret = yield* reveal(orgId, previous)
        return Option.some<KnownSecrets>({
          current,
          previous: Option.some({ secret, expiresAt: previousExpiresAt })
        })
      }).pipe(Effect.orDie)

    /**
     * Replaces the secret unless it was rotated less than 60 minutes ago: then 429
     * `rate_limit_exceeded` with `Retry-After` until the hour is over. The replaced secret keeps
     * signing for ROTATION_GRACE_SECONDS (a secret replaced earlier is dropped).
     */
    const rotate = (orgId: string) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const cut = new Date(now - ROTATION_INTERVAL_SECONDS * 1000)
        const graceEnd = new Date(now + ROTATION_GRACE_SECONDS * 1000)
        const secret = newWebhookSecret()
        const rows = yield* sql<{ previous_expires_at: Date | null }>`
          UPDATE organizations SET webhook_secret = ${sealFor(orgId, secret)},
            webhook_secret_previous = webhook_secret,
            webhook_secret_previous_expires_at = CASE WHEN webhook_secret IS NULL THEN NULL ELSE ${graceEnd}::timestamptz END,
            webhook_secret_rotated_at = ${new Date(now)}, updated_at = ${new Date(now)}
          WHERE id = ${orgId} AND (webhook_secret_rotated_at IS NULL OR webhook_secret_rotated_at <= ${cut})
          RETURNING webhook_secret_previous_expires_at AS previous_expires_at`.pipe(Effect.orDie)
        if (rows[0] !== undefined) return Option.some<SecretStatus>({ secret, previous_expires_at: rows[0].previous_expires_at })
        const last = yield* sql<{ rotated: Date | null }>`
          SELECT webhook_secret_rotated_at AS rotated FROM organizations WHERE id = ${orgId}`.pipe(Effect.orDie)
        if (last[0] === undefined) return Option.none<SecretStatus>()
        const nextMs = (last[0].rotated?.getTime() ?? now) + ROTATION_INTERVAL_SECONDS * 1000
        const decision: Decision = {
          allowed: false,
          limit: 1,
          remaining: 0,
          reset: Math.ceil(nextMs / 1000),
          retryAfter: Math.max(1, Math.ceil((nextMs - now) / 1000)),
          windowSeconds: ROTATION_INTERVAL_SECONDS
        }
        yield* setLimitHeaders(decision, true)
        return yield* new RateLimitExceeded({
          message: `the webhook secret can be rotated once per 60 minutes; retry in ${decision.retryAfter} s`,
          details: { limit: 1, window_seconds: ROTATION_INTERVAL_SECONDS, retry_after: decision.retryAfter }
        })
      })

    return { get, status, signing, signingFrom, known, rotate } as const
  }),
  dependencies: [ServiceKey.Default]
}) {}
