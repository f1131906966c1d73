/** SQL of the Domains area. Rows are decoded, so a renamed or retyped column fails loudly. */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"
import { Conflict } from "../contract/Errors.js"
import { type Position } from "../contract/Paging.js"
import { catchUnique } from "../platform/SqlErrors.js"
import { pageWithTotal } from "../platform/Listing.js"
import { allRows, decodeRows, firstRow, NullableTimestamp, pageRows, Timestamp } from "../platform/Rows.js"

/** A domain as stored; `spam_threshold` is `numeric`, which the drivers give as text. */
const DomainRow = Schema.Struct({
  id: Schema.String,
  org_id: Schema.String,
  domain: Schema.String,
  verification_token: Schema.String,
  verified_at: NullableTimestamp,
  mx_override: Schema.Boolean,
  is_active: Schema.Boolean,
  spam_threshold: Schema.NullOr(Schema.String),
  created_at: Timestamp,
  updated_at: Timestamp
})
export type DomainRow = typeof DomainRow.Type

/** The row a statement that always returns one gave. */
const one = (what: string) => (rows: ReadonlyArray<unknown>) => Effect.map(decodeRows(DomainRow, what)(rows), (r) => r[0]!)

/** Rows of "verified domain names". */
const VerifiedDomainNamesRow = Schema.Struct({ domain: Schema.String })

export class DomainsRepo extends Effect.Service<DomainsRepo>()("mailroom/DomainsRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const insert = (input: { orgId: string; domain: string; token: string; mxOverride: boolean }) =>
      catchUnique(
        sql`
          INSERT INTO domains (org_id, domain, verification_token, mx_override)
          VALUES (${input.orgId}, ${input.domain}, ${input.token}, ${input.mxOverride}) RETURNING *`,
        () => new Conflict({ message: `${input.domain} is already claimed by this organization` })
      ).pipe(Effect.flatMap(one("domain insert")))

    /** Another organization holds this domain verified. */
    const verifiedElsewhere = (orgId: string, domain: string) =>
      sql`SELECT id FROM domains WHERE domain = ${domain} AND verified_at IS NOT NULL AND org_id <> ${orgId}`
        .pipe(Effect.map((rows) => rows.length > 0), Effect.orDie)

    const find = (orgId: string, id: string) =>
      sql`SELECT * FROM domains WHERE id = ${id} AND org_id = ${orgId}`.pipe(firstRow(DomainRow, "domain find"), Effect.orDie)

    const list = (orgId: string, limit: number, after: Position | undefined) =>
      pageWithTotal<{ readonly id: string }>(sql, "domains", sql`org_id = ${orgId}`, limit, after).pipe(
        pageRows(DomainRow, "domain page"),
        Effect.orDie
      )

    const checked = (id: string, mxOverride: boolean) =>
      sql`UPDATE domains SET last_checked_at = now(), mx_override = mx_override OR ${mxOverride},
          updated_at = now() WHERE id = ${id} RETURNING *`.pipe(Effect.orDie, Effect.flatMap(one("domain checked")))

    const markVerified = (id: string, domain: string, mxOverride: boolean) =>
      catchUnique(
        sql`UPDATE domains SET verified_at = now(), last_checked_at = now(),
            mx_override = mx_override OR ${mxOverride}, updated_at = now()
          WHERE id = ${id} RETURNING *`,
        () => new Conflict({ message: `${domain} is already verified by another organization` })
      ).pipe(Effect.flatMap(one("domain verify")))

    const update = (id: string, patch: { readonly is_active?: boolean; readonly spam_threshold?: number | null }) =>
      sql`
        UPDATE domains SET
          is_active = coalesce(${patch.is_active ?? null}::boolean, is_active),
          spam_threshold = CASE WHEN ${"spam_threshold" in patch} THEN ${patch.spam_threshold ?? null}::numeric
                                ELSE spam_threshold END,
          updated_at = now()
        WHERE id = ${id} RETURNING *`.pipe(Effect.orDie, Effect.flatMap(one("domain update")))

    /** Deletes the domain; its endpoints are deactivated first so none slides into the fallback slot. */
    const remove = (orgId: string, id: string) =>
      sql.withTransaction(Effect.gen(function*() {
        yield* sql`UPDATE endpoints SET deactivated_at = now(), updated_at = now()
                   WHERE org_id = ${orgId} AND domain_id = ${id} AND deactivated_at IS NULL`
        return yield* sql`DELETE FROM domains WHERE id = ${id} AND org_id = ${orgId} RETURNING *`.pipe(
          firstRow(DomainRow, "domain delete")
        )
      })).pipe(Effect.orDie)

    /** Verified domain names of the organization. */
    const verifiedNames = (orgId: string) =>
      sql`SELECT domain FROM domains WHERE org_id = ${orgId} AND verified_at IS NOT NULL`.pipe(
        allRows(VerifiedDomainNamesRow, "verified domain names"),
        Effect.map((rows) => rows.map((r) => r.domain)),
        Effect.orDie
      )

    /** The verified domain row for a name, whoever holds it (inbound routing). */
    const findVerifiedByName = (domain: string) =>
      sql`SELECT * FROM domains WHERE domain = ${domain} AND verified_at IS NOT NULL`.pipe(
        firstRow(DomainRow, "verified domain by name"),
        Effect.orDie
      )

    return { insert, verifiedElsewhere, find, list, checked, markVerified, update, remove, verifiedNames, findVerifiedByName } as const
  })
}) {}
