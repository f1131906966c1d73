/**
 * A keyset page of an organization's resources (newest first by created_at, id) and the count of
 * everything the filter matches, in ONE statement: one round trip and one snapshot per list
 * request instead of two.
 */
import { type SqlClient, type Statement } from "@effect/sql"
import { Effect } from "effect"
import type { Position } from "../contract/Paging.js"

export const pageWithTotal = <Row extends { readonly id: string }>(
  sql: SqlClient.SqlClient,
  table: string,
  where: Statement.Fragment,
  limit: number,
  after: Position | undefined
) =>
  Effect.map(
    sql<Row & { readonly page_total: number }>`
      SELECT t.page_total, p.* FROM (SELECT count(*)::int AS page_total FROM ${sql(table)} WHERE ${where}) t
      LEFT JOIN (
        SELECT * FROM ${sql(table)} WHERE ${where}
          ${after === undefined ? sql`` : sql`AND (created_at, id) < (${after.createdAt}, ${after.id}::uuid)`}
        ORDER BY created_at DESC, id DESC LIMIT ${limit + 1}
      ) p ON true
      ORDER BY p.created_at DESC, p.id DESC`,
    // An empty page is the total's row alone, its page columns null.
    (rows): { rows: ReadonlyArray<Row>; total: number } => ({
      rows: rows.filter((r) => r.id !== null),
      total: rows[0]?.page_total ?? 0
    })
  )
