/**
 * SQL of functions and their invocations. Secrets are sealed (AES-256-GCM under a key derived from
 * the service key, bound to the function's id) before they reach the database, and opened only to
 * start an invocation. Rows are decoded, so a renamed or retyped column fails loudly.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import { createHash, randomUUID } from "node:crypto"
import { Conflict } from "../contract/Errors.js"
import type { Position } from "../contract/Paging.js"
import { pageWithTotal } from "../platform/Listing.js"
import { allRows, firstRow, JsonColumn, pageRows, TextArray, Timestamp } from "../platform/Rows.js"
import { open, seal } from "../platform/Sealed.js"
import { ServiceKey } from "../platform/ServiceKey.js"
import { catchUnique } from "../platform/SqlErrors.js"
import { type FunctionInfo, type FunctionWithCode, type Invocation, isFunctionId } from "./Api.js"

/** The columns of `functions` (a page selects `*`, without the endpoint). */
const FunctionColumns = Schema.Struct({
  id: Schema.String,
  org_id: Schema.String,
  name: Schema.String,
  version: Schema.Number,
  code: Schema.String,
  code_sha256: Schema.String,
  code_size_bytes: Schema.Number,
  /** `jsonb`: the sorted names. */
  secret_names: JsonColumn(TextArray),
  secrets_sealed: Schema.NullOr(Schema.String),
  created_at: Timestamp,
  updated_at: Timestamp,
  deployed_at: Timestamp
})

/** A function with its active endpoint (`SELECT_FUNCTION`). */
const FunctionRow = Schema.Struct({ ...FunctionColumns.fields, endpoint_id: Schema.NullOr(Schema.String) })
export type FunctionRow = typeof FunctionRow.Type

const InvocationRow = Schema.Struct({
  id: Schema.String,
  org_id: Schema.String,
  function_id: Schema.String,
  function_version: Schema.Number,
  delivery_id: Schema.NullOr(Schema.String),
  event_id: Schema.NullOr(Schema.String),
  event: Schema.NullOr(Schema.String),
  /** `ok`, `http_<status>`, `function_error`, …: an open set, kept as text. */
  status: Schema.String,
  status_code: Schema.NullOr(Schema.Number),
  duration_ms: Schema.Number,
  logs: Schema.String,
  error: Schema.NullOr(Schema.String),
  started_at: Timestamp,
  created_at: Timestamp
})
export type InvocationRow = typeof InvocationRow.Type

const Id = Schema.Struct({ id: Schema.String })

export const toFunction = (r: FunctionRow): FunctionInfo => ({
  id: r.id,
  name: r.name,
  version: r.version,
  code_sha256: r.code_sha256,
  code_size_bytes: r.code_size_bytes,
  secret_names: [...r.secret_names].sort(),
  endpoint_id: r.endpoint_id,
  created_at: r.created_at,
  updated_at: r.updated_at,
  deployed_at: r.deployed_at
})

export const toFunctionWithCode = (r: FunctionRow): FunctionWithCode => ({ ...toFunction(r), code: r.code })

export const toInvocation = (r: InvocationRow): Invocation => ({
  id: r.id,
  function_id: r.function_id,
  function_version: r.function_version,
  delivery_id: r.delivery_id,
  event_id: r.event_id,
  event: r.event,
  status: r.status,
  status_code: r.status_code,
  duration_ms: r.duration_ms,
  logs: r.logs,
  error: r.error,
  started_at: r.started_at
})

const sha256 = (s: string) => createHash("sha256").update(s, "utf8").digest("hex")
const SEAL_PURPOSE = "function-secrets"
const sealContext = (functionId: string) => `function:${functionId}`

const nameTaken = () =>
  new Conflict({ message: "a function with this name already exists in the organization", details: { constraint: "name" } })

/** Columns of a function with its active endpoint. */
const SELECT_FUNCTION = `SELECT f.*, (SELECT e.id FROM endpoints e WHERE e.org_id = f.org_id AND e.function_id = f.id
  AND e.deactivated_at IS NULL LIMIT 1) AS endpoint_id FROM functions f`

/** Rows of "function endpoints". */
const FunctionEndpointsRow = Schema.Struct({ id: Schema.String, function_id: Schema.String })

export class FunctionsRepo extends Effect.Service<FunctionsRepo>()("mailroom/FunctionsRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const keys = yield* ServiceKey

    const sealSecrets = (functionId: string, secrets: Readonly<Record<string, string>>) =>
      Object.keys(secrets).length === 0
        ? Effect.succeed(null)
        : Effect.map(keys.derive(SEAL_PURPOSE), (key) => seal(key, JSON.stringify(secrets), sealContext(functionId)))

    /** The secrets of a function in clear, for an invocation only. */
    const openSecrets = (row: FunctionRow) =>
      row.secrets_sealed === null
        ? Effect.succeed<Record<string, string>>({})
        : Effect.gen(function*() {
          const key = yield* keys.derive(SEAL_PURPOSE)
          const plain = open(key, row.secrets_sealed!, sealContext(row.id))
          // A value that does not open means the master key changed under sealed data: an operator fault.
          if (plain === undefined) return yield* Effect.dieMessage(`function ${row.id}: its secrets do not open under the service key (was MAILROOM_SECRET_KEY changed?)`)
          return JSON.parse(plain) as Record<string, string>
        })

    /** A function of the organization by id, or by name (`ref` not shaped like a UUID). */
    const find = (orgId: string, ref: string) =>
      sql`${sql.literal(SELECT_FUNCTION)} WHERE ${isFunctionId(ref) ? sql`f.id = ${ref}` : sql`f.name = ${ref}`} AND f.org_id = ${orgId}`.pipe(
        firstRow(FunctionRow, "function find"),
        Effect.orDie
      )

    const insert = (orgId: string, input: { name: string; code: string; secrets: Readonly<Record<string, string>> }) =>
      Effect.gen(function*() {
        const id = randomUUID()
        const sealed = yield* sealSecrets(id, input.secrets)
        const names = Object.keys(input.secrets).sort()
        yield* catchUnique(
          sql`INSERT INTO functions (id, org_id, name, code, code_sha256, code_size_bytes, secret_names, secrets_sealed)
            VALUES (${id}, ${orgId}, ${input.name}, ${input.code}, ${sha256(input.code)},
              ${Buffer.byteLength(input.code, "utf8")}, ${JSON.stringify(names)}::jsonb, ${sealed})`,
          nameTaken
        )
        return (yield* find(orgId, id)).pipe(Option.getOrThrow)
      })

    const list = (orgId: string, limit: number, after: Position | undefined) =>
      pageWithTotal<{ readonly id: string }>(sql, "functions", sql`org_id = ${orgId}`, limit, after).pipe(
        pageRows(FunctionColumns, "function page"),
        Effect.flatMap(({ rows, total }) =>
          rows.length === 0 ? Effect.succeed({ rows: [] as Array<FunctionRow>, total }) : Effect.map(
            sql`SELECT id, function_id FROM endpoints WHERE org_id = ${orgId}
              AND deactivated_at IS NULL AND function_id IN ${sql.in(rows.map((r) => r.id))}`.pipe(
              allRows(FunctionEndpointsRow, "function endpoints")
            ),
            (eps) => {
              const byFunction = new Map(eps.map((e) => [e.function_id, e.id]))
              return { rows: rows.map((r) => ({ ...r, endpoint_id: byFunction.get(r.id) ?? null })), total }
            }
          )
        ),
        Effect.orDie
      )

    /** A redeploy: the version moves on when code or secrets change. */
    const update = (current: FunctionRow, patch: {
      readonly name?: string
      readonly code?: string
      readonly secrets?: Readonly<Record<string, string | null>>
    }) =>
      Effect.gen(function*() {
        let secrets: Record<string, string> | undefined
        if (patch.secrets !== undefined) {
          const now = yield* openSecrets(current)
          secrets = { ...now }
          for (const [k, v] of Object.entries(patch.secrets)) {
            if (v === null) delete secrets[k]
            else secrets[k] = v
          }
        }
        const redeploy = patch.code !== undefined || patch.secrets !== undefined
        const sealed = secrets === undefined ? current.secrets_sealed : yield* sealSecrets(current.id, secrets)
        const names = secrets === undefined ? [...current.secret_names] : Object.keys(secrets).sort()
        const code = patch.code ?? current.code
        yield* catchUnique(
          sql`UPDATE functions SET name = ${patch.name ?? current.name}, code = ${code}, code_sha256 = ${sha256(code)},
              code_size_bytes = ${Buffer.byteLength(code, "utf8")}, secret_names = ${JSON.stringify(names)}::jsonb,
              secrets_sealed = ${sealed}, version = version + ${redeploy ? 1 : 0},
              deployed_at = CASE WHEN ${redeploy} THEN now() ELSE deployed_at END, updated_at = now()
            WHERE id = ${current.id}`,
          nameTaken
        )
        return (yield* find(current.org_id, current.id)).pipe(Option.getOrThrow)
      })

    /** Deletes the function (its memories and invocations go with it), deactivates its endpoint, drops its routes. */
    const remove = (orgId: string, id: string) =>
      sql.withTransaction(Effect.gen(function*() {
        const found = yield* sql`${sql.literal(SELECT_FUNCTION)} WHERE f.id = ${id} AND f.org_id = ${orgId}`.pipe(
          firstRow(FunctionRow, "function to delete")
        )
        if (Option.isNone(found)) return found
        const endpoints = yield* sql`UPDATE endpoints SET deactivated_at = now(), updated_at = now()
          WHERE org_id = ${orgId} AND function_id = ${id} AND deactivated_at IS NULL RETURNING id`.pipe(
          allRows(Id, "function endpoints deactivated")
        )
        if (endpoints.length > 0) yield* sql`DELETE FROM routes WHERE endpoint_id IN ${sql.in(endpoints.map((e) => e.id))}`
        yield* sql`UPDATE function_tokens SET revoked_at = now() WHERE function_id = ${id} AND revoked_at IS NULL`
        yield* sql`DELETE FROM functions WHERE id = ${id}`
        return found
      })).pipe(Effect.orDie)

    const recordInvocation = (i: Omit<InvocationRow, "id" | "created_at">) =>
      sql`INSERT INTO function_invocations (org_id, function_id, function_version, delivery_id, event_id, event,
          status, status_code, duration_ms, logs, error, started_at, created_at)
        SELECT ${i.org_id}, ${i.function_id}, ${i.function_version}, ${i.delivery_id}, ${i.event_id}, ${i.event}, ${i.status},
          ${i.status_code}, ${i.duration_ms}, ${i.logs}, ${i.error}, ${i.started_at}, ${i.started_at}
        WHERE EXISTS (SELECT 1 FROM functions WHERE id = ${i.function_id})
        RETURNING *`.pipe(firstRow(InvocationRow, "invocation insert"), Effect.orDie)

    const invocations = (functionId: string, limit: number, after: Position | undefined) =>
      pageWithTotal<{ readonly id: string }>(sql, "function_invocations", sql`function_id = ${functionId}`, limit, after).pipe(
        pageRows(InvocationRow, "invocation page"),
        Effect.orDie
      )

    /** A credential for one invocation's MAILROOM binding: valid until `expiresAt`, stored as a hash. */
    const issueToken = (orgId: string, functionId: string, tokenHash: string, expiresAt: Date) =>
      sql`INSERT INTO function_tokens (org_id, function_id, token_hash, expires_at)
        VALUES (${orgId}, ${functionId}, ${tokenHash}, ${expiresAt}) RETURNING id`.pipe(
        allRows(Id, "function token insert"),
        Effect.map((rows) => rows[0]!.id),
        Effect.orDie
      )

    const revokeToken = (id: string) =>
      sql`UPDATE function_tokens SET revoked_at = now() WHERE id = ${id}`.pipe(Effect.asVoid, Effect.orDie)

    return { find, insert, list, update, remove, openSecrets, recordInvocation, invocations, issueToken, revokeToken } as const
  }),
  dependencies: [ServiceKey.Default]
}) {}
