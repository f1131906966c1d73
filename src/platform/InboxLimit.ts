/**
 * Whose mail a query may show: an organization's, narrowed to some of its inboxes when the caller
 * is an API key limited to them. Repositories take an `OrgScope` where they took an organization
 * id, so a limited key's reads are narrowed in their SQL (a plain id, as background work passes,
 * is the whole organization).
 */
import type { SqlClient, Statement } from "@effect/sql"
import { Effect } from "effect"
import { Forbidden } from "../contract/Errors.js"
import type { Principal } from "../contract/Security.js"

export type OrgScope = string | Pick<Principal, "orgId" | "inboxIds">

export const orgOf = (s: OrgScope): string => typeof s === "string" ? s : s.orgId

/** The inboxes the scope is limited to; undefined when it is not limited. */
export const inboxesOf = (s: OrgScope): ReadonlyArray<string> | undefined =>
  typeof s === "string" || s.inboxIds === undefined || s.inboxIds === null ? undefined : s.inboxIds

/**
 * `org_id = … AND inbox_id IN (…)` on a table (`alias` its name in the query). Mail without an
 * inbox (to or from a domain address) is outside every limit.
 */
export const scoped = (sql: SqlClient.SqlClient, s: OrgScope, alias?: string): Statement.Fragment => {
  const p = alias === undefined ? "" : `${alias}.`
  return sql.and([sql`${sql.literal(`${p}org_id`)} = ${orgOf(s)}`, inboxCondition(sql, s, `${p}inbox_id`)])
}

/** `column IN (…)` for a limited scope, `true` otherwise. */
export const inboxCondition = (sql: SqlClient.SqlClient, s: OrgScope, column: string): Statement.Fragment => {
  const ids = inboxesOf(s)
  if (ids === undefined) return sql`true`
  if (ids.length === 0) return sql`false`
  return sql`${sql.literal(column)} IN ${sql.in(ids)}`
}

/**
 * 403 for a key limited to inboxes on what shows the whole organization's events (the event
 * stream, listen sessions): their events are not all tied to an inbox, so none could be shown
 * safely by inbox yet.
 */
export const requireWholeOrganization = (s: OrgScope, what: string): Effect.Effect<void, Forbidden> =>
  inboxesOf(s) === undefined
    ? Effect.void
    : Effect.fail(
      new Forbidden({
        message: `${what} shows every inbox's events: a key limited to inboxes cannot read it ` +
          "(use GET /v1/emails/wait, or a key without inbox_ids)",
        details: { inbox_ids: inboxesOf(s) ?? [] }
      })
    )
