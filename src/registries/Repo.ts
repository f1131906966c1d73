/** SQL of registries and their entries. */
import { SqlClient, type SqlError } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import { Conflict, NotFound } from "../contract/Errors.js"
import type { Position } from "../contract/Paging.js"
import { pageWithTotal } from "../platform/Listing.js"
import { allRows, Count, firstRow, Json, pageRows, TextArray, Timestamp } from "../platform/Rows.js"
import { sqlState } from "../platform/SqlErrors.js"
import { type Entry, type EntryStatus, PublishPolicy, type Registry } from "./Api.js"
import { requireSendable } from "./Senders.js"

export const RegistryRow = Schema.Struct({
  id: Schema.String,
  org_id: Schema.String,
  name: Schema.String,
  description: Schema.NullOr(Schema.String),
  publish_policy: PublishPolicy,
  entry_count: Count,
  created_at: Timestamp,
  updated_at: Timestamp
})
export type RegistryRow = typeof RegistryRow.Type

export const EntryRow = Schema.Struct({
  id: Schema.String,
  registry_id: Schema.String,
  org_id: Schema.String,
  handle: Schema.String,
  address: Schema.String,
  description: Schema.NullOr(Schema.String),
  /** jsonb columns. */
  capabilities: TextArray,
  metadata: Schema.Record({ key: Schema.String, value: Json }),
  status: Schema.Literal("pending", "published"),
  created_at: Timestamp,
  updated_at: Timestamp
})
export type EntryRow = typeof EntryRow.Type

export const toRegistry = (r: RegistryRow, callerOrg: string): Registry => ({
  id: r.id,
  name: r.name,
  description: r.description,
  publish_policy: r.publish_policy,
  is_owner: r.org_id === callerOrg,
  entry_count: r.entry_count,
  created_at: r.created_at,
  updated_at: r.updated_at
})

export const toEntry = (r: EntryRow, callerOrg: string, status: EntryStatus = r.status): Entry => ({
  handle: r.handle,
  address: r.address,
  description: r.description,
  capabilities: r.capabilities,
  metadata: r.metadata,
  status,
  publisher_is_you: r.org_id === callerOrg,
  created_at: r.created_at,
  updated_at: r.updated_at
})

/** Published entries counted for a registry row `r`. */
const ENTRY_COUNT = `(SELECT count(*)::int FROM registry_entries e WHERE e.registry_id = r.id AND e.status = 'published') AS entry_count`

/** Who lists a registry's entries: its owner sees every entry, anyone else the published ones and their own. */
export type Viewer = { readonly owner: true } | { readonly owner: false; readonly orgId: string }

export interface EntryPatch {
  readonly address?: string
  readonly description?: string | null
  readonly capabilities?: ReadonlyArray<string>
  readonly metadata?: Readonly<Record<string, unknown>>
  readonly status?: "pending" | "published"
}

const isSqlError = (e: unknown): e is SqlError.SqlError =>
  typeof e === "object" && e !== null && (e as { _tag?: string })._tag === "SqlError"

const UUID_SHAPE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

export class RegistriesRepo extends Effect.Service<RegistriesRepo>()("mailroom/RegistriesRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    /**
     * A registry by name, or by id: a UUID-shaped reference that names no registry is tried as an id
     * (a name match wins, since a lowercase UUID is also a valid name).
     */
    const find = (ref: string) =>
      sql`SELECT r.*, ${sql.literal(ENTRY_COUNT)} FROM registries r
        WHERE r.name = ${ref} ${UUID_SHAPE.test(ref) ? sql`OR r.id = ${ref.toLowerCase()}::uuid` : sql``}
        ORDER BY (r.name = ${ref}) DESC LIMIT 1`.pipe(
        firstRow(RegistryRow, "registry"),
        Effect.orDie
      )

    /**
     * One statement: the name is claimed for the organization for good (a name another organization
     * ever held is refused, race-safe through the claim's primary key), then the registry is created.
     */
    const insert = (orgId: string, input: { name: string; description: string | null; policy: PublishPolicy }) =>
      Effect.gen(function*() {
        const rows = yield* sql`
          WITH claim AS (
            INSERT INTO registry_names (name, org_id) VALUES (${input.name}, ${orgId})
            ON CONFLICT (name) DO UPDATE SET org_id = registry_names.org_id WHERE registry_names.org_id = EXCLUDED.org_id
            RETURNING name
          )
          INSERT INTO registries (org_id, name, description, publish_policy)
          SELECT ${orgId}, claim.name, ${input.description}, ${input.policy} FROM claim
          ON CONFLICT (name) DO NOTHING
          RETURNING *, 0 AS entry_count`.pipe(allRows(RegistryRow, "registry insert"), Effect.orDie)
        if (rows[0] !== undefined) return rows[0]
        const live = yield* find(input.name)
        return yield* new Conflict({
          message: Option.isSome(live)
            ? `a registry named ${input.name} already exists`
            : `the name ${input.name} belonged to a deleted registry of another organization and stays reserved`,
          details: { constraint: "name", reason: Option.isSome(live) ? "exists" : "reserved" }
        })
      })

    /** Newest first, with the count of everything the filter matches, in one statement. */
    const list = (callerOrg: string, owned: boolean | undefined, limit: number, after: Position | undefined) => {
      const where = owned === undefined ? sql`true` : owned ? sql`r.org_id = ${callerOrg}` : sql`r.org_id <> ${callerOrg}`
      return sql<{ readonly id: string | null; readonly page_total: number }>`
        SELECT t.page_total, p.* FROM (SELECT count(*)::int AS page_total FROM registries r WHERE ${where}) t
        LEFT JOIN (
          SELECT r.*, ${sql.literal(ENTRY_COUNT)} FROM registries r WHERE ${where}
            ${after === undefined ? sql`` : sql`AND (r.created_at, r.id) < (${after.createdAt}, ${after.id}::uuid)`}
          ORDER BY r.created_at DESC, r.id DESC LIMIT ${limit + 1}
        ) p ON true
        ORDER BY p.created_at DESC, p.id DESC`.pipe(
        Effect.map((rows) => ({ rows: rows.filter((r) => r.id !== null), total: rows[0]?.page_total ?? 0 })),
        pageRows(RegistryRow, "registry page"),
        Effect.orDie
      )
    }

    const update = (id: string, patch: { readonly description?: string | null; readonly publish_policy?: PublishPolicy }) =>
      sql`UPDATE registries r SET
          description = CASE WHEN ${patch.description !== undefined} THEN ${patch.description ?? null} ELSE description END,
          publish_policy = coalesce(${patch.publish_policy ?? null}, publish_policy),
          updated_at = now()
        WHERE r.id = ${id} RETURNING r.*, ${sql.literal(ENTRY_COUNT)}`.pipe(
        firstRow(RegistryRow, "registry"),
        Effect.orDie
      )

    /** Deletes the registry; its entries go with it (ON DELETE CASCADE). Answers it as it was. */
    const remove = (id: string) =>
      sql`WITH gone AS (DELETE FROM registries WHERE id = ${id} RETURNING *)
        SELECT r.*, ${sql.literal(ENTRY_COUNT)} FROM gone r`.pipe(
        firstRow(RegistryRow, "registry"),
        Effect.orDie
      )

    const findEntry = (registryId: string, handle: string) =>
      sql`SELECT * FROM registry_entries WHERE registry_id = ${registryId} AND handle = ${handle}`.pipe(
        firstRow(EntryRow, "registry entry"),
        Effect.orDie
      )

    /**
     * One statement: the unique (registry, handle) index decides between concurrent publishes of one
     * handle, so exactly one of them is 201 and the others 409.
     */
    const insertEntry = (registry: RegistryRow, orgId: string, e: {
      readonly handle: string
      readonly address: string
      readonly description: string | null
      readonly capabilities: ReadonlyArray<string>
      readonly metadata: Readonly<Record<string, unknown>>
      readonly status: "pending" | "published"
    }) =>
      sql`INSERT INTO registry_entries (registry_id, org_id, handle, address, description, capabilities, metadata, status)
          VALUES (${registry.id}, ${orgId}, ${e.handle}, ${e.address}, ${e.description},
            ${JSON.stringify(e.capabilities)}::jsonb, ${JSON.stringify(e.metadata)}::jsonb, ${e.status})
          ON CONFLICT ON CONSTRAINT registry_entries_handle DO NOTHING RETURNING *`.pipe(
        allRows(EntryRow, "registry entry insert"),
        Effect.catchIf(isSqlError, (err) =>
          // The registry was deleted while the entry was being published.
          sqlState(err) === "23503"
            ? Effect.fail(new NotFound({ message: `no registry ${registry.name}` }))
            : Effect.die(err)),
        Effect.flatMap((rows) =>
          rows[0] === undefined
            ? Effect.fail(
              new Conflict({
                message: `the handle ${e.handle} is already taken in registry ${registry.name}`,
                details: { constraint: "handle" }
              })
            )
            : Effect.succeed(rows[0])
        )
      )

    const entries = (
      registryId: string,
      viewer: Viewer,
      status: "pending" | "published" | undefined,
      limit: number,
      after: Position | undefined
    ) => {
      const clauses = [sql`registry_id = ${registryId}`]
      if (!viewer.owner) clauses.push(sql`(status = 'published' OR org_id = ${viewer.orgId})`)
      if (status !== undefined) clauses.push(sql`status = ${status}`)
      return pageWithTotal<{ readonly id: string }>(sql, "registry_entries", sql.and(clauses), limit, after).pipe(
        pageRows(EntryRow, "registry entry page"),
        Effect.orDie
      )
    }

    const updateEntry = (id: string, patch: EntryPatch) =>
      sql`UPDATE registry_entries SET
          address = coalesce(${patch.address ?? null}, address),
          description = CASE WHEN ${patch.description !== undefined} THEN ${patch.description ?? null} ELSE description END,
          capabilities = coalesce(${patch.capabilities === undefined ? null : JSON.stringify(patch.capabilities)}::jsonb, capabilities),
          metadata = coalesce(${patch.metadata === undefined ? null : JSON.stringify(patch.metadata)}::jsonb, metadata),
          status = coalesce(${patch.status ?? null}, status),
          updated_at = now()
        WHERE id = ${id} RETURNING *`.pipe(
        firstRow(EntryRow, "registry entry"),
        Effect.orDie
      )

    const removeEntry = (id: string) =>
      sql`DELETE FROM registry_entries WHERE id = ${id} RETURNING *`.pipe(
        firstRow(EntryRow, "registry entry"),
        Effect.orDie
      )

    /** Approve: pending → published, only if still pending (a concurrent approve or reject wins once). */
    const approve = (id: string) =>
      sql`UPDATE registry_entries SET status = 'published', updated_at = now()
        WHERE id = ${id} AND status = 'pending' RETURNING *`.pipe(
        firstRow(EntryRow, "registry entry"),
        Effect.orDie
      )

    /** Reject: a pending entry is removed (its handle freed), only if still pending. */
    const reject = (id: string) =>
      sql`DELETE FROM registry_entries WHERE id = ${id} AND status = 'pending' RETURNING *`.pipe(
        firstRow(EntryRow, "registry entry"),
        Effect.orDie
      )

    /** 403 `cannot_send_from_domain` unless the organization can send from `address` (registries/Senders.ts). */
    const sendable = (orgId: string, address: string) => requireSendable(orgId, address).pipe(Effect.provideService(SqlClient.SqlClient, sql))

    return {
      find,
      insert,
      list,
      update,
      remove,
      findEntry,
      insertEntry,
      entries,
      updateEntry,
      removeEntry,
      approve,
      reject,
      sendable
    } as const
  })
}) {}
