/**
 * Which recipient addresses Mailroom serves (managed inbox addresses with their `+tag` forms, and
 * addresses on verified, active domains), with the spam threshold that applies to each. Ownership
 * is the route resolver's, so RCPT acceptance and routing can never disagree.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Option } from "effect"
import { RouteResolver } from "../routes/Resolver.js"

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
    const resolver = yield* RouteResolver

    const lookup = (raw: string): Effect.Effect<Option.Option<Recipient>> =>
      Effect.gen(function*() {
        const address = normalizeAddress(raw)
        const owner = yield* resolver.owner(address)
        if (Option.isNone(owner)) return Option.none()
        const { orgId, domainId } = owner.value
        const rows = yield* sql<{ threshold: string | null }>`
          SELECT coalesce((SELECT spam_threshold FROM domains WHERE id = ${domainId}::uuid), o.spam_threshold) AS threshold
          FROM organizations o WHERE o.id = ${orgId}`
        const t = rows[0]?.threshold ?? null
        return Option.some({ address, orgId, domainId, spamThreshold: t === null ? null : Number(t) })
      }).pipe(Effect.orDie, Effect.withSpan("Recipients.lookup"))

    return { lookup } as const
  })
}) {}
