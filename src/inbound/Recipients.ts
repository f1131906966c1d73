/**
 * Which recipient addresses Mailroom serves (managed inbox addresses with their `+tag` forms, and
 * addresses on verified, active domains), with the spam threshold, filters and destination that
 * apply to each. Ownership and routing are the route resolver's, decided in one query at RCPT
 * time, so RCPT acceptance and routing can never disagree and the storing statement needs no lookup.
 */
import { Effect, Option } from "effect"
import type { FilterLike } from "../filters/Evaluate.js"
import { type OrgFacts, type Resolution, RouteResolver, type WakeTarget } from "../routes/Resolver.js"

export interface Recipient {
  readonly address: string
  readonly orgId: string
  readonly domainId: string | null
  /** The domain's threshold where set (paid plans), else the account's; null disables. */
  readonly spamThreshold: number | null
  readonly filters: ReadonlyArray<FilterLike>
  readonly resolution: Resolution
  /** Set for a function's wake address: mail to it carries a command for that function. */
  readonly wake: WakeTarget | null
  /** The inbox the address belongs to (managed domain); null at a domain or a wake address. */
  readonly inboxId: string | null
  /** The organization's storage use and attachment policy, read with the recipient at RCPT time. */
  readonly org: OrgFacts
}

/** Facts of an organization nothing is known about (no quota to check, no policy). */
export const UNKNOWN_ORG: OrgFacts = { usedBytes: 0, quotaBytes: null, attachmentPolicy: null }

export const normalizeAddress = (address: string) => address.trim().toLowerCase()

/** The mailbox of an address: its `+tag` (RFC 5233 subaddress) removed. */
export const mailboxOf = (address: string) => {
  const at = address.lastIndexOf("@")
  const plus = address.indexOf("+")
  return plus > 0 && plus < at ? address.slice(0, plus) + address.slice(at) : address
}

/**
 * What makes two recipients of one SMTP transaction one copy: the same organization, mailbox and
 * destination. Case and `+tag` variants that end at the same endpoint (or at none) are stored and
 * delivered once, so a sender cannot multiply one message by repeating RCPT; a tagged address that
 * a route sends elsewhere still gets its own copy there.
 */
export const copyKey = (r: Recipient) =>
  `${r.orgId} ${mailboxOf(r.address)} ${Option.match(r.resolution.endpoint, { onNone: () => "-", onSome: (e) => e.id })}`

export class Recipients extends Effect.Service<Recipients>()("mailroom/Recipients", {
  effect: Effect.gen(function*() {
    const resolver = yield* RouteResolver

    const lookup = (raw: string): Effect.Effect<Option.Option<Recipient>> => {
      const address = normalizeAddress(raw)
      return resolver.lookup(address).pipe(
        Effect.map(Option.map((f): Recipient => ({
          address,
          orgId: f.resolution.orgId,
          domainId: f.resolution.domainId,
          spamThreshold: f.spamThreshold,
          filters: f.filters,
          resolution: f.resolution,
          wake: f.wake,
          inboxId: f.inboxId,
          org: f.org
        }))),
        Effect.withSpan("Recipients.lookup")
      )
    }

    return { lookup } as const
  })
}) {}
