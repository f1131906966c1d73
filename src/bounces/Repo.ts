/**
 * SQL of outbound outcomes: the suppression list and the bounce or complaint recorded on a sent
 * email. Suppression rows are decoded; sent-email rows are the sending area's (its `SentRow`).
 */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"
import type { Position } from "../contract/Paging.js"
import { pageWithTotal } from "../platform/Listing.js"
import { decodeFirst, decodeRows, Enum, orDieRows, pageRows, Timestamp } from "../platform/Rows.js"
import { SentRow } from "../sending/SentRows.js"

export const SuppressionRow = Schema.Struct({
  id: Schema.String,
  org_id: Schema.String,
  address: Schema.String,
  reason: Enum("hard_bounce", "complaint"),
  sent_email_id: Schema.NullOr(Schema.String),
  status: Schema.NullOr(Schema.String),
  diagnostic: Schema.NullOr(Schema.String),
  created_at: Timestamp
})
export type SuppressionRow = typeof SuppressionRow.Type

const Address = Schema.Struct({ address: Schema.String })

export interface BounceRecord {
  readonly type: "hard" | "soft" | "complaint"
  readonly status: string | null
  readonly diagnostic: string | null
  readonly received_at: string
  readonly recipient: string | null
}

export class SuppressionsRepo extends Effect.Service<SuppressionsRepo>()("mailroom/SuppressionsRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    /** Which of `addresses` (lower case) the organization suppresses. */
    const suppressedAmong = (orgId: string, addresses: ReadonlyArray<string>) =>
      addresses.length === 0 ? Effect.succeed(new Set<string>()) : sql`
        SELECT address FROM suppressions WHERE org_id = ${orgId} AND address IN ${sql.in([...new Set(addresses)])}`.pipe(
        Effect.flatMap(decodeRows(Address, "suppressed addresses")),
        Effect.map((rows) => new Set(rows.map((r) => r.address))),
        orDieRows("suppressed addresses")
      )

    /** `suppressedAmong` as a scalar subquery (a `json` array) for a statement that reads it beside other things. */
    const suppressedColumn = (orgId: string, addresses: ReadonlyArray<string>) =>
      sql`coalesce((SELECT json_agg(s.address) FROM suppressions s
            WHERE s.org_id = ${orgId} AND s.address = ANY (${[...new Set(addresses)]}::text[])), '[]'::json)`

    const list = (orgId: string, limit: number, after: Position | undefined) =>
      pageWithTotal(sql, "suppressions", sql`org_id = ${orgId}`, limit, after).pipe(
        pageRows(SuppressionRow, "suppression page"),
        Effect.orDie
      )

    const remove = (orgId: string, address: string) =>
      sql`DELETE FROM suppressions WHERE org_id = ${orgId} AND address = ${address} RETURNING *`.pipe(
        Effect.orDie,
        Effect.flatMap(decodeFirst(SuppressionRow, "suppression remove"))
      )

    /** Adds the address (kept as first suppressed when it is there already). */
    const suppress = (s: {
      readonly orgId: string
      readonly address: string
      readonly reason: SuppressionRow["reason"]
      readonly sentEmailId: string
      readonly status: string | null
      readonly diagnostic: string | null
    }) =>
      sql`INSERT INTO suppressions (org_id, address, reason, sent_email_id, status, diagnostic)
          VALUES (${s.orgId}, ${s.address}, ${s.reason}, ${s.sentEmailId}, ${s.status}, ${s.diagnostic})
          ON CONFLICT (org_id, address) DO NOTHING`.pipe(Effect.asVoid, Effect.orDie)

    /** A sent email of any organization (a VERP token names it; the token proved it). */
    const sentEmail = (id: string) =>
      sql`SELECT * FROM sent_emails WHERE id = ${id}`.pipe(Effect.orDie, Effect.flatMap(decodeFirst(SentRow, "sent email by VERP id")))

    /**
     * Records a bounce or complaint on a relayed message; a complaint is never downgraded to a bounce.
     * None when the message was not relayed (nothing to report about).
     */
    const markOutcome = (id: string, status: "bounced" | "complained", bounce: BounceRecord) =>
      sql`
        UPDATE sent_emails SET
          status = CASE WHEN status = 'complained' THEN 'complained' ELSE ${status} END,
          bounce = CASE WHEN status = 'complained' AND ${status} = 'bounced' THEN bounce ELSE ${JSON.stringify(bounce)}::jsonb END,
          updated_at = now()
        WHERE id = ${id} AND status IN ('sent', 'bounced', 'complained') RETURNING *`.pipe(
        Effect.orDie,
        Effect.flatMap(decodeFirst(SentRow, "sent email outcome"))
      )

    return { suppressedAmong, suppressedColumn, list, remove, suppress, sentEmail, markOutcome } as const
  })
}) {}
