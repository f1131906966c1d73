/**
 * Which addresses an organization can send from: its managed inbox address, its other inboxes, their
 * `+tag` forms, and every address at one of its verified domains. An entry's address must be one of these
 * for its publisher, when published and for as long as the entry is trusted (see `stillSendable`).
 */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"
import { CannotSendFromDomain } from "../contract/Errors.js"
import { allRows, JsonColumn, TextArray } from "../platform/Rows.js"

export interface SendableAddresses {
  readonly managed: string | null
  /** The organization's other inboxes on the managed domain (GET /inboxes), oldest first. */
  readonly inboxes?: ReadonlyArray<string>
  /** Verified domains, sorted. */
  readonly domains: ReadonlyArray<string>
}

const domainPart = (address: string) => address.slice(address.lastIndexOf("@") + 1)

/** `local+tag@domain` → `local@domain`; other addresses unchanged. */
export const baseAddress = (address: string) => {
  const at = address.lastIndexOf("@")
  const plus = address.indexOf("+")
  return plus > 0 && plus < at ? `${address.slice(0, plus)}${address.slice(at)}` : address
}

/** `address` is lowercased. */
export const canSendFrom = (s: SendableAddresses, address: string): boolean =>
  (s.managed !== null && (address === s.managed || baseAddress(address) === s.managed)) ||
  (s.inboxes ?? []).includes(baseAddress(address)) ||
  s.domains.includes(domainPart(address))

/** What `details.valid_senders` lists: the managed inbox address, the other inboxes, then the verified domains. */
export const validSenders = (s: SendableAddresses): ReadonlyArray<string> => [
  ...(s.managed === null ? [] : [s.managed]),
  ...(s.inboxes ?? []),
  ...s.domains
]

/**
 * The sender of a send that names none: the managed inbox address when the organization has no
 * verified domain (created inboxes do not change the default); otherwise `undefined`, and the caller must choose.
 */
export const onlySender = (s: SendableAddresses): string | undefined =>
  s.managed !== null && s.domains.length === 0 ? s.managed : undefined

/** `inboxes` and `domains` are `json` arrays, handed over parsed. */
const SendersRow = Schema.Struct({ managed: Schema.NullOr(Schema.String), inboxes: JsonColumn(TextArray), domains: JsonColumn(TextArray) })

/**
 * The select-list columns `managed`, `inboxes` and `domains` of the organization row `o`, for a
 * statement that reads them beside other things (the send path reads them with the rest of its
 * organization state in one statement); `sendableOf` turns them into SendableAddresses.
 */
export const sendableColumns = (sql: SqlClient.SqlClient) =>
  sql`o.managed_inbox_address AS managed,
        coalesce((SELECT json_agg(i.address ORDER BY i.created_at, i.id) FROM inboxes i
          WHERE i.org_id = o.id AND NOT i.is_default), '[]'::json) AS inboxes,
        coalesce((SELECT json_agg(d.domain ORDER BY d.domain) FROM domains d
          WHERE d.org_id = o.id AND d.verified_at IS NOT NULL), '[]'::json) AS domains`

/** The columns of `sendableColumns`, as decoded. */
export const SendableFields = SendersRow.fields

export const sendableOf = (row: typeof SendersRow.Type | undefined): SendableAddresses => ({
  managed: row?.managed ?? null,
  inboxes: row?.inboxes ?? [],
  domains: row?.domains ?? []
})

export const sendableAddresses = (orgId: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const rows = yield* sql`SELECT ${sendableColumns(sql)} FROM organizations o WHERE o.id = ${orgId}`.pipe(
      allRows(SendersRow, "sendable addresses"),
      Effect.orDie
    )
    return sendableOf(rows[0])
  })

/** Fails with 403 `cannot_send_from_domain` (listing `valid_senders`) unless the organization can send from `address`. */
export const requireSendable = (orgId: string, address: string) =>
  Effect.flatMap(sendableAddresses(orgId), (s) => {
    if (canSendFrom(s, address)) return Effect.void
    const valid = validSenders(s)
    return Effect.fail(
      new CannotSendFromDomain({
        message: `${address} is not an address this organization can send from: use one of its inbox addresses ` +
          `(or a +tag form) or an address at one of its verified domains (valid senders: ` +
          `${valid.length === 0 ? "none" : valid.join(", ")})`,
        details: { valid_senders: valid }
      })
    )
  })
