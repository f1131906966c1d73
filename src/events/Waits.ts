/**
 * SQL of `GET /events/wait-for-email`: the first accepted, received email after a point in time that
 * matches the filter, with its content. Read again on every wake-up while the caller waits, so the
 * statement is built once per request and re-run as is.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import type { Principal } from "../contract/Security.js"
import { EmailWithContent } from "../emails/Repo.js"
import { scoped } from "../platform/InboxLimit.js"
import { decodeRows } from "../platform/Rows.js"

export type WaitedEmail = EmailWithContent

export interface EmailWaitFilter {
  readonly after: Date
  /** An address, or `@domain` for any sender of the domain. */
  readonly from?: string | undefined
  readonly subjectContains?: string | undefined
  readonly recipient?: string | undefined
}

const escapeLike = (s: string) => s.replace(/[\\%_]/g, (c) => `\\${c}`)

export class EmailWaits extends Effect.Service<EmailWaits>()("mailroom/EmailWaits", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    /** The statement taking the first match (at most one row); run it again to look again. */
    const firstMatch = (principal: Principal, f: EmailWaitFilter) => {
      const conds = [
        scoped(sql, principal, "e"),
        sql`e.status = 'accepted'`,
        sql`e.event_type = 'email.received'`,
        sql`e.received_at > ${f.after}`
      ]
      const from = f.from?.toLowerCase()
      if (from !== undefined) {
        conds.push(from.startsWith("@") ? sql`lower(e.from_address) LIKE ${"%" + escapeLike(from)}` : sql`lower(e.from_address) = ${from}`)
      }
      if (f.subjectContains !== undefined) conds.push(sql`e.subject ILIKE ${`%${escapeLike(f.subjectContains)}%`}`)
      if (f.recipient !== undefined) conds.push(sql`lower(e.recipient) = ${f.recipient.toLowerCase()}`)
      return sql`
        SELECT e.*, c.text_body, c.html_body, c.extracted_text FROM emails e LEFT JOIN email_contents c ON c.email_id = e.id
        WHERE ${sql.and(conds)} ORDER BY e.received_at, e.id LIMIT 1`.pipe(
        Effect.orDie,
        Effect.flatMap(decodeRows(EmailWithContent, "email wait"))
      )
    }

    return { firstMatch } as const
  })
}) {}
