/** SQL of the Routes area. Rows are decoded, so a renamed or retyped column fails loudly. */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"
import { Conflict } from "../contract/Errors.js"
import type { Position } from "../contract/Paging.js"
import { catchUnique } from "../platform/SqlErrors.js"
import type { Route } from "./Api.js"
import { pageWithTotal } from "../platform/Listing.js"
import { decodeRows, firstRow, pageRows, Timestamp } from "../platform/Rows.js"

const RouteRow = Schema.Struct({
  id: Schema.String,
  org_id: Schema.String,
  pattern: Schema.String,
  domain_id: Schema.NullOr(Schema.String),
  endpoint_id: Schema.String,
  /** Set by the database (migrations/0150) from the pattern: the managed-domain inbox it is on. */
  inbox_id: Schema.NullOr(Schema.String),
  created_at: Timestamp,
  updated_at: Timestamp
})
export type RouteRow = typeof RouteRow.Type

/** The row a statement that always returns one gave. */
const one = (what: string) => (rows: ReadonlyArray<unknown>) => Effect.map(decodeRows(RouteRow, what)(rows), (r) => r[0]!)

export const toRoute = (r: RouteRow): Route => ({
  id: r.id,
  pattern: r.pattern,
  domain_id: r.domain_id,
  inbox_id: r.inbox_id,
  endpoint_id: r.endpoint_id,
  created_at: r.created_at,
  updated_at: r.updated_at
})

const duplicate = (pattern: string) => () => new Conflict({ message: `a route for ${pattern} already exists` })

export class RoutesRepo extends Effect.Service<RoutesRepo>()("mailroom/RoutesRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const insert = (r: { orgId: string; pattern: string; domainId: string | null; endpointId: string }) =>
      catchUnique(
        sql`INSERT INTO routes (org_id, pattern, domain_id, endpoint_id)
          VALUES (${r.orgId}, ${r.pattern}, ${r.domainId}, ${r.endpointId}) RETURNING *`,
        duplicate(r.pattern)
      ).pipe(Effect.flatMap(one("route insert")))

    const find = (orgId: string, id: string) =>
      sql`SELECT * FROM routes WHERE id = ${id} AND org_id = ${orgId}`.pipe(firstRow(RouteRow, "route find"), Effect.orDie)

    const list = (orgId: string, limit: number, after: Position | undefined) =>
      pageWithTotal<{ readonly id: string }>(sql, "routes", sql`org_id = ${orgId}`, limit, after).pipe(
        pageRows(RouteRow, "route page"),
        Effect.orDie
      )

    const update = (id: string, r: { pattern: string; domainId: string | null; endpointId: string }) =>
      catchUnique(
        sql`UPDATE routes SET pattern = ${r.pattern}, domain_id = ${r.domainId}, endpoint_id = ${r.endpointId},
            updated_at = now() WHERE id = ${id} RETURNING *`,
        duplicate(r.pattern)
      ).pipe(Effect.flatMap(one("route update")))

    const remove = (orgId: string, id: string) =>
      sql`DELETE FROM routes WHERE id = ${id} AND org_id = ${orgId} RETURNING *`.pipe(firstRow(RouteRow, "route delete"), Effect.orDie)

    return { insert, find, list, update, remove } as const
  })
}) {}
