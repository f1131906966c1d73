/**
 * SQL of listen sessions and their queued event copies. At most LISTEN_MAX_ACTIVE_SESSIONS sessions
 * of an organization are live at once: creation counts and inserts under the organization's advisory
 * lock, so concurrent creates see each other's sessions. Rows are decoded (timestamps from either
 * driver form), so a renamed column fails a test.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import { Count, findAll, findOne, orDieRows, single, Timestamp } from "../platform/Rows.js"
import { LISTEN_MAX_ACTIVE_SESSIONS } from "./Api.js"

const BATCH = 50
/** Advisory-lock namespace of session creation (the key is the organization's). */
const SESSION_CAP_LOCK = "mailroom:listen-sessions:"
/** Sessions expired for longer than this are removed when another one is created. */
const EXPIRED_KEPT_MS = 86_400_000

const SessionRow = Schema.Struct({
  id: Schema.String,
  device_name: Schema.NullOr(Schema.String),
  created_at: Timestamp,
  expires_at: Timestamp
})
export type SessionRow = typeof SessionRow.Type

const EventRow = Schema.Struct({
  id: Schema.String,
  event_id: Schema.String,
  event_type: Schema.String,
  email_id: Schema.NullOr(Schema.String),
  replay_of: Schema.NullOr(Schema.String),
  payload: Schema.String
})
export type EventRow = typeof EventRow.Type

/** The count of an organization's active sessions. */
const ActiveSessionCountRow = Schema.Struct({ n: Count })

export class ListenSessions extends Effect.Service<ListenSessions>()("mailroom/ListenSessions", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const session = (what: string, execute: () => Effect.Effect<ReadonlyArray<unknown>, unknown>) =>
      findOne({ Request: Schema.Void, Result: SessionRow, execute })().pipe(orDieRows(what))

    /** Extends a session of the organization to `until`; none when it does not exist. */
    const touch = (orgId: string, id: string, until: Date) =>
      session("listen session touch", () =>
        sql`UPDATE listen_sessions SET expires_at = ${until} WHERE id = ${id} AND org_id = ${orgId} RETURNING *`)

    /** Takes (and removes) the session's queued copies, oldest first. */
    const take = (id: string) =>
      findAll({
        Request: Schema.Void,
        Result: EventRow,
        execute: () =>
          sql`
            WITH taken AS (
              DELETE FROM listen_events WHERE id IN (
                SELECT id FROM listen_events WHERE session_id = ${id} ORDER BY id LIMIT ${BATCH} FOR UPDATE SKIP LOCKED)
              RETURNING id AS seq, delivery_id)
            SELECT d.id, d.event_id, d.event_type, d.email_id, d.replay_of, d.payload
            FROM taken t JOIN deliveries d ON d.id = t.delivery_id
            ORDER BY t.seq`
      })().pipe(orDieRows("listen events take"))

    /** A new session, or none when the organization already has its maximum of live ones. */
    const create = (orgId: string, deviceName: string | null, now: Date, until: Date) =>
      Effect.gen(function*() {
        // Each statement after the lock takes a new snapshot, so the count includes concurrent creates.
        yield* sql`SELECT pg_advisory_xact_lock(hashtextextended(${SESSION_CAP_LOCK + orgId}, 0))`
        yield* sql`DELETE FROM listen_sessions
                   WHERE org_id = ${orgId} AND expires_at < ${new Date(now.getTime() - EXPIRED_KEPT_MS)}`
        const active = yield* single({
          Request: Schema.Void,
          Result: ActiveSessionCountRow,
          execute: () => sql`SELECT count(*)::int AS n FROM listen_sessions WHERE org_id = ${orgId} AND expires_at > ${now}`
        })()
        if (active.n >= LISTEN_MAX_ACTIVE_SESSIONS) return Option.none<SessionRow>()
        return Option.some(
          yield* single({
            Request: Schema.Void,
            Result: SessionRow,
            execute: () =>
              sql`INSERT INTO listen_sessions (org_id, device_name, created_at, expires_at)
                  VALUES (${orgId}, ${deviceName}, ${now}, ${until}) RETURNING *`
          })()
        )
      }).pipe(sql.withTransaction, orDieRows("listen session create"))

    const remove = (orgId: string, id: string) =>
      session("listen session delete", () =>
        sql`DELETE FROM listen_sessions WHERE id = ${id} AND org_id = ${orgId} RETURNING *`)

    return { touch, take, create, remove } as const
  })
}) {}
