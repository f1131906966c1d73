/**
 * The `payments` capability is granted to one organization by an operator (`npm run admin -- grant
 * <org_id> payments`), never by a plan. Without it every payments operation is 403
 * `feature_disabled` with `details {missing_entitlement, message, docs_url}`.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { FeatureDisabled } from "../contract/Errors.js"

export const PAYMENTS_ENTITLEMENT = "payments"

const MESSAGE = "payments are not enabled for this organization; an operator grants the payments entitlement on request"

export const requirePayments = (orgId: string, publicBaseUrl: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const rows = yield* sql<{ ok: number }>`
      SELECT 1 AS ok FROM organization_entitlements WHERE org_id = ${orgId} AND entitlement = ${PAYMENTS_ENTITLEMENT}`.pipe(
      Effect.orDie
    )
    if (rows.length > 0) return
    return yield* new FeatureDisabled({
      message: MESSAGE,
      details: {
        missing_entitlement: PAYMENTS_ENTITLEMENT,
        message: MESSAGE,
        docs_url: `${publicBaseUrl}/docs#tag/payments`
      }
    })
  })
