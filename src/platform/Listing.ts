/**
 * A keyset page of an organization's resources (newest first by created_at, id) and the count of
 * everything the filter matches, in ONE statement: one round trip and one snapshot per list
 * request instead of two. `pageInMemory` is the same page over rows a module holds itself (the demo's
 * fixed dataset): the same order, the same cursor rule, the same `{ rows, total }`, so either feeds
 * `pageOf` and a list reads the same whichever holds its rows.
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

/** Newest first by (created_at, id), as the statement above orders (lowercase uuid text sorts as the uuid). */
const newestFirst = (a: { readonly created_at: Date; readonly id: string }, b: { readonly created_at: Date; readonly id: string }) =>
  b.created_at.getTime() - a.created_at.getTime() || (a.id < b.id ? 1 : a.id > b.id ? -1 : 0)

/** `pageWithTotal` over rows already filtered: `limit + 1` rows after `after`, and the count of all. */
export const pageInMemory = <Row extends { readonly created_at: Date; readonly id: string }>(
  rows: ReadonlyArray<Row>,
  limit: number,
  after: Position | undefined
): { rows: ReadonlyArray<Row>; total: number } => {
  const sorted = [...rows].sort(newestFirst)
  const rest = after === undefined ? sorted : sorted.filter((r) => newestFirst(r, { created_at: after.createdAt, id: after.id }) > 0)
  return { rows: rest.slice(0, limit + 1), total: rows.length }
}
