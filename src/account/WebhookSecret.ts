/**
 * The account-wide webhook signing secret (SPEC.md "Webhook secret"): created on first read,
 * rotated at most once per 60 minutes. It must be readable to sign deliveries and to show it, so it
 * is stored as is (not hashed), like any HMAC key the service itself has to use.
 */
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Option } from "effect"
import { randomBytes } from "node:crypto"
import { RateLimitExceeded } from "../contract/Errors.js"
import { type Decision, setLimitHeaders } from "../platform/RateLimiter.js"

export const ROTATION_INTERVAL_SECONDS = 3600

/** 32 random bytes written in base64: looks base64, but is used as the UTF-8 string it is. */
export const newWebhookSecret = () => `whsec_${randomBytes(32).toString("base64")}`

export class WebhookSecrets extends Effect.Service<WebhookSecrets>()("mailroom/WebhookSecrets", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    /** The organization's secret, created atomically if it has none (None: no such organization). */
    const get = (orgId: string) =>
      Effect.gen(function*() {
        // Read first: every delivery attempt signs with it, and a read costs no commit.
        const existing = yield* sql<{ webhook_secret: string | null }>`
          SELECT webhook_secret FROM organizations WHERE id = ${orgId}`
        if (existing[0] === undefined) return Option.none<string>()
        if (existing[0].webhook_secret !== null) return Option.some(existing[0].webhook_secret)
        const rows = yield* sql<{ webhook_secret: string }>`
          UPDATE organizations SET webhook_secret = coalesce(webhook_secret, ${newWebhookSecret()})
          WHERE id = ${orgId} RETURNING webhook_secret`
        return Option.fromNullable(rows[0]?.webhook_secret)
      }).pipe(Effect.orDie)

    /**
     * Replaces the secret unless it was rotated less than 60 minutes ago: then 429
     * `rate_limit_exceeded` with `Retry-After` until the hour is over.
     */
    const rotate = (orgId: string) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const cut = new Date(now - ROTATION_INTERVAL_SECONDS * 1000)
        const rows = yield* sql<{ webhook_secret: string }>`
          UPDATE organizations SET webhook_secret = ${newWebhookSecret()}, webhook_secret_rotated_at = ${new Date(now)},
            updated_at = ${new Date(now)}
          WHERE id = ${orgId} AND (webhook_secret_rotated_at IS NULL OR webhook_secret_rotated_at <= ${cut})
          RETURNING webhook_secret`.pipe(Effect.orDie)
        if (rows[0] !== undefined) return Option.some(rows[0].webhook_secret)
        const last = yield* sql<{ rotated: Date | null }>`
          SELECT webhook_secret_rotated_at AS rotated FROM organizations WHERE id = ${orgId}`.pipe(Effect.orDie)
        if (last[0] === undefined) return Option.none<string>()
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

    return { get, rotate } as const
  })
}) {}
