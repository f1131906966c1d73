/**
 * Resolves a bearer credential to its principal: organization, role and credential id.
 * API keys always act as `member`; an OAuth access token acts with its user's current role.
 *
 * Resolved principals are kept for a few seconds (CREDENTIAL_CACHE_TTL_MS) so that an ordinary
 * authenticated request does not look its credential up again. Whatever ends or narrows a
 * credential drops the entries it concerns: this process's own revocations at once (`forgetGrant`,
 * `forgetApiKey`), and, on PostgreSQL, every change to api_keys, oauth_grants or memberships made by
 * any process, announced by trigger on the `mailroom_credentials` channel (migration 0035) and
 * received here by LISTEN within milliseconds. If that connection drops, the cache is emptied
 * and the entries' short life bounds what could have been missed.
 */
import { type Statement, SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { Clock, Effect, Option, Schedule, Stream } from "effect"
import { DatabaseKind } from "./Database.js"
import type { Principal, Role, Scope } from "../contract/Security.js"
import { PREFIX, sha256Hex } from "./Secrets.js"

export interface PrincipalRow {
  readonly id: string
  readonly org_id: string
  readonly role: Role
  readonly user_id: string | null
  readonly client_id: string | null
  /** When the credential itself expires (access tokens); null when it does not. */
  readonly expires_at: Date | null
  /** A scoped API key's scopes, space-separated; null for a credential with every scope. */
  readonly scopes: string | null
  /** The inboxes an API key is limited to, space-separated; null when it is not limited. */
  readonly inbox_ids: string | null
}

export interface PrincipalLookup {
  readonly kind: "api_key" | "oauth" | "function"
  /** A SELECT of `PrincipalRow` columns: one row for a live credential, none otherwise. */
  readonly select: Statement.Fragment
}

/**
 * The lookup for a token, or undefined when the token cannot be a credential. A fragment, so the
 * request pipeline can run it inside the statement that also counts the request (Admission).
 */
export const principalLookup = (sql: SqlClient.SqlClient, token: string, now: Date): PrincipalLookup | undefined => {
  if (token.length < 10 || token.length > 200) return undefined
  const hash = sha256Hex(token)
  if (token.startsWith(PREFIX.apiKey)) {
    return {
      kind: "api_key",
      select: sql`SELECT id, org_id, 'member'::text AS role, NULL::uuid AS user_id, NULL::text AS client_id,
                         NULL::timestamptz AS expires_at, array_to_string(scopes, ' ') AS scopes,
                         array_to_string(inbox_ids::text[], ' ') AS inbox_ids
                  FROM api_keys WHERE key_hash = ${hash} AND revoked_at IS NULL`
    }
  }
  if (token.startsWith(PREFIX.accessToken)) {
    return {
      kind: "oauth",
      select: sql`SELECT g.id, g.org_id, m.role, g.user_id, g.client_id, g.access_expires_at AS expires_at,
                         NULL::text AS scopes, NULL::text AS inbox_ids
                  FROM oauth_grants g
                  JOIN memberships m ON m.org_id = g.org_id AND m.user_id = g.user_id
                  WHERE g.access_token_hash = ${hash} AND g.revoked_at IS NULL AND g.access_expires_at > ${now}`
    }
  }
  if (token.startsWith(PREFIX.functionToken)) {
    // A running function invocation's MAILROOM binding: valid until its deadline, revoked at its end.
    // `client_id` carries the function's id.
    return {
      kind: "function",
      select: sql`SELECT id, org_id, 'member'::text AS role, NULL::uuid AS user_id, function_id::text AS client_id,
                         expires_at, NULL::text AS scopes, NULL::text AS inbox_ids
                  FROM function_tokens WHERE token_hash = ${hash} AND revoked_at IS NULL AND expires_at > ${now}`
    }
  }
  return undefined
}

const words = (s: string | null): ReadonlyArray<string> | null => s === null ? null : s.split(" ").filter((w) => w !== "")

/** A key's scopes and inbox limit as the principal carries them; `admin` alone is no limit at all. */
const keyLimits = (row: PrincipalRow): Pick<Principal, "scopes" | "inboxIds"> => {
  const scopes = words(row.scopes) as ReadonlyArray<Scope> | null
  const inboxIds = words(row.inbox_ids)
  return {
    ...(scopes !== null && !scopes.includes("admin") ? { scopes } : {}),
    ...(inboxIds !== null ? { inboxIds } : {})
  }
}

export const toPrincipal = (kind: PrincipalLookup["kind"], row: PrincipalRow): Principal =>
  kind === "api_key"
    ? { orgId: row.org_id, role: "member", userId: null, credential: { kind: "api_key", id: row.id }, ...keyLimits(row) }
    : kind === "function"
    ? {
      orgId: row.org_id,
      role: "member",
      userId: null,
      credential: { kind: "api_key", id: row.id },
      automation: { functionId: row.client_id ?? "" }
    }
    : { orgId: row.org_id, role: row.role, userId: row.user_id, credential: { kind: "oauth", id: row.id, clientId: row.client_id ?? "" } }

/** How long a resolved principal is reused without looking its credential up again. */
export const CREDENTIAL_CACHE_TTL_MS = 5_000
const CACHE_MAX_ENTRIES = 10_000
/** How stale an API key's `last_used_at` may be. */
export const TOUCH_INTERVAL_MS = 60_000
export const CREDENTIALS_CHANNEL = "mailroom_credentials"

interface Entry {
  readonly principal: Principal
  readonly until: number
}

export class Credentials extends Effect.Service<Credentials>()("mailroom/Credentials", {
  scoped: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    // Keyed by the token's hash: the cache holds no secret.
    const cache = new Map<string, Entry>()

    const forgetWhere = (drop: (p: Principal) => boolean) => {
      for (const [hash, entry] of cache) if (drop(entry.principal)) cache.delete(hash)
    }
    const forgetGrant = (grantId: string) =>
      Effect.sync(() => forgetWhere((p) => p.credential.kind === "oauth" && p.credential.id === grantId))
    const forgetApiKey = (keyId: string) =>
      Effect.sync(() => forgetWhere((p) => p.credential.kind === "api_key" && p.credential.id === keyId))

    /** Applies one `mailroom_credentials` payload. */
    const onChange = (payload: string) => {
      const [kind, a, b] = payload.split(":")
      if (kind === "api_key") forgetWhere((p) => p.credential.kind === "api_key" && p.credential.id === a)
      else if (kind === "oauth") forgetWhere((p) => p.credential.kind === "oauth" && p.credential.id === a)
      else if (kind === "member") forgetWhere((p) => p.orgId === a && p.userId === b)
      else cache.clear()
    }

    const kind = yield* Effect.serviceOption(DatabaseKind)
    const pg = yield* Effect.serviceOption(PgClient.PgClient)
    // The embedded database has one connection and one process: revocations there are this
    // process's own, forgotten directly.
    if (Option.isSome(pg) && Option.isSome(kind) && !kind.value.embedded) {
      yield* Effect.suspend(() => {
        // Whatever changed while nobody listened is unknown: start empty.
        cache.clear()
        return pg.value.listen(CREDENTIALS_CHANNEL).pipe(Stream.runForEach((payload) => Effect.sync(() => onChange(payload))))
      }).pipe(
        Effect.ensuring(Effect.sync(() => cache.clear())),
        Effect.retry(Schedule.spaced("1 second")),
        Effect.catchAllCause((cause) => Effect.logWarning("credential LISTEN stopped; cache entries expire on their own", cause)),
        Effect.forkScoped
      )
    }

    /** The principal of a token resolved within the last few seconds and not revoked since. */
    const cached = (token: string, now: number): Option.Option<Principal> => {
      const hash = sha256Hex(token)
      const entry = cache.get(hash)
      if (entry === undefined) return Option.none()
      if (entry.until <= now) {
        cache.delete(hash)
        return Option.none()
      }
      return Option.some(entry.principal)
    }

    /** Keeps a principal just resolved from the database (never past its credential's own expiry). */
    const remember = (token: string, principal: Principal, expiresAt: Date | null, now: number) => {
      const until = Math.min(now + CREDENTIAL_CACHE_TTL_MS, expiresAt === null ? Infinity : expiresAt.getTime())
      if (until <= now) return
      // Oldest first: Map keeps insertion order.
      if (cache.size >= CACHE_MAX_ENTRIES) cache.delete(cache.keys().next().value!)
      cache.set(sha256Hex(token), { principal, until })
    }

    const resolve = (token: string): Effect.Effect<Option.Option<Principal>> =>
      Effect.gen(function*() {
        const lookup = principalLookup(sql, token, new Date(yield* Clock.currentTimeMillis))
        if (lookup === undefined) return Option.none()
        const rows = yield* sql<PrincipalRow>`${lookup.select}`
        return Option.map(Option.fromNullable(rows[0]), (row) => toPrincipal(lookup.kind, row))
      }).pipe(Effect.orDie)

    // When this process last wrote each key's last_used_at: at most one write a minute per key.
    const touched = new Map<string, number>()
    /** Records that an API key was used (`last_used_at`), cheaply: once a minute per key. */
    const touch = (p: Principal): Effect.Effect<void> =>
      Effect.gen(function*() {
        if (p.credential.kind !== "api_key" || p.automation !== undefined) return
        const id = p.credential.id
        const now = yield* Clock.currentTimeMillis
        if ((touched.get(id) ?? 0) > now - TOUCH_INTERVAL_MS) return
        if (touched.size >= CACHE_MAX_ENTRIES) touched.clear()
        touched.set(id, now)
        yield* sql`UPDATE api_keys SET last_used_at = ${new Date(now)}
                   WHERE id = ${id} AND (last_used_at IS NULL OR last_used_at < ${new Date(now - TOUCH_INTERVAL_MS)})`
      }).pipe(Effect.catchAllCause((cause) => Effect.logWarning("last_used_at not recorded", cause)))

    return { resolve, cached, remember, forgetGrant, forgetApiKey, touch } as const
  })
}) {}
