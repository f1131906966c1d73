/** SQL of the Filters area. */
import { SqlClient } from "@effect/sql"
import { Effect, Option } from "effect"
import { Conflict } from "../contract/Errors.js"
import type { Position } from "../contract/Paging.js"
import { catchUnique } from "../platform/SqlErrors.js"
import type { Filter, FilterType } from "./Api.js"
import { pageWithTotal } from "../platform/Listing.js"

export interface FilterRow {
  readonly id: string
  readonly org_id: string
  readonly type: FilterType
  readonly pattern: string
  readonly signals: ReadonlyArray<string> | null
  readonly domain_id: string | null
  readonly enabled: boolean
  readonly created_at: Date
  readonly updated_at: Date
}

export const toFilter = (r: FilterRow): Filter => ({
  id: r.id,
  type: r.type,
  pattern: r.type === "quarantine" && r.pattern === "" ? null : r.pattern,
  ...(r.type === "quarantine" ? { signals: (r.signals ?? []) as Filter["signals"] & {} } : {}),
  domain_id: r.domain_id,
  enabled: r.enabled,
  created_at: r.created_at,
  updated_at: r.updated_at
})

export class FiltersRepo extends Effect.Service<FiltersRepo>()("mailroom/FiltersRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const insert = (f: { orgId: string; type: string; pattern: string; domainId: string | null; signals?: ReadonlyArray<string> }) =>
      catchUnique(
        sql<FilterRow>`INSERT INTO filters (org_id, type, pattern, domain_id, signals)
          VALUES (${f.orgId}, ${f.type}, ${f.pattern}, ${f.domainId},
                  ${f.signals === undefined ? null : JSON.stringify([...new Set(f.signals)].sort())}::jsonb) RETURNING *`,
        () => new Conflict({ message: `a ${f.type} filter for ${f.pattern || "any sender"} already exists in this scope` })
      ).pipe(Effect.map((rows) => rows[0]!))

    const list = (orgId: string, limit: number, after: Position | undefined) =>
      pageWithTotal<FilterRow>(sql, "filters", sql`org_id = ${orgId}`, limit, after).pipe(Effect.orDie)

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

    return { insert, list, setEnabled, remove } as const
  })
}) {}
