/**
 * What an API key limited to inboxes sends as: only its inboxes' addresses (and their +tag forms,
 * which reach the same inbox). Its default sender is its first inbox, not the organization's
 * default, which it may not be allowed to use.
 */
import type { SqlClient } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import { Forbidden } from "../contract/Errors.js"
import type { Principal } from "../contract/Security.js"
import { inboxesOf } from "../platform/InboxLimit.js"
import { allRows } from "../platform/Rows.js"
import { parseMailbox } from "../mail/Addresses.js"

/** Rows of "inbox addresses of key". */
const InboxAddressesOfKeyRow = Schema.Struct({ id: Schema.String, address: Schema.String })

/** The addresses of the key's inboxes in the key's order; undefined for a caller with no inbox limit. */
const addressesOf = (sql: SqlClient.SqlClient, p: Principal) =>
  Effect.gen(function*() {
    const ids = inboxesOf(p)
    if (ids === undefined) return undefined
    if (ids.length === 0) return []
    const rows = yield* sql`
      SELECT id, address FROM inboxes WHERE org_id = ${p.orgId} AND id IN ${sql.in(ids)}`.pipe(
      allRows(InboxAddressesOfKeyRow, "inbox addresses of key"),
      Effect.orDie
    )
    return ids.flatMap((id) => rows.filter((r) => r.id === id).map((r) => r.address.toLowerCase()))
  })

/** `local+tag@domain` is `local@domain`'s. */
const base = (address: string) => {
  const at = address.lastIndexOf("@")
  const local = address.slice(0, at)
  const plus = local.indexOf("+")
  return plus < 0 ? address : `${local.slice(0, plus)}${address.slice(at)}`
}

const noInbox = (p: Principal) =>
  new Forbidden({
    message: "this API key is limited to inboxes that no longer exist: it cannot send",
    details: { inbox_ids: inboxesOf(p) ?? [], valid_senders: [] }
  })

/** `from` for a send that gives none: the key's first inbox; none for a caller without an inbox limit. */
export const limitedDefaultFrom = (sql: SqlClient.SqlClient, p: Principal) =>
  Effect.flatMap(addressesOf(sql, p), (addresses): Effect.Effect<Option.Option<string>, Forbidden> => {
    if (addresses === undefined) return Effect.succeedNone
    const first = addresses[0]
    return first === undefined ? Effect.fail(noInbox(p)) : Effect.succeedSome(first)
  })

/** 403 `forbidden` when a key limited to inboxes sends from an address that is none of them. */
export const checkInboxSender = (sql: SqlClient.SqlClient, p: Principal, from: string) =>
  Effect.flatMap(addressesOf(sql, p), (addresses): Effect.Effect<void, Forbidden> => {
    if (addresses === undefined) return Effect.void
    const mailbox = parseMailbox(from)
    // A malformed from is the send validation's 400.
    if (typeof mailbox === "string") return Effect.void
    if (addresses.includes(base(mailbox.address))) return Effect.void
    if (addresses.length === 0) return Effect.fail(noInbox(p))
    return Effect.fail(
      new Forbidden({
        message: `${mailbox.address} is not an inbox this API key may send as (its inboxes: ${addresses.join(", ")})`,
        details: { from: mailbox.address, inbox_ids: inboxesOf(p) ?? [], valid_senders: addresses }
      })
    )
  })
