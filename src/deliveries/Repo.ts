/**
 * SQL of what the deliveries handlers read: a delivery with its endpoint, a page of the
 * organization's deliveries with its total, and the payload first sent under an event id. Rows are
 * decoded (status and endpoint kind checked, timestamps from either driver form), so a renamed or
 * retyped column fails a test instead of reaching a response.
 */
import { SqlClient, type Statement } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import type { Position } from "../contract/Paging.js"
import { Count, findAll, findOne, orDieRows, Timestamp } from "../platform/Rows.js"
import { DeliveryStatus } from "./Api.js"
import { totalExpression, type TotalFilter } from "./Counts.js"

/** What a listing shows: no payload, lease or dispatcher columns. */
const ListedRow = Schema.Struct({
  id: Schema.String,
  email_id: Schema.NullOr(Schema.String),
  endpoint_id: Schema.String,
  event_id: Schema.String,
  event_type: Schema.String,
  replay_of: Schema.NullOr(Schema.String),
  status: DeliveryStatus,
  attempt_count: Schema.Number,
  next_attempt_at: Timestamp,
  duration_ms: Schema.Number,
  last_error: Schema.NullOr(Schema.String),
  last_error_code: Schema.NullOr(Schema.String),
  email_sender: Schema.String,
  email_recipient: Schema.String,
  email_subject: Schema.String,
  created_at: Timestamp,
  updated_at: Timestamp,
  endpoint_kind: Schema.Literal("http", "function"),
  endpoint_url: Schema.NullOr(Schema.String),
  function_id: Schema.NullOr(Schema.String)
})
export type ListedRow = typeof ListedRow.Type

const LISTED_COLUMNS = Object.keys(ListedRow.fields).join(", ")

/** One delivery with its payload, as a replay needs it. */
const DeliveryRow = Schema.Struct({ ...ListedRow.fields, org_id: Schema.String, payload: Schema.String })
export type DeliveryWithEndpoint = typeof DeliveryRow.Type

/** A page row with the total, or the total alone (every page column null) when the page is empty. */
const PageRow = Schema.Union(
  Schema.Struct({ ...ListedRow.fields, total: Count }),
  Schema.Struct({ id: Schema.Null, total: Count })
)

export interface DeliveryFilter extends TotalFilter {
  readonly limit: number
  readonly after: Position | undefined
}

/** Rows of "delivery payload". */
const DeliveryPayloadRow = Schema.Struct({ payload: Schema.String })

export class DeliveriesRepo extends Effect.Service<DeliveriesRepo>()("mailroom/DeliveriesRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const find = (orgId: string, id: string) =>
      findOne({
        Request: Schema.Void,
        Result: DeliveryRow,
        execute: () =>
          sql`SELECT d.*, e.kind AS endpoint_kind, e.url AS endpoint_url, e.function_id
              FROM deliveries d JOIN endpoints e ON e.id = d.endpoint_id
              WHERE d.id = ${id} AND d.org_id = ${orgId}`
      })().pipe(orDieRows("delivery find"))

    /**
     * The listed rows `source` holds (a parenthesised SELECT of the listed columns: the organization's
     * deliveries with their endpoints, or the demo's rows given inline by `inlineDeliveries`),
     * filtered, newest first; `limit + 1` rows tell whether more follow. The total is `total` when
     * given (the real list reads the kept counts), else a count of the source's matching rows.
     */
    const listOver = (source: Statement.Fragment, f: DeliveryFilter, total?: Statement.Fragment) =>
      Effect.gen(function*() {
        const conds = [sql`true`]
        if (f.emailId !== undefined) conds.push(sql`email_id = ${f.emailId}`)
        if (f.status !== undefined) conds.push(sql`status = ${f.status}`)
        if (f.dateFrom !== undefined) conds.push(sql`created_at >= ${f.dateFrom}`)
        if (f.dateTo !== undefined) conds.push(sql`created_at <= ${f.dateTo}`)
        const page = f.after === undefined ? conds : [...conds, sql`(created_at, id) < (${f.after.createdAt}, ${f.after.id})`]
        const counted = total ?? sql`SELECT count(*) FROM ${source} AS src WHERE ${sql.and(conds)}`
        // One round trip and one snapshot for the page and its total. The source is a plain
        // subquery, so the planner folds it into the scan (indexes still apply).
        const rows = yield* findAll({
          Request: Schema.Void,
          Result: PageRow,
          execute: () =>
            sql`
              WITH page AS (
                SELECT ${sql.literal(LISTED_COLUMNS)} FROM ${source} AS src
                WHERE ${sql.and(page)}
                ORDER BY created_at DESC, id DESC LIMIT ${f.limit + 1})
              SELECT t.total, page.* FROM (SELECT (${counted})::int AS total) t LEFT JOIN page ON true
              ORDER BY page.created_at DESC, page.id DESC`
        })()
        const listed = rows.flatMap((r): Array<ListedRow> => r.id === null ? [] : [r as ListedRow])
        return { rows: listed, total: rows[0]?.total ?? 0 }
      }).pipe(orDieRows("delivery list"))

    const list = (f: DeliveryFilter) =>
      listOver(
        sql`(SELECT d.id, d.email_id, d.endpoint_id, d.event_id, d.event_type, d.replay_of, d.status,
                    d.attempt_count, d.next_attempt_at, d.duration_ms, d.last_error, d.last_error_code,
                    d.email_sender, d.email_recipient, d.email_subject, d.created_at, d.updated_at,
                    e.kind AS endpoint_kind, e.url AS endpoint_url, e.function_id
               FROM deliveries d JOIN endpoints e ON e.id = d.endpoint_id WHERE d.org_id = ${f.orgId})`,
        f,
        totalExpression(sql, f)
      )

    /** Listed rows held in memory (the demo's) as a `listOver` source; nothing is stored. */
    const inlineDeliveries = (rows: ReadonlyArray<ListedRow>): Statement.Fragment =>
      sql`(SELECT ${sql.literal(LISTED_COLUMNS)}
             FROM jsonb_to_recordset(${JSON.stringify(rows)}::jsonb) AS x(id uuid, email_id uuid, endpoint_id uuid,
                  event_id text, event_type text, replay_of uuid, status text, attempt_count integer,
                  next_attempt_at timestamptz, duration_ms integer, last_error text, last_error_code text,
                  email_sender text, email_recipient text, email_subject text, created_at timestamptz,
                  updated_at timestamptz, endpoint_kind text, endpoint_url text, function_id uuid))`

    /** The payload of the organization's first delivery of an event. */
    const firstPayloadOf = (orgId: string, eventId: string) =>
      findOne({
        Request: Schema.Void,
        Result: DeliveryPayloadRow,
        execute: () =>
          sql`SELECT payload FROM deliveries WHERE org_id = ${orgId} AND event_id = ${eventId}
              ORDER BY created_at LIMIT 1`
      })().pipe(Effect.map(Option.map((r) => r.payload)), orDieRows("delivery payload"))

    return { find, list, listOver, inlineDeliveries, firstPayloadOf } as const
  })
}) {}
