/** SQL of the Domains area. */
import { SqlClient } from "@effect/sql"
import { Effect, Option } from "effect"
import { Conflict } from "../contract/Errors.js"
import { type Position } from "../contract/Paging.js"
import { catchUnique } from "../platform/SqlErrors.js"
import { pageWithTotal } from "../platform/Listing.js"

export interface DomainRow {
  readonly id: string
  readonly org_id: string
  readonly domain: string
  readonly verification_token: string
  readonly verified_at: Date | null
  readonly mx_override: boolean
  readonly is_active: boolean
  readonly spam_threshold: string | null
  readonly created_at: Date
  readonly updated_at: Date
}

export class DomainsRepo extends Effect.Service<DomainsRepo>()("mailroom/DomainsRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const insert = (input: { orgId: string; domain: string; token: string; mxOverride: boolean }) =>
      catchUnique(
        sql<DomainRow>`
          INSERT INTO domains (org_id, domain, verification_token, mx_override)
          VALUES (${input.orgId}, ${input.domain}, ${input.token}, ${input.mxOverride}) RETURNING *`,
        () => new Conflict({ message: `${input.domain} is already claimed by this organization` })
      ).pipe(Effect.map((rows) => rows[0]!))

    /** Another organization holds this domain verified. */
    const verifiedElsewhere = (orgId: string, domain: string) =>
      sql<{ id: string }>`SELECT id FROM domains WHERE domain = ${domain} AND verified_at IS NOT NULL AND org_id <> ${orgId}`
        .pipe(Effect.map((rows) => rows.length > 0), Effect.orDie)

    const find = (orgId: string, id: string) =>
      sql<DomainRow>`SELECT * FROM domains WHERE id = ${id} AND org_id = ${orgId}`.pipe(
        Effect.map((rows) => Option.fromNullable(rows[0])),
        Effect.orDie
      )

    const list = (orgId: string, limit: number, after: Position | undefined) =>
      pageWithTotal<DomainRow>(sql, "domains", sql`org_id = ${orgId}`, limit, after).pipe(Effect.orDie)

    const checked = (id: string, mxOverride: boolean) =>
      sql<DomainRow>`UPDATE domains SET last_checked_at = now(), mx_override = mx_override OR ${mxOverride},
          updated_at = now() WHERE id = ${id} RETURNING *`.pipe(Effect.map((rows) => rows[0]!), Effect.orDie)

    const markVerified = (id: string, domain: string, mxOverride: boolean) =>
      catchUnique(
        sql<DomainRow>`UPDATE domains SET verified_at = now(), last_checked_at = now(),
            mx_override = mx_override OR ${mxOverride}, updated_at = now()
          WHERE id = ${id} RETURNING *`,
        () => new Conflict({ message: `${domain} is already verified by another organization` })
      ).pipe(Effect.map((rows) => rows[0]!))

    const update = (id: string, patch: { readonly is_active?: boolean; readonly spam_threshold?: number | null }) =>
      sql<DomainRow>`
        UPDATE domains SET
          is_active = coalesce(${patch.is_active ?? null}::boolean, is_active),
          spam_threshold = CASE WHEN ${"spam_threshold" in patch} THEN ${patch.spam_threshold ?? null}::numeric
                                ELSE spam_threshold END,
          updated_at = now()
        WHERE id = ${id} RETURNING *`.pipe(Effect.map((rows) => rows[0]!), Effect.orDie)

    /** Deletes the domain; its endpoints are deactivated first so none slides into the fallback slot. */
    const remove = (orgId: string, id: string) =>
      sql.withTransaction(Effect.gen(function*() {
        yield* sql`UPDATE endpoints SET deactivated_at = now(), updated_at = now()
                   WHERE org_id = ${orgId} AND domain_id = ${id} AND deactivated_at IS NULL`
        const rows = yield* sql<DomainRow>`DELETE FROM domains WHERE id = ${id} AND org_id = ${orgId} RETURNING *`
        return Option.fromNullable(rows[0])
      })).pipe(Effect.orDie)

    /** Verified domain names of the organization. */
    const verifiedNames = (orgId: string) =>
      sql<{ domain: string }>`SELECT domain FROM domains WHERE org_id = ${orgId} AND verified_at IS NOT NULL`.pipe(
        Effect.map((rows) => rows.map((r) => r.domain)),
        Effect.orDie
      )

    /** The verified domain row for a name, whoever holds it (inbound routing). */
    const findVerifiedByName = (domain: string) =>
      sql<DomainRow>`SELECT * FROM domains WHERE domain = ${domain} AND verified_at IS NOT NULL`.pipe(
        Effect.map((rows) => Option.fromNullable(rows[0])),
        Effect.orDie
      )

    return { insert, verifiedElsewhere, find, list, checked, markVerified, update, remove, verifiedNames, findVerifiedByName } as const
  })
}) {}
