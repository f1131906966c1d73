/**
 * The inbound SMTP side of VERP: a recipient of the form `bounces+<token>@<managed domain>` is a
 * return path, not a mailbox. A token that does not verify is refused at RCPT (`550 5.1.1`: nothing
 * matched, nothing stored). A verified one is accepted; at DATA the message is read as a DSN or ARF
 * report and applied to the sent email (src/bounces/Outcomes.ts). A message there that is not a
 * readable report is kept as ordinary mail in the sending organization's default inbox, so nothing
 * sent to a return path is silently lost.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import { allRows } from "../platform/Rows.js"
import { type Recipient, Recipients } from "./Recipients.js"
import { Outcomes } from "../bounces/Outcomes.js"
import { Verp } from "../mail/Verp.js"

export type RcptCheck =
  | { readonly _tag: "NotVerp" }
  | { readonly _tag: "Unknown" }
  | { readonly _tag: "Accepted"; readonly sentEmailId: string }

/** Rows of "organization inbox address". */
const OrganizationInboxAddressRow = Schema.Struct({ address: Schema.NullOr(Schema.String) })

export class BounceIntake extends Effect.Service<BounceIntake>()("mailroom/BounceIntake", {
  effect: Effect.gen(function*() {
    const verp = yield* Verp
    const outcomes = yield* Outcomes
    const recipients = yield* Recipients
    const sql = yield* SqlClient.SqlClient

    const rcpt = (address: string): RcptCheck => {
      if (!verp.isVerpAddress(address)) return { _tag: "NotVerp" }
      const id = verp.sentEmailOf(address)
      return id === undefined ? { _tag: "Unknown" } : { _tag: "Accepted", sentEmailId: id }
    }

    /** The default inbox of an organization as a recipient, where mail that is not a report is kept. */
    const inboxOf = (orgId: string) =>
      Effect.gen(function*() {
        const rows = yield* sql`SELECT managed_inbox_address AS address FROM organizations WHERE id = ${orgId}`.pipe(
          allRows(OrganizationInboxAddressRow, "organization inbox address")
        )
        const address = rows[0]?.address
        if (address === null || address === undefined) return Option.none<Recipient>()
        return yield* recipients.lookup(address)
      }).pipe(Effect.orDie)

    /**
     * Applies the message to each sent email it was returned for; answers the recipients it must
     * still be stored for as ordinary mail (the organization's inbox, for what is not a report).
     */
    const data = (raw: Buffer, sentEmailIds: ReadonlyArray<string>) =>
      Effect.gen(function*() {
        const keep: Array<Recipient> = []
        for (const id of new Set(sentEmailIds)) {
          const outcome = yield* outcomes.report(id, raw)
          if (outcome._tag === "Handled") {
            yield* Effect.logInfo(`report for sent email ${id}: ${outcome.events.join(", ") || "nothing to report"}`)
          } else if (outcome._tag === "Malformed") {
            yield* Effect.logInfo(`message at the return path of sent email ${id} is not a report (${outcome.reason}): kept as mail`)
            const inbox = yield* inboxOf(outcome.orgId)
            if (Option.isSome(inbox)) keep.push(inbox.value)
          }
        }
        return keep
      })

    return { rcpt, data } as const
  }),
  dependencies: [Verp.Default, Outcomes.Default]
}) {}
