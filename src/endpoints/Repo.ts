/** SQL of the Endpoints area. A deactivated endpoint (DELETE) stays as a tombstone for deliveries. */
import { SqlClient } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import { Conflict } from "../contract/Errors.js"
import type { Position } from "../contract/Paging.js"
import { catchUnique } from "../platform/SqlErrors.js"
import type { Endpoint, Rules } from "./Api.js"
import { pageWithTotal } from "../platform/Listing.js"
import { decodeFirst, decodeRows, Enum, Json, JsonColumn, NullableTimestamp, Timestamp } from "../platform/Rows.js"

/**
 * `rules` is written only from a decoded `Rules` body (insert and update), so the stored JSON is
 * taken as that type; the other columns are checked.
 */
const EndpointRow = Schema.Struct({
  id: Schema.String,
  org_id: Schema.String,
  kind: Enum("http", "function"),
  url: Schema.NullOr(Schema.String),
  function_id: Schema.NullOr(Schema.String),
  enabled: Schema.Boolean,
  domain_id: Schema.NullOr(Schema.String),
  rules: JsonColumn(Json as Schema.Schema<Rules, unknown>),
  is_route_target: Schema.Boolean,
  deactivated_at: NullableTimestamp,
  created_at: Timestamp,
  updated_at: Timestamp
})
export type EndpointRow = typeof EndpointRow.Type

const first = (what: string) => decodeFirst(EndpointRow, what)
const single = (what: string) => (rows: ReadonlyArray<unknown>) =>
  Effect.flatMap(decodeFirst(EndpointRow, what)(rows), (row) => Effect.orDie(row))

export const toEndpoint = (r: EndpointRow): Endpoint => ({
  id: r.id,
  kind: r.kind,
  url: r.url,
  function_id: r.function_id,
  enabled: r.enabled,
  domain_id: r.domain_id,
  rules: r.rules,
  is_route_target: r.is_route_target,
  created_at: r.created_at,
  updated_at: r.updated_at
})

const slotConflict = (constraint: string) =>
  new Conflict({
    message: constraint === "endpoints_function"
      ? "this function already has an endpoint"
      : "another active default-destination endpoint already occupies this slot (one per domain, one organization fallback); " +
        "disable or delete it first, or create this one with is_route_target: true",
    details: { constraint: constraint === "endpoints_function" ? "function" : "slot" }
  })

export class EndpointsRepo extends Effect.Service<EndpointsRepo>()("mailroom/EndpointsRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const insert = (e: {
      orgId: string
      kind: "http" | "function"
      url: string | null
      functionId: string | null
      enabled: boolean
      domainId: string | null
      rules: Rules
      isRouteTarget: boolean
    }) =>
      catchUnique(
        sql`
          INSERT INTO endpoints (org_id, kind, url, function_id, enabled, domain_id, rules, is_route_target)
          VALUES (${e.orgId}, ${e.kind}, ${e.url}, ${e.functionId}, ${e.enabled}, ${e.domainId},
                  ${JSON.stringify(e.rules)}::jsonb, ${e.isRouteTarget})
          RETURNING *`,
        slotConflict
      ).pipe(Effect.flatMap(single("endpoint insert")))

    /** An active (not deactivated) endpoint of the organization. */
    const find = (orgId: string, id: string) =>
      sql`SELECT * FROM endpoints WHERE id = ${id} AND org_id = ${orgId} AND deactivated_at IS NULL`.pipe(
        Effect.orDie,
        Effect.flatMap(first("endpoint find"))
      )

    /** Any endpoint of the organization, deactivated ones included (deliveries, replays). */
    const findAny = (orgId: string, id: string) =>
      sql`SELECT * FROM endpoints WHERE id = ${id} AND org_id = ${orgId}`.pipe(
        Effect.orDie,
        Effect.flatMap(first("endpoint find"))
      )

    const findByFunction = (orgId: string, functionId: string) =>
      sql`SELECT * FROM endpoints WHERE org_id = ${orgId} AND function_id = ${functionId}
          AND deactivated_at IS NULL`.pipe(Effect.orDie, Effect.flatMap(first("endpoint of function")))

    /** Whether the organization has this function (a function endpoint must name one of its own). */
    const functionExists = (orgId: string, functionId: string) =>
      sql<{ id: string }>`SELECT id FROM functions WHERE id = ${functionId} AND org_id = ${orgId}`.pipe(
        Effect.map((rows) => rows.length > 0),
        Effect.orDie
      )

    const list = (orgId: string, limit: number, after: Position | undefined) =>
      pageWithTotal<{ readonly id: string }>(sql, "endpoints", sql`org_id = ${orgId} AND deactivated_at IS NULL`, limit, after).pipe(
        Effect.orDie,
        Effect.flatMap(({ rows, total }) =>
          Effect.map(decodeRows(EndpointRow, "endpoint list")(rows), (decoded) => ({ rows: decoded, total })))
      )

    /** The active, enabled default-destination endpoint of a slot (domain id, or null for the fallback). */
    const slotHolder = (orgId: string, domainId: string | null, exceptId: string | null) =>
      sql`SELECT * FROM endpoints WHERE org_id = ${orgId} AND deactivated_at IS NULL AND enabled
          AND NOT is_route_target AND domain_id IS NOT DISTINCT FROM ${domainId}::uuid
          AND id IS DISTINCT FROM ${exceptId}::uuid`.pipe(Effect.orDie, Effect.flatMap(first("endpoint slot holder")))

    /** Active, enabled organization-wide default webhooks (http endpoints without a domain, not route targets). */
    const countGlobalWebhooks = (orgId: string, exceptId: string | null) =>
      sql<{ n: number }>`SELECT count(*)::int AS n FROM endpoints WHERE org_id = ${orgId} AND deactivated_at IS NULL
          AND enabled AND kind = 'http' AND domain_id IS NULL AND NOT is_route_target
          AND id IS DISTINCT FROM ${exceptId}::uuid`.pipe(
        Effect.map((rows) => rows[0]!.n),
        Effect.orDie
      )

    const update = (id: string, patch: {
      readonly url?: string
      readonly enabled?: boolean
      readonly domain_id?: string | null
      readonly rules?: Rules
    }) =>
      catchUnique(
        sql`
          UPDATE endpoints SET
            url = coalesce(${patch.url ?? null}, url),
            enabled = coalesce(${patch.enabled ?? null}::boolean, enabled),
            domain_id = CASE WHEN ${patch.domain_id !== undefined} THEN ${patch.domain_id ?? null}::uuid ELSE domain_id END,
            rules = coalesce(${patch.rules === undefined ? null : JSON.stringify(patch.rules)}::jsonb, rules),
            updated_at = now()
          WHERE id = ${id} RETURNING *`,
        slotConflict
      ).pipe(Effect.flatMap(single("endpoint update")))

    /** Deactivates the endpoint and removes the routes bound to it. */
    const deactivate = (orgId: string, id: string) =>
      sql.withTransaction(Effect.gen(function*() {
        const rows = yield* sql`UPDATE endpoints SET deactivated_at = now(), updated_at = now()
            WHERE id = ${id} AND org_id = ${orgId} AND deactivated_at IS NULL RETURNING *`
        if (rows[0] !== undefined) yield* sql`DELETE FROM routes WHERE endpoint_id = ${id}`
        return rows
      })).pipe(Effect.orDie, Effect.flatMap(first("endpoint deactivate")))

    /** The organization's managed inbox address, the recipient a test or synthetic event names. */
    const managedInboxOf = (orgId: string) =>
      sql<{ a: string | null }>`SELECT managed_inbox_address AS a FROM organizations WHERE id = ${orgId}`.pipe(
        Effect.map((rows) => rows[0]?.a ?? null),
        Effect.orDie
      )

    return { insert, find, findAny, managedInboxOf, findByFunction, functionExists, list, slotHolder, countGlobalWebhooks, update, deactivate } as const
  })
}) {}
