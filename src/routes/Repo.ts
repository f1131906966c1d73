/** SQL of the Routes area. */
import { SqlClient } from "@effect/sql"
import { Effect, Option } from "effect"
import { Conflict } from "../contract/Errors.js"
import type { Position } from "../contract/Paging.js"
import { catchUnique } from "../platform/SqlErrors.js"
import type { Route } from "./Api.js"
import { pageWithTotal } from "../platform/Listing.js"

export interface RouteRow {
  readonly id: string
  readonly org_id: string
  readonly pattern: string
  readonly domain_id: string | null
  readonly endpoint_id: string
  /** Set by the database (migrations/0150) from the pattern: the managed-domain inbox it is on. */
  readonly inbox_id: string | null
  readonly created_at: Date
  readonly updated_at: Date
}

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
        sql<RouteRow>`INSERT INTO routes (org_id, pattern, domain_id, endpoint_id)
          VALUES (${r.orgId}, ${r.pattern}, ${r.domainId}, ${r.endpointId}) RETURNING *`,
        duplicate(r.pattern)
      ).pipe(Effect.map((rows) => rows[0]!))

    const find = (orgId: string, id: string) =>
      sql<RouteRow>`SELECT * FROM routes WHERE id = ${id} AND org_id = ${orgId}`.pipe(
        Effect.map((rows) => Option.fromNullable(rows[0])),
        Effect.orDie
      )

    const list = (orgId: string, limit: number, after: Position | undefined) =>
      pageWithTotal<RouteRow>(sql, "routes", sql`org_id = ${orgId}`, limit, after).pipe(Effect.orDie)

    const update = (id: string, r: { pattern: string; domainId: string | null; endpointId: string }) =>
      catchUnique(
        sql<RouteRow>`UPDATE routes SET pattern = ${r.pattern}, domain_id = ${r.domainId}, endpoint_id = ${r.endpointId},
            updated_at = now() WHERE id = ${id} RETURNING *`,
        duplicate(r.pattern)
      ).pipe(Effect.map((rows) => rows[0]!))

    const remove = (orgId: string, id: string) =>
      sql<RouteRow>`DELETE FROM routes WHERE id = ${id} AND org_id = ${orgId} RETURNING *`.pipe(
        Effect.map((rows) => Option.fromNullable(rows[0])),
        Effect.orDie
      )

    return { insert, find, list, update, remove } as const
  })
}) {}
