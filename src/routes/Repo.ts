/** SQL of the Routes area. */
import { SqlClient } from "@effect/sql"
import { Effect, Option } from "effect"
import { Conflict } from "../contract/Errors.js"
import type { Position } from "../contract/Paging.js"
import { catchUnique } from "../platform/SqlErrors.js"
import type { Route } from "./Api.js"

export interface RouteRow {
  readonly id: string
  readonly org_id: string
  readonly pattern: string
  readonly domain_id: string | null
  readonly endpoint_id: string
  readonly created_at: Date
  readonly updated_at: Date
}

export const toRoute = (r: RouteRow): Route => ({
  id: r.id,
  pattern: r.pattern,
  domain_id: r.domain_id,
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
      Effect.all([
        after === undefined
          ? sql<RouteRow>`SELECT * FROM routes WHERE org_id = ${orgId}
              ORDER BY created_at DESC, id DESC LIMIT ${limit + 1}`
          : sql<RouteRow>`SELECT * FROM routes WHERE org_id = ${orgId}
              AND (created_at, id) < (${after.createdAt}, ${after.id}::uuid)
              ORDER BY created_at DESC, id DESC LIMIT ${limit + 1}`,
        sql<{ n: number }>`SELECT count(*)::int AS n FROM routes WHERE org_id = ${orgId}`
      ]).pipe(Effect.map(([rows, count]) => ({ rows, total: count[0]!.n })), Effect.orDie)

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

    /** Routes of one recipient domain (null: the managed inbox) whose endpoint is active and enabled. */
    const candidates = (orgId: string, domainId: string | null) =>
      sql<RouteRow>`SELECT r.* FROM routes r JOIN endpoints e ON e.id = r.endpoint_id
          WHERE r.org_id = ${orgId} AND r.domain_id IS NOT DISTINCT FROM ${domainId}::uuid
            AND e.deactivated_at IS NULL AND e.enabled
          ORDER BY r.created_at, r.id`.pipe(Effect.orDie)

    return { insert, find, list, update, remove, candidates } as const
  })
}) {}
