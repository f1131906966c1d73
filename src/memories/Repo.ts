/**
 * SQL of memories: JSON items under string keys in an organization's scope or one function's.
 * An expired item is invisible to every read and replaced as new by a write; rows past their
 * expiry are removed on the way. Rows are decoded, so a renamed or retyped column fails loudly.
 */
import { sqlState, STORAGE_QUOTA_SQLSTATE } from "../platform/SqlErrors.js"
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Option, Schema } from "effect"
import { Conflict } from "../contract/Errors.js"
import { isFunctionId } from "../contract/Functions.js"
import { allRows, Count, firstRow, NullableTimestamp, Timestamp } from "../platform/Rows.js"

export const KEY_MAX_BYTES = 512
export const VALUE_MAX_BYTES = 64 * 1024
export const MAX_KEYS_PER_SCOPE = 10_000

/** Whose items: the organization's (`functionId` null) or one of its functions'. */
export interface MemoryScope {
  readonly orgId: string
  readonly functionId: string | null
}

const MemoryRow = Schema.Struct({
  id: Schema.String,
  org_id: Schema.String,
  function_id: Schema.NullOr(Schema.String),
  key: Schema.String,
  /** The serialized JSON text. */
  value: Schema.String,
  size_bytes: Schema.Number,
  expires_at: NullableTimestamp,
  created_at: Timestamp,
  updated_at: Timestamp
})
export type MemoryRow = typeof MemoryRow.Type

const Counted = Schema.Struct({ n: Count })
const Id = Schema.Struct({ id: Schema.String })

/** Why a key cannot be used, or undefined when it can. */
export const keyProblem = (key: string): string | undefined => {
  const bytes = Buffer.byteLength(key, "utf8")
  if (bytes < 1) return "must not be empty"
  if (bytes > KEY_MAX_BYTES) return `must be at most ${KEY_MAX_BYTES} bytes of UTF-8`
  if (/\p{Cc}/u.test(key)) return "must not contain control characters"
  if (/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/.test(key)) return "must be valid UTF-8"
  return undefined
}

export class MemoriesRepo extends Effect.Service<MemoriesRepo>()("mailroom/MemoriesRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

    const inScope = (s: MemoryScope) =>
      s.functionId === null
        ? sql`org_id = ${s.orgId} AND function_id IS NULL`
        : sql`org_id = ${s.orgId} AND function_id = ${s.functionId}`

    const live = (at: Date) => sql`(expires_at IS NULL OR expires_at > ${at})`

    /** Keys in byte order after `after`, starting with `prefix`; `limit + 1` rows tell whether more follow. */
    const list = (s: MemoryScope, opts: { prefix: string; after: string | undefined; limit: number }) =>
      Effect.gen(function*() {
        const at = yield* now
        // A LIKE pattern would need escaping; comparing the leading bytes is exact.
        const prefixCond = opts.prefix === ""
          ? sql`true`
          : sql`left(key, ${[...opts.prefix].length}) = ${opts.prefix}`
        const afterCond = opts.after === undefined ? sql`true` : sql`key COLLATE "C" > ${opts.after}`
        const rows = yield* sql`SELECT * FROM memories WHERE ${inScope(s)} AND ${live(at)} AND ${prefixCond}
          AND ${afterCond} ORDER BY key COLLATE "C" LIMIT ${opts.limit + 1}`.pipe(allRows(MemoryRow, "memory list"))
        const total = yield* sql`SELECT count(*)::int AS n FROM memories WHERE ${inScope(s)} AND ${live(at)}
          AND ${prefixCond}`.pipe(allRows(Counted, "memory count"))
        return { rows, total: total[0]!.n }
      }).pipe(Effect.orDie)

    const get = (s: MemoryScope, key: string) =>
      Effect.gen(function*() {
        const at = yield* now
        return yield* sql`SELECT * FROM memories WHERE ${inScope(s)} AND key = ${key} AND ${live(at)}`.pipe(
          firstRow(MemoryRow, "memory get")
        )
      }).pipe(Effect.orDie)

    /** Stores `valueJson` (already checked JSON text); `created` is false when a live item was replaced. */
    const put = (s: MemoryScope, key: string, valueJson: string, ttlSeconds: number | undefined) =>
      sql.withTransaction(Effect.gen(function*() {
        const at = yield* now
        yield* sql`DELETE FROM memories WHERE ${inScope(s)} AND key = ${key} AND NOT ${live(at)}`
        const existing = yield* sql`SELECT id FROM memories WHERE ${inScope(s)} AND key = ${key}`.pipe(
          allRows(Id, "memory existing")
        )
        const expiresAt = ttlSeconds === undefined ? null : new Date(at.getTime() + ttlSeconds * 1000)
        const size = Buffer.byteLength(valueJson, "utf8")
        if (existing[0] !== undefined) {
          const rows = yield* sql`UPDATE memories SET value = ${valueJson}, size_bytes = ${size},
              expires_at = ${expiresAt}, updated_at = ${at} WHERE id = ${existing[0].id} RETURNING *`.pipe(
            allRows(MemoryRow, "memory update")
          )
          return { row: rows[0]!, created: false }
        }
        const count = yield* sql`SELECT count(*)::int AS n FROM memories WHERE ${inScope(s)} AND ${live(at)}`.pipe(
          allRows(Counted, "memory count")
        )
        if (count[0]!.n >= MAX_KEYS_PER_SCOPE) {
          return yield* new Conflict({
            message: `this scope already holds ${MAX_KEYS_PER_SCOPE} keys; delete some first`,
            details: { limit: MAX_KEYS_PER_SCOPE }
          })
        }
        const rows = yield* sql`INSERT INTO memories (org_id, function_id, key, value, size_bytes, expires_at,
            created_at, updated_at)
          VALUES (${s.orgId}, ${s.functionId}, ${key}, ${valueJson}, ${size}, ${expiresAt},
            ${at}, ${at}) RETURNING *`.pipe(allRows(MemoryRow, "memory insert"))
        return { row: rows[0]!, created: true }
      })).pipe(Effect.catchTag("SqlError", (e) =>
        sqlState(e) === STORAGE_QUOTA_SQLSTATE
          ? Effect.fail(
            new Conflict({
              message: "the organization's storage quota is full: delete memories or mail to make room",
              details: { reason: "storage_quota_exceeded" }
            })
          )
          : Effect.die(e)
      ))

    const remove = (s: MemoryScope, key: string) =>
      Effect.gen(function*() {
        const at = yield* now
        const row = yield* sql`DELETE FROM memories WHERE ${inScope(s)} AND key = ${key} RETURNING *`.pipe(
          firstRow(MemoryRow, "memory delete")
        )
        return Option.filter(row, (r) => r.expires_at === null || r.expires_at > at)
      }).pipe(Effect.orDie)

    /** Whether the function exists in the organization (function scopes are addressed by its id). */
    /** The id of the organization's function given by id or by name. */
    const functionIdOf = (orgId: string, ref: string) =>
      sql`SELECT id FROM functions
        WHERE ${isFunctionId(ref) ? sql`id = ${ref}` : sql`name = ${ref}`} AND org_id = ${orgId}`.pipe(
        firstRow(Id, "function of memory scope"),
        Effect.map(Option.map((r) => r.id)),
        Effect.orDie
      )

    return { list, get, put, remove, functionIdOf } as const
  })
}) {}
