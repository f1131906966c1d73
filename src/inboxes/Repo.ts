/** SQL of Inboxes. */
import { SqlClient } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import type { Position } from "../contract/Paging.js"
import { inboxCondition, type OrgScope, orgOf } from "../platform/InboxLimit.js"
import { pageWithTotal } from "../platform/Listing.js"
import { Plan } from "../contract/Plans.js"
import { allRows, firstRow, pageRows, Timestamp } from "../platform/Rows.js"
import type { Inbox } from "./Api.js"

export const InboxRow = Schema.Struct({
  id: Schema.String,
  org_id: Schema.String,
  address: Schema.String,
  display_name: Schema.NullOr(Schema.String),
  is_default: Schema.Boolean,
  created_at: Timestamp,
  updated_at: Timestamp
})
export type InboxRow = typeof InboxRow.Type

const PlanRow = Schema.Struct({ plan: Plan })

export const toInbox = (r: InboxRow): Inbox => ({
  id: r.id,
  address: r.address,
  username: r.address.slice(0, r.address.lastIndexOf("@")),
  display_name: r.display_name,
  is_default: r.is_default,
  created_at: r.created_at,
  updated_at: r.updated_at
})

/** What uses an inbox: routes on its address, and the functions those routes deliver to. */
export interface InboxUsers {
  readonly routes: ReadonlyArray<string>
  readonly functions: ReadonlyArray<string>
}

export class InboxesRepo extends Effect.Service<InboxesRepo>()("mailroom/InboxesRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    // A key limited to inboxes sees only those (the inbox's own id is its `inbox_id`).
    const visible = (scope: OrgScope) => sql.and([sql`org_id = ${orgOf(scope)}`, inboxCondition(sql, scope, "id")])

    const list = (scope: OrgScope, limit: number, after: Position | undefined) =>
      pageWithTotal<{ readonly id: string }>(sql, "inboxes", visible(scope), limit, after).pipe(pageRows(InboxRow, "inbox page"))

    const find = (scope: OrgScope, id: string) =>
      sql`SELECT * FROM inboxes WHERE id = ${id} AND ${visible(scope)}`.pipe(firstRow(InboxRow, "inbox by id"))

    /**
     * The plan and inbox count of an organization, its row locked so concurrent creates count one
     * after another. Two statements: a statement that waited for the lock still counts with the
     * snapshot it started with; the next one sees what the lock holder committed.
     */
    const lockCount = (orgId: string) =>
      Effect.gen(function*() {
        const plan = yield* sql`SELECT plan FROM organizations WHERE id = ${orgId} FOR UPDATE`.pipe(allRows(PlanRow, "plan (locked)"))
        const count = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM inboxes WHERE org_id = ${orgId}`
        return { plan: plan[0]?.plan ?? ("agent" as const), n: count[0]?.n ?? 0 }
      })

    const insert = (orgId: string, address: string, displayName: string | null) =>
      sql`INSERT INTO inboxes (org_id, address, display_name) VALUES (${orgId}, ${address}, ${displayName})
          ON CONFLICT (address) DO NOTHING RETURNING *`.pipe(firstRow(InboxRow, "inbox insert"))

    const update = (orgId: string, id: string, set: { readonly address: string; readonly displayName: string | null }) =>
      sql`UPDATE inboxes SET address = ${set.address}, display_name = ${set.displayName},
            updated_at = date_trunc('milliseconds', now())
          WHERE id = ${id} AND org_id = ${orgId} RETURNING *`.pipe(firstRow(InboxRow, "inbox update"))

    const users = (orgId: string, id: string) =>
      Effect.map(
        sql<{ route_id: string; function_id: string | null }>`
          SELECT r.id AS route_id, e.function_id FROM routes r LEFT JOIN endpoints e ON e.id = r.endpoint_id
           WHERE r.org_id = ${orgId} AND r.inbox_id = ${id} ORDER BY r.created_at, r.id`,
        (rows): InboxUsers => ({
          routes: rows.map((r) => r.route_id),
          functions: [...new Set(rows.flatMap((r) => r.function_id === null ? [] : [r.function_id]))]
        })
      )

    const remove = (orgId: string, id: string) =>
      sql`DELETE FROM inboxes WHERE id = ${id} AND org_id = ${orgId} AND NOT is_default RETURNING *`.pipe(
        firstRow(InboxRow, "inbox delete")
      )

    return { list, find, lockCount, insert, update, users, remove } as const
  })
}) {}
