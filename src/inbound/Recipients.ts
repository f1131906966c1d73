/**
 * Which recipient addresses Mailroom serves: managed inbox addresses and addresses on verified,
 * active domains. Anything else is refused at RCPT time.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Option } from "effect"

export interface Recipient {
  readonly address: string
  readonly orgId: string
  readonly domainId: string | null
  /** The domain's threshold where set (paid plans), else the account's; null disables. */
  readonly spamThreshold: number | null
}

export const normalizeAddress = (address: string) => address.trim().toLowerCase()

export class Recipients extends Effect.Service<Recipients>()("mailroom/Recipients", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const lookup = (raw: string): Effect.Effect<Option.Option<Recipient>> =>
      Effect.gen(function*() {
        const address = normalizeAddress(raw)
        const at = address.lastIndexOf("@")
        if (at <= 0 || at === address.length - 1) return Option.none()
        // `local+tag@` reaches the managed inbox `local@` (sub-addressing).
        const local = address.slice(0, at)
        const plus = local.indexOf("+")
        const base = plus > 0 ? `${local.slice(0, plus)}${address.slice(at)}` : address
        const managed = yield* sql<{ id: string; spam_threshold: string | null }>`
          SELECT id, spam_threshold FROM organizations
          WHERE managed_inbox_address = ${address} OR managed_inbox_address = ${base} LIMIT 1`
        if (managed[0]) {
          const t = managed[0].spam_threshold
          return Option.some({ address, orgId: managed[0].id, domainId: null, spamThreshold: t === null ? null : Number(t) })
        }
        return yield* lookupDomain(address, address.slice(at + 1))
      }).pipe(Effect.orDie, Effect.withSpan("Recipients.lookup"))

    const lookupDomain = (address: string, domain: string) =>
      sql<{ id: string; org_id: string; threshold: string | null }>`
        SELECT d.id, d.org_id, coalesce(d.spam_threshold, o.spam_threshold) AS threshold
        FROM domains d JOIN organizations o ON o.id = d.org_id
        WHERE d.domain = ${domain} AND d.verified_at IS NOT NULL AND d.is_active`.pipe(
        Effect.map((rows) =>
          Option.map(Option.fromNullable(rows[0]), (r) => ({
            address,
            orgId: r.org_id,
            domainId: r.id,
            spamThreshold: r.threshold === null ? null : Number(r.threshold)
          }))
        )
      )

    return { lookup } as const
  })
}) {}
