/** SQL of the Filters area. Rows are decoded, so a renamed or retyped column fails loudly. */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"
import { Conflict } from "../contract/Errors.js"
import type { Position } from "../contract/Paging.js"
import { catchUnique } from "../platform/SqlErrors.js"
import { type Filter, FilterType } from "./Api.js"
import { pageWithTotal } from "../platform/Listing.js"
import { decodeRows, firstRow, JsonColumn, pageRows, TextArray, Timestamp } from "../platform/Rows.js"

const FilterRow = Schema.Struct({
  id: Schema.String,
  org_id: Schema.String,
  type: FilterType,
  pattern: Schema.String,
  /** `jsonb`: the sorted signal names of a quarantine filter. */
  signals: JsonColumn(Schema.NullOr(TextArray)),
  domain_id: Schema.NullOr(Schema.String),
  enabled: Schema.Boolean,
  created_at: Timestamp,
  updated_at: Timestamp
})
export type FilterRow = typeof FilterRow.Type

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
        sql`INSERT INTO filters (org_id, type, pattern, domain_id, signals)
          VALUES (${f.orgId}, ${f.type}, ${f.pattern}, ${f.domainId},
                  ${f.signals === undefined ? null : JSON.stringify([...new Set(f.signals)].sort())}::jsonb) RETURNING *`,
        () => new Conflict({ message: `a ${f.type} filter for ${f.pattern || "any sender"} already exists in this scope` })
      ).pipe(Effect.flatMap((rows) => Effect.map(decodeRows(FilterRow, "filter insert")(rows), (r) => r[0]!)))

    const list = (orgId: string, limit: number, after: Position | undefined) =>
      pageWithTotal<{ readonly id: string }>(sql, "filters", sql`org_id = ${orgId}`, limit, after).pipe(
        pageRows(FilterRow, "filter page"),
        Effect.orDie
      )

    const setEnabled = (orgId: string, id: string, enabled: boolean) =>
      sql`UPDATE filters SET enabled = ${enabled}, updated_at = now()
          WHERE id = ${id} AND org_id = ${orgId} RETURNING *`.pipe(
        firstRow(FilterRow, "filter enable"),
        Effect.orDie
      )

    const remove = (orgId: string, id: string) =>
      sql`DELETE FROM filters WHERE id = ${id} AND org_id = ${orgId} RETURNING *`.pipe(
        firstRow(FilterRow, "filter delete"),
        Effect.orDie
      )

    return { insert, list, setEnabled, remove } as const
  })
}) {}
