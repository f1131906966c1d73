/**
 * `meta.total` of the deliveries list without counting an organization's rows: hourly counts kept
 * by triggers (migration 0014), plus a scan of only the partial hours at the edges of a date filter.
 */
import { SqlClient, type Statement } from "@effect/sql"
import { Effect, Layer, Schedule } from "effect"

export interface TotalFilter {
  readonly orgId: string
  readonly status?: string | undefined
  readonly emailId?: string | undefined
  readonly dateFrom?: Date | undefined
  readonly dateTo?: Date | undefined
}

const HOUR = 3_600_000
const floorHour = (d: Date) => new Date(Math.floor(d.getTime() / HOUR) * HOUR)
const ceilHour = (d: Date) => new Date(Math.ceil(d.getTime() / HOUR) * HOUR)

/**
 * A scalar SQL expression: the number of the organization's deliveries matching the filter.
 * Hours wholly inside [date_from, date_to] come from `delivery_counts`; the rest of the range
 * (at most one partial hour at each end) is counted in `deliveries`.
 */
export const totalExpression = (sql: SqlClient.SqlClient, f: TotalFilter): Statement.Fragment => {
  const rowConds = [sql`org_id = ${f.orgId}`]
  if (f.status !== undefined) rowConds.push(sql`status = ${f.status}`)
  // One email's deliveries are few: count them directly.
  if (f.emailId !== undefined) {
    rowConds.push(sql`email_id = ${f.emailId}`)
    if (f.dateFrom !== undefined) rowConds.push(sql`created_at >= ${f.dateFrom}`)
    if (f.dateTo !== undefined) rowConds.push(sql`created_at <= ${f.dateTo}`)
    return sql`(SELECT count(*) FROM deliveries WHERE ${sql.and(rowConds)})`
  }
  // Whole hours: [lo, hi). A bucket `hour` holds created_at in [hour, hour + 1 h).
  const lo = f.dateFrom === undefined ? undefined : ceilHour(f.dateFrom)
  const hi = f.dateTo === undefined ? undefined : floorHour(f.dateTo)
  if (lo !== undefined && hi !== undefined && lo.getTime() >= hi.getTime()) {
    return sql`(SELECT count(*) FROM deliveries WHERE ${
      sql.and([...rowConds, sql`created_at >= ${f.dateFrom!}`, sql`created_at <= ${f.dateTo!}`])
    })`
  }
  const bucketConds = [sql`org_id = ${f.orgId}`]
  if (f.status !== undefined) bucketConds.push(sql`status = ${f.status}`)
  if (lo !== undefined) bucketConds.push(sql`hour >= ${lo}`)
  if (hi !== undefined) bucketConds.push(sql`hour < ${hi}`)
  const edges: Array<Statement.Fragment> = []
  if (lo !== undefined) edges.push(sql`(created_at >= ${f.dateFrom!} AND created_at < ${lo})`)
  if (hi !== undefined) edges.push(sql`(created_at >= ${hi} AND created_at <= ${f.dateTo!})`)
  const buckets = sql`(SELECT coalesce(sum(n), 0) FROM delivery_counts WHERE ${sql.and(bucketConds)})`
  return edges.length === 0
    ? buckets
    : sql`${buckets} + (SELECT count(*) FROM deliveries WHERE ${sql.and([...rowConds, sql.or(edges)])})`
}

/**
 * Folds each key's deltas into one row (keys whose sum is 0 disappear). Safe with concurrent
 * writers and concurrent compactions: see migration 0014.
 */
export const compactDeliveryCounts = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql`
    WITH dup AS (
      SELECT org_id, hour, status FROM delivery_counts GROUP BY 1, 2, 3 HAVING count(*) > 1
    ), gone AS (
      DELETE FROM delivery_counts c USING dup
      WHERE c.org_id = dup.org_id AND c.hour = dup.hour AND c.status = dup.status
      RETURNING c.org_id, c.hour, c.status, c.n
    )
    INSERT INTO delivery_counts (org_id, hour, status, n)
    SELECT org_id, hour, status, sum(n) FROM gone GROUP BY 1, 2, 3 HAVING sum(n) <> 0`
).pipe(Effect.asVoid)

/** Compacts every minute in every process (idempotent; see compactDeliveryCounts). */
export const DeliveryCountsMaintenanceLive = Layer.scopedDiscard(
  compactDeliveryCounts.pipe(
    Effect.catchAllCause((cause) => Effect.logWarning("delivery count compaction failed", cause)),
    Effect.repeat(Schedule.spaced("1 minute")),
    Effect.delay("7 seconds"),
    Effect.forkScoped
  )
)
