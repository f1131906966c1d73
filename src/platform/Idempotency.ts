/**
 * Idempotency records for POST requests, in PostgreSQL so every
 * process sees them.
 *
 * A request claims its (scope, method, path, key) row with an INSERT … ON CONFLICT DO NOTHING; the
 * winner runs, the others see the row: same body and finished → replay; same body and still
 * running → 409; other body → 409. A run that crashed leaves a row whose `locked_until` passes, and
 * the next retry takes it over instead of being refused forever.
 *
 * Stored results may carry credentials (an explicit key on a token-issuing call), and the database
 * holds no secret in clear: the row is addressed by a hash of the key and the response body is
 * sealed with AES-256-GCM under a key derived from the Idempotency-Key itself, which only the
 * client that chose it knows.
 */
import { HttpApi, type HttpApiGroup } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { Clock, Effect } from "effect"
import { createCipheriv, createDecipheriv, createHash, randomBytes } from "node:crypto"
import { ASYNC_COMMIT } from "./RateLimiter.js"

export const EXPLICIT_TTL_SECONDS = 24 * 3600
export const DERIVED_TTL_SECONDS = 60
/** How long a claimed, unfinished request blocks duplicates before it counts as crashed. */
export const IN_FLIGHT_LEASE_SECONDS = 120

/** Canonical JSON: object keys sorted recursively, no insignificant whitespace. */
export const canonicalJson = (value: unknown): string => {
  if (value === null || typeof value !== "object") return JSON.stringify(value) ?? "null"
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`
  const keys = Object.keys(value as Record<string, unknown>).sort()
  return `{${
    keys
      .filter((k) => (value as Record<string, unknown>)[k] !== undefined)
      .map((k) => `${JSON.stringify(k)}:${canonicalJson((value as Record<string, unknown>)[k])}`)
      .join(",")
  }}`
}

/** Hash of the request body: canonical JSON when it parses, else the raw bytes. */
export const bodyHash = (raw: string): string => {
  let canonical = raw
  if (raw.trim().length === 0) canonical = ""
  else {
    try {
      canonical = canonicalJson(JSON.parse(raw))
    } catch {
      canonical = `raw:${raw}`
    }
  }
  return createHash("sha256").update(canonical).digest("hex")
}

/** Whether a request's operation creates something: a POST whose declared success is 201. */
export type CreatesResource = (method: string, path: string) => boolean

/**
 * Reads the operations that create something off an API declaration. Only their requests get a key
 * derived from the body when the caller sends none: an action (a POST answering 200: replay, test,
 * rotate, verify, poll, logout, …) runs every time, since a second identical call is meant.
 */
export const creatingOperations = <Groups extends HttpApiGroup.HttpApiGroup.Any, E, R>(
  api: HttpApi.HttpApi<string, Groups, E, R>
): CreatesResource => {
  const patterns: Array<RegExp> = []
  HttpApi.reflect(api, {
    onGroup: () => undefined,
    onEndpoint: ({ endpoint, successes }) => {
      if (endpoint.method !== "POST" || !successes.has(201)) return
      const source = endpoint.path.split("/").map((segment) =>
        segment.startsWith(":") ? "[^/]+" : segment.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")
      ).join("/")
      patterns.push(new RegExp(`^${source}$`))
    }
  })
  return (method, path) => method === "POST" && patterns.some((p) => p.test(path))
}

export interface StoredResponse {
  readonly status: number
  readonly headers: Record<string, string>
  readonly body: Uint8Array
}

export type Claim =
  | { readonly _tag: "Claimed" }
  | { readonly _tag: "Replay"; readonly response: StoredResponse }
  | { readonly _tag: "InFlight" }
  | { readonly _tag: "Mismatch" }

export interface KeyRef {
  readonly scope: string
  readonly method: string
  readonly path: string
  readonly key: string
  readonly derived: boolean
  readonly bodyHash: string
}

const sealingKey = (ref: KeyRef) => createHash("sha256").update(`mailroom-idempotency\u0000${ref.scope}\u0000${ref.key}`).digest()
const rowKey = (ref: KeyRef) => createHash("sha256").update(`${ref.key}`).digest("hex")

const seal = (ref: KeyRef, plain: Uint8Array): Buffer => {
  const iv = randomBytes(12)
  const cipher = createCipheriv("aes-256-gcm", sealingKey(ref), iv)
  const body = Buffer.concat([cipher.update(plain), cipher.final()])
  return Buffer.concat([iv, cipher.getAuthTag(), body])
}

const open = (ref: KeyRef, sealed: Uint8Array): Uint8Array => {
  const buf = Buffer.from(sealed)
  const decipher = createDecipheriv("aes-256-gcm", sealingKey(ref), buf.subarray(0, 12))
  decipher.setAuthTag(buf.subarray(12, 28))
  return Buffer.concat([decipher.update(buf.subarray(28)), decipher.final()])
}

export class Idempotency extends Effect.Service<Idempotency>()("mailroom/Idempotency", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const claim = (ref: KeyRef): Effect.Effect<Claim> =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const ttl = ref.derived ? DERIVED_TTL_SECONDS : EXPLICIT_TTL_SECONDS
        // Take the row if it is new, expired, or a crashed run's; otherwise read it.
        // Asynchronous commit: the claim becomes durable with the handler's own (synchronous)
        // commit, which flushes the WAL up to and including it; a claim lost in a crash before
        // that guarded nothing that happened.
        const taken = yield* sql<{ key: string }>`
          WITH ${sql.unsafe(ASYNC_COMMIT)}
          INSERT INTO idempotency_keys AS k
            (scope, method, path, key, derived, body_hash, locked_until, expires_at)
          SELECT ${ref.scope}::text, ${ref.method}::text, ${ref.path}::text, ${rowKey(ref)}::text, ${ref.derived}::boolean,
                  ${ref.bodyHash}::text,
                  ${new Date(now + IN_FLIGHT_LEASE_SECONDS * 1000)}::timestamptz, ${new Date(now + ttl * 1000)}::timestamptz
          FROM async_commit
          ON CONFLICT (scope, method, path, key) DO UPDATE SET
            derived = EXCLUDED.derived, body_hash = EXCLUDED.body_hash, status = NULL,
            response_headers = NULL, response_body = NULL, locked_until = EXCLUDED.locked_until,
            expires_at = EXCLUDED.expires_at, created_at = now()
          WHERE k.expires_at <= ${new Date(now)}
             OR (k.status IS NULL AND k.locked_until <= ${new Date(now)})
          RETURNING key`
        if (taken.length > 0) return { _tag: "Claimed" } as const
        const rows = yield* sql<{
          body_hash: string
          status: number | null
          response_headers: Record<string, string> | null
          response_body: Uint8Array | null
        }>`SELECT body_hash, status, response_headers, response_body FROM idempotency_keys
           WHERE scope = ${ref.scope} AND method = ${ref.method} AND path = ${ref.path} AND key = ${rowKey(ref)}`
        const row = rows[0]
        // Deleted between our two statements (a non-storable result was just dropped): run again.
        if (!row) return yield* claim(ref)
        if (row.body_hash !== ref.bodyHash) return { _tag: "Mismatch" } as const
        if (row.status === null) return { _tag: "InFlight" } as const
        return {
          _tag: "Replay",
          response: {
            status: row.status,
            headers: row.response_headers ?? {},
            body: row.response_body === null ? new Uint8Array() : open(ref, row.response_body)
          }
        } as const
      }).pipe(Effect.orDie)

    const complete = (ref: KeyRef, response: StoredResponse) =>
      sql`UPDATE idempotency_keys SET status = ${response.status},
            response_headers = ${JSON.stringify(response.headers)}::jsonb, response_body = ${seal(ref, response.body)}
          WHERE scope = ${ref.scope} AND method = ${ref.method} AND path = ${ref.path} AND key = ${rowKey(ref)}`
        .pipe(Effect.asVoid, Effect.orDie)

    /** Forgets a claim whose result must not be replayed (validation errors, 429, 5xx, …). */
    const release = (ref: KeyRef) =>
      sql`DELETE FROM idempotency_keys
          WHERE scope = ${ref.scope} AND method = ${ref.method} AND path = ${ref.path} AND key = ${rowKey(ref)}
            AND status IS NULL`
        .pipe(Effect.asVoid, Effect.orDie)

    const sweep = Effect.flatMap(Clock.currentTimeMillis, (now) =>
      sql`DELETE FROM idempotency_keys WHERE expires_at < ${new Date(now)}`
    ).pipe(Effect.asVoid, Effect.orDie)

    return { claim, complete, release, sweep } as const
  })
}) {}
