/** SQL of the Account area. */
import { SqlClient } from "@effect/sql"
import { Effect, Exit, Option } from "effect"
import { makeBatcher } from "../platform/Batching.js"
import { type Entitlement, entitlementsOf, LIMITS, OPERATOR_ENTITLEMENTS, type Plan } from "../contract/Plans.js"
import type { Account, AccountUpdateResult, SendApproval, StorageStatistics } from "./Api.js"
import type { AttachmentPolicy } from "./AttachmentPolicy.js"

interface AccountRow {
  id: string
  plan: Plan
  owner_email: string | null
  managed_inbox_address: string | null
  created_at: Date
  onboarding_completed: boolean
  onboarding_step: string | null
  billing_subscription_status: string | null
  subscription_current_period_end: Date | null
  subscription_cancel_at_period_end: boolean | null
  spam_threshold: string | null
  discard_content_on_webhook_confirmed: boolean
  attachment_policy: AttachmentPolicy | null
  webhook_secret_rotated_at: Date | null
  send_approval: SendApproval
  /** Entitlements an operator granted to this organization (`npm run admin -- grant`). */
  granted?: ReadonlyArray<string> | null
}

export const toAccount = (row: AccountRow): Account => ({
  id: row.id,
  // The owner's address; for an emailless agent its managed inbox address.
  email: row.owner_email ?? row.managed_inbox_address ?? "",
  plan: row.plan,
  limits: LIMITS[row.plan],
  entitlements: entitlementsOf(
    row.plan,
    (row.granted ?? []).filter((e): e is Entitlement => (OPERATOR_ENTITLEMENTS as ReadonlyArray<string>).includes(e))
  ),
  managed_inbox_address: row.managed_inbox_address,
  created_at: row.created_at,
  onboarding_completed: row.onboarding_completed,
  onboarding_step: row.onboarding_step,
  billing_subscription_status: row.billing_subscription_status,
  subscription_current_period_end: row.subscription_current_period_end,
  subscription_cancel_at_period_end: row.subscription_cancel_at_period_end,
  spam_threshold: row.spam_threshold === null ? null : Number(row.spam_threshold),
  discard_content_on_webhook_confirmed: row.discard_content_on_webhook_confirmed,
  attachment_policy: row.attachment_policy ?? null,
  webhook_secret_rotated_at: row.webhook_secret_rotated_at,
  send_approval: row.send_approval
})

export class AccountRepo extends Effect.Service<AccountRepo>()("mailroom/AccountRepo", {
  scoped: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const select = sql`
        SELECT o.id, o.plan, o.managed_inbox_address, o.created_at, o.onboarding_completed, o.onboarding_step,
               o.billing_subscription_status, o.subscription_current_period_end,
               o.subscription_cancel_at_period_end, o.spam_threshold, o.discard_content_on_webhook_confirmed,
               o.webhook_secret_rotated_at, o.attachment_policy, o.send_approval,
               (SELECT array_agg(g.entitlement ORDER BY g.entitlement) FROM organization_entitlements g
                 WHERE g.org_id = o.id) AS granted,
               (SELECT u.email FROM memberships m JOIN users u ON u.id = m.user_id
                 WHERE m.org_id = o.id AND m.role = 'owner' ORDER BY m.created_at LIMIT 1) AS owner_email
        FROM organizations o`

    /** The account as it is now; usable inside a transaction (see `read` for plain reads). */
    const find = (orgId: string) =>
      sql<AccountRow>`${select} WHERE o.id = ${orgId}`.pipe(
        Effect.map((rows) => Option.map(Option.fromNullable(rows[0]), toAccount)),
        Effect.orDie
      )

    /**
     * `find` for `GET /account`, outside any transaction: reads that arrive while one is in flight
     * go together in the next statement (which starts after they arrived, so each sees every write
     * made before it), one round trip for many organizations under load and none added when idle.
     */
    const read = yield* makeBatcher<string, Option.Option<Account>, never>({
      workers: 2,
      maxBatch: 128,
      run: (ids) =>
        sql<AccountRow>`${select} WHERE o.id = ANY(${[...new Set(ids)]}::uuid[])`.pipe(
          Effect.map((rows) => {
            const byId = new Map(rows.map((row) => [row.id, row]))
            return ids.map((id) => Exit.succeed(Option.map(Option.fromNullable(byId.get(id)), toAccount)))
          }),
          Effect.orDie
        )
    })

    const update = (
      orgId: string,
      patch: {
        readonly spam_threshold?: number | null
        readonly discard_content_on_webhook_confirmed?: boolean
        readonly attachment_policy?: AttachmentPolicy | null
        readonly send_approval?: SendApproval
      }
    ) =>
      Effect.gen(function*() {
        const has = (k: keyof typeof patch) => Object.prototype.hasOwnProperty.call(patch, k)
        yield* sql`
          UPDATE organizations SET
            spam_threshold = CASE WHEN ${has("spam_threshold")} THEN ${patch.spam_threshold ?? null}::numeric
                                  ELSE spam_threshold END,
            discard_content_on_webhook_confirmed = coalesce(${patch.discard_content_on_webhook_confirmed ?? null}::boolean,
                                  discard_content_on_webhook_confirmed),
            attachment_policy = CASE WHEN ${has("attachment_policy")} THEN ${patch.attachment_policy == null ? null : JSON.stringify(patch.attachment_policy)}::jsonb
                                     ELSE attachment_policy END,
            send_approval = coalesce(${patch.send_approval ?? null}::text, send_approval),
            updated_at = now()
          WHERE id = ${orgId}`
        const account = yield* find(orgId)
        return Option.map(account, (a): AccountUpdateResult => ({
          id: a.id,
          email: a.email,
          plan: a.plan,
          spam_threshold: a.spam_threshold,
          discard_content_on_webhook_confirmed: a.discard_content_on_webhook_confirmed,
          ...(has("attachment_policy") ? { attachment_policy: a.attachment_policy } : {}),
          ...(has("send_approval") ? { send_approval: a.send_approval } : {})
        }))
      }).pipe(Effect.orDie)

    /**
     * Usage as kept by `storage_usage` (migrations/0025): every stored kind adds its bytes there in
     * the transaction that stores it, and ingestion refuses what would pass the plan's quota.
     */
    const storage = (orgId: string) =>
      Effect.gen(function*() {
        const rows = yield* sql<{ plan: Plan; bytes: string; n: string }>`
          SELECT o.plan, coalesce(s.used_bytes, 0)::bigint AS bytes, coalesce(s.emails_count, 0)::bigint AS n
          FROM organizations o LEFT JOIN storage_usage s ON s.org_id = o.id WHERE o.id = ${orgId}`
        const row = rows[0]
        if (row === undefined) return Option.none<StorageStatistics>()
        return Option.some(storageStatistics(Number(row.bytes), Number(row.n), LIMITS[row.plan].storage_mb))
      }).pipe(Effect.orDie)

    return { find, read, update, storage } as const
  })
}) {}

const round = (value: number, decimals: number) => {
  const f = 10 ** decimals
  return Math.round(value * f) / f
}

/** Storage statistics: KB with one decimal, MB with two, percentage with one. */
export const storageStatistics = (usedBytes: number, emailsCount: number, quotaMb: number): StorageStatistics => ({
  used_bytes: usedBytes,
  used_kb: round(usedBytes / 1024, 1),
  used_mb: round(usedBytes / (1024 * 1024), 2),
  quota_mb: quotaMb,
  percentage: quotaMb > 0 ? round((usedBytes / (quotaMb * 1024 * 1024)) * 100, 1) : 0,
  emails_count: emailsCount
})
