/** SQL of the Account area. */
import { SqlClient } from "@effect/sql"
import { Effect, Option } from "effect"
import { ENTITLEMENTS, LIMITS, type Plan } from "../contract/Plans.js"
import type { Account } from "./Api.js"

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
  webhook_secret_rotated_at: Date | null
}

export const toAccount = (row: AccountRow): Account => ({
  id: row.id,
  // CONTRACT.md: the owner's address; for an emailless agent its managed inbox address.
  email: row.owner_email ?? row.managed_inbox_address ?? "",
  plan: row.plan,
  limits: LIMITS[row.plan],
  entitlements: [...ENTITLEMENTS[row.plan]].sort(),
  managed_inbox_address: row.managed_inbox_address,
  created_at: row.created_at,
  onboarding_completed: row.onboarding_completed,
  onboarding_step: row.onboarding_step,
  billing_subscription_status: row.billing_subscription_status,
  subscription_current_period_end: row.subscription_current_period_end,
  subscription_cancel_at_period_end: row.subscription_cancel_at_period_end,
  spam_threshold: row.spam_threshold === null ? null : Number(row.spam_threshold),
  discard_content_on_webhook_confirmed: row.discard_content_on_webhook_confirmed,
  webhook_secret_rotated_at: row.webhook_secret_rotated_at
})

export class AccountRepo extends Effect.Service<AccountRepo>()("mailroom/AccountRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const find = (orgId: string) =>
      sql<AccountRow>`
        SELECT o.id, o.plan, o.managed_inbox_address, o.created_at, o.onboarding_completed, o.onboarding_step,
               o.billing_subscription_status, o.subscription_current_period_end,
               o.subscription_cancel_at_period_end, o.spam_threshold, o.discard_content_on_webhook_confirmed,
               o.webhook_secret_rotated_at,
               (SELECT u.email FROM memberships m JOIN users u ON u.id = m.user_id
                 WHERE m.org_id = o.id AND m.role = 'owner' ORDER BY m.created_at LIMIT 1) AS owner_email
        FROM organizations o WHERE o.id = ${orgId}`.pipe(
        Effect.map((rows) => Option.map(Option.fromNullable(rows[0]), toAccount)),
        Effect.orDie
      )

    return { find } as const
  })
}) {}
