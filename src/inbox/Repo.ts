/** SQL of the Inbox area: what the readiness report reads, one organization at a time. */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import type { DomainRow } from "../domains/Repo.js"
import type { EndpointRow } from "../endpoints/Repo.js"

/** Domains beyond this many (newest first) are not reported: every one costs an MX lookup. */
export const MAX_REPORTED_DOMAINS = 100

export interface LastDeliveryRow {
  readonly id: string
  readonly endpoint_id: string
  readonly status: "pending" | "delivered" | "header_confirmed" | "failed"
  readonly attempt_count: number
  readonly last_error_code: string | null
  readonly updated_at: Date
}

export class InboxRepo extends Effect.Service<InboxRepo>()("mailroom/InboxRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const managedAddress = (orgId: string) =>
      sql<{ a: string | null }>`SELECT managed_inbox_address AS a FROM organizations WHERE id = ${orgId}`.pipe(
        Effect.map((rows) => rows[0]?.a ?? null),
        Effect.orDie
      )

    const domains = (orgId: string) =>
      sql<DomainRow>`SELECT * FROM domains WHERE org_id = ${orgId}
          ORDER BY created_at DESC, id DESC LIMIT ${MAX_REPORTED_DOMAINS}`.pipe(Effect.orDie)

    /** Active (not deleted) endpoints, enabled or not. */
    const endpoints = (orgId: string) =>
      sql<EndpointRow>`SELECT * FROM endpoints WHERE org_id = ${orgId} AND deactivated_at IS NULL
          ORDER BY created_at, id`.pipe(Effect.orDie)

    /** Routes per domain (NULL: the managed inbox) whose endpoint is active and enabled. */
    const routeCounts = (orgId: string) =>
      sql<{ domain_id: string | null; n: number }>`
        SELECT r.domain_id, count(*)::int AS n FROM routes r JOIN endpoints e ON e.id = r.endpoint_id
        WHERE r.org_id = ${orgId} AND e.deactivated_at IS NULL AND e.enabled
        GROUP BY r.domain_id`.pipe(Effect.orDie)

    /** The newest delivery of mail received for the domain (NULL: the managed inbox). */
    const lastDelivery = (orgId: string, domainId: string | null) =>
      sql<LastDeliveryRow>`
        SELECT d.id, d.endpoint_id, d.status, d.attempt_count, d.last_error_code, d.updated_at
        FROM deliveries d JOIN emails m ON m.id = d.email_id
        WHERE d.org_id = ${orgId} AND m.domain_id IS NOT DISTINCT FROM ${domainId}::uuid
        ORDER BY d.created_at DESC, d.id DESC LIMIT 1`.pipe(Effect.map((rows) => rows[0] ?? null), Effect.orDie)

    const lastReceived = (orgId: string, domainId: string | null) =>
      sql<{ at: Date }>`
        SELECT received_at AS at FROM emails
        WHERE org_id = ${orgId} AND domain_id IS NOT DISTINCT FROM ${domainId}::uuid
        ORDER BY received_at DESC LIMIT 1`.pipe(Effect.map((rows) => rows[0]?.at ?? null), Effect.orDie)

    return { managedAddress, domains, endpoints, routeCounts, lastDelivery, lastReceived } as const
  })
}) {}
