/** SQL of the Filters area. */
import { SqlClient } from "@effect/sql"
import { Effect, Option } from "effect"
import { Conflict } from "../contract/Errors.js"
import type { Position } from "../contract/Paging.js"
import { catchUnique } from "../platform/SqlErrors.js"
import type { Filter } from "./Api.js"

export interface FilterRow {
  readonly id: string
  readonly org_id: string
  readonly type: "whitelist" | "blocklist"
  readonly pattern: string
  readonly domain_id: string | null
  readonly enabled: boolean
  readonly created_at: Date
  readonly updated_at: Date
}

export const toFilter = (r: FilterRow): Filter => ({
  id: r.id,
  type: r.type,
  pattern: r.pattern,
  domain_id: r.domain_id,
  enabled: r.enabled,
  created_at: r.created_at,
  updated_at: r.updated_at
})

export class FiltersRepo extends Effect.Service<FiltersRepo>()("mailroom/FiltersRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const insert = (f: { orgId: string; type: string; pattern: string; domainId: string | null }) =>
      catchUnique(
        sql<FilterRow>`INSERT INTO filters (org_id, type, pattern, domain_id)
          VALUES (${f.orgId}, ${f.type}, ${f.pattern}, ${f.domainId}) RETURNING *`,
        () => new Conflict({ message: `a ${f.type} filter for ${f.pattern} already exists in this scope` })
      ).pipe(Effect.map((rows) => rows[0]!))

    const list = (orgId: string, limit: number, after: Position | undefined) =>
      Effect.all([
        after === undefined
          ? sql<FilterRow>`SELECT * FROM filters WHERE org_id = ${orgId}
              ORDER BY created_at DESC, id DESC LIMIT ${limit + 1}`
          : sql<FilterRow>`SELECT * FROM filters WHERE org_id = ${orgId}
              AND (created_at, id) < (${after.createdAt}, ${after.id}::uuid)
              ORDER BY created_at DESC, id DESC LIMIT ${limit + 1}`,
        sql<{ n: number }>`SELECT count(*)::int AS n FROM filters WHERE org_id = ${orgId}`
      ]).pipe(Effect.map(([rows, count]) => ({ rows, total: count[0]!.n })), Effect.orDie)

    const setEnabled = (orgId: string, id: string, enabled: boolean) =>
      sql<FilterRow>`UPDATE filters SET enabled = ${enabled}, updated_at = now()
          WHERE id = ${id} AND org_id = ${orgId} RETURNING *`.pipe(
        Effect.map((rows) => Option.fromNullable(rows[0])),
        Effect.orDie
      )

    const remove = (orgId: string, id: string) =>
      sql<FilterRow>`DELETE FROM filters WHERE id = ${id} AND org_id = ${orgId} RETURNING *`.pipe(
        Effect.map((rows) => Option.fromNullable(rows[0])),
        Effect.orDie
      )

    /**
     * Enabled filters that apply to mail for a domain (organization-wide ones plus the domain's own),
     * for the inbound pipeline.
     */
    const applicable = (orgId: string, domainId: string | null) =>
      sql<FilterRow>`SELECT * FROM filters WHERE org_id = ${orgId} AND enabled
          AND (domain_id IS NULL OR domain_id = ${domainId}::uuid) ORDER BY created_at`.pipe(Effect.orDie)

    return { insert, list, setEnabled, remove, applicable } as const
  })
}) {}
