/**
 * The port through which the send path reports what became of a send and asks which recipients
 * are suppressed. Both are the bounce area's (its events and its suppression list), which sits above
 * sending because it reads sent emails: bounces implement the port (src/bounces/SendOutcomes.ts) and
 * the composition root (src/Server.ts) wires it.
 */
import type { Statement } from "@effect/sql"
import { Context, type Effect } from "effect"
import type { SentRow } from "./SentRows.js"

export class SendOutcomes extends Context.Tag("mailroom/SendOutcomes")<SendOutcomes, {
  /**
   * `email.sent` (the relay took the message) as CTEs to embed in the statement that records the send as sent (one round trip,
   * one transaction): emitted when that statement's CTE `guard` yields a row. `row` is the sent
   * email as the statement leaves it.
   */
  readonly sentWithin: (row: SentRow, relayResponse: string | null, guard: string) => Effect.Effect<ReadonlyArray<Statement.Fragment>>
  /** `email.delivery_delayed` from the relay: a temporary failure, tried again at `retryAt`. */
  readonly relayDelayed: (row: SentRow, smtpCode: number | null, diagnostic: string, retryAt: Date) => Effect.Effect<void>
  /**
   * Which of these (lower-case) addresses the organization's suppression list holds, as a scalar
   * subquery (a `json` array of addresses) read inside the send path's own statement.
   */
  readonly suppressedColumn: (orgId: string, addresses: ReadonlyArray<string>) => Statement.Fragment
}>() {}
