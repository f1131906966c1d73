/**
 * The organization's event log (migrations/0140): what `GET /v1/events` streams and resumes from.
 *
 * Written on the ingest path as cheaply as possible: an event that gets a delivery is logged by a
 * trigger on `deliveries` (its payload stays there); an event without one is one small INSERT
 * embedded in the statement that stores what it reports. Read in (xid, seq) order up to the oldest
 * running transaction, so a reader never passes a position a late commit could still fill.
 */
import { SqlClient, type Statement } from "@effect/sql"
import { Effect, Layer, Schedule, Schema } from "effect"
import { rowsOrDie } from "../platform/Rows.js"
import { EVENT_LOG_RETENTION_HOURS } from "./Api.js"

/** Rows read per step of a stream. */
const PAGE = 200

/** A position in the log: after (xid, seq). */
export interface Position {
  readonly xid: string
  readonly seq: string
}

export interface LoggedEvent {
  readonly position: Position
  readonly eventId: string
  readonly eventType: string
  /** The exact webhook body; null when its delivery (and so the payload) was deleted since. */
  readonly payload: string | null
}

export interface NewLogEntry {
  readonly orgId: string
  readonly eventId: string
  readonly eventType: string
  readonly payload: string
}

const MAX_SEQ = "9223372036854775807"

/** Positions are read as text: `xid8` and `bigint` exceed a JavaScript number. */
const PositionRow = Schema.Struct({ xid: Schema.String, seq: Schema.String })

const EventRow = Schema.Struct({
  ...PositionRow.fields,
  event_id: Schema.String,
  event_type: Schema.String,
  payload: Schema.NullOr(Schema.String)
})


/** Built once: a schema written where a statement runs is compiled again on every call. */
const decodePositions = Schema.decodeUnknown(Schema.Array(PositionRow))
const decodeEvents = Schema.decodeUnknown(Schema.Array(EventRow))
export class EventLog extends Effect.Service<EventLog>()("mailroom/EventLog", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    /** An event without a delivery, as a statement to run in the transaction that reports it. */
    const appendStatement = (e: NewLogEntry) =>
      sql`INSERT INTO org_events (org_id, event_id, event_type, payload)
          VALUES (${e.orgId}, ${e.eventId}, ${e.eventType}, ${e.payload})
          ON CONFLICT (org_id, event_id) DO NOTHING`

    /** `appendStatement` as the body of a data-modifying CTE that logs only when `when` (a condition) holds. */
    const appendWhen = (e: NewLogEntry, when: Statement.Fragment) =>
      sql`INSERT INTO org_events (org_id, event_id, event_type, payload)
          SELECT ${e.orgId}::uuid, ${e.eventId}::text, ${e.eventType}::text, ${e.payload}::text WHERE ${when}
          ON CONFLICT (org_id, event_id) DO NOTHING`

    /** Everything already committed is behind this position: a new reader starts here. */
    const head = sql`SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS xmin`.pipe(
      Effect.flatMap(Schema.decodeUnknown(Schema.Tuple(Schema.Struct({ xmin: Schema.String })))),
      Effect.map(([row]): Position => ({ xid: String(BigInt(row.xmin) - 1n), seq: MAX_SEQ })),
      rowsOrDie("event log head")
    )

    /** The position of one of the organization's events (a `Last-Event-ID`), if it is still kept. */
    const positionOf = (orgId: string, eventId: string) =>
      sql`
        SELECT xid::text, seq::text FROM org_events WHERE org_id = ${orgId} AND event_id = ${eventId}`.pipe(
        Effect.flatMap(decodePositions),
        Effect.map((rows): Position | undefined => (rows[0] === undefined ? undefined : { xid: rows[0].xid, seq: rows[0].seq })),
        rowsOrDie("event log position")
      )

    /** The next events after `after`, oldest first, of the given types (all when empty). */
    const after = (orgId: string, after: Position, types: ReadonlyArray<string>) =>
      sql`
        SELECT e.xid::text, e.seq::text, e.event_id, e.event_type, coalesce(e.payload, d.payload) AS payload
        FROM org_events e LEFT JOIN deliveries d ON d.id = e.delivery_id
        WHERE e.org_id = ${orgId}
          AND (e.xid, e.seq) > (${after.xid}::bigint, ${after.seq}::bigint)
          AND e.xid < pg_snapshot_xmin(pg_current_snapshot())::text::bigint
          ${types.length > 0 ? sql`AND e.event_type IN ${sql.in(types)}` : sql``}
        ORDER BY e.xid, e.seq
        LIMIT ${PAGE}`.pipe(
        Effect.flatMap(decodeEvents),
        Effect.map((rows) =>
          rows.map((r): LoggedEvent => ({
            position: { xid: r.xid, seq: r.seq },
            eventId: r.event_id,
            eventType: r.event_type,
            payload: r.payload
          }))
        ),
        rowsOrDie("event log read")
      )

    const prune = sql`
      DELETE FROM org_events WHERE seq IN (
        SELECT seq FROM org_events
        WHERE created_at < now() - make_interval(hours => ${EVENT_LOG_RETENTION_HOURS}) LIMIT 5000)`

    return { appendStatement, appendWhen, head, positionOf, after, prune } as const
  })
}) {}

/** Removes events past their retention, every ten minutes, in every process (idempotent). */
export const EventLogMaintenanceLive = Layer.scopedDiscard(
  Effect.gen(function*() {
    const log = yield* EventLog
    yield* log.prune.pipe(
      Effect.catchAllCause((cause) => Effect.logWarning("event log prune failed", cause)),
      Effect.repeat(Schedule.spaced("10 minutes")),
      Effect.delay("30 seconds"),
      Effect.forkScoped
    )
  })
).pipe(Layer.provide(EventLog.Default))
