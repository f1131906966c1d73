/**
 * What other areas ask of registries: resolving `registry:<name>/<handle>` to an address (the send
 * path), and which published entries an authenticated From address is (the ingest path).
 *
 * Both honour an entry only while its publisher can still send from its address: an organization
 * that gives up a domain must not leave behind entries that whoever verifies the domain next could
 * receive mail for or be vouched for by.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Exit, Option } from "effect"
import { makeBatcher } from "../platform/Batching.js"
import { HANDLE, REGISTRY_NAME } from "./Api.js"

export interface ResolvedHandle {
  readonly registry: string
  readonly handle: string
  readonly address: string
}

/** A published entry an inbound message's From was verified as. */
export interface VerifiedSender {
  readonly registry: string
  readonly handle: string
}

export const RECIPIENT_PREFIX = "registry:"

/** `registry:<name>/<handle>` → its parts; `undefined` when `value` is not of that form. */
export const parseRegistryRecipient = (value: string): { readonly name: string; readonly handle: string } | undefined => {
  if (!value.startsWith(RECIPIENT_PREFIX)) return undefined
  const rest = value.slice(RECIPIENT_PREFIX.length)
  const slash = rest.indexOf("/")
  if (slash < 0) return undefined
  const name = rest.slice(0, slash)
  const handle = rest.slice(slash + 1)
  return REGISTRY_NAME.test(name) && HANDLE.test(handle) ? { name, handle } : undefined
}

/** The entry `e`'s publisher can still send from its address (see Senders.ts for the rule). */
export const STILL_SENDABLE = `(EXISTS (SELECT 1 FROM organizations o WHERE o.id = e.org_id
    AND o.managed_inbox_address IN (e.address, regexp_replace(e.address, '^([^+@]+)\\+[^@]*(@.*)$', '\\1\\2')))
  OR EXISTS (SELECT 1 FROM domains d WHERE d.org_id = e.org_id AND d.domain = split_part(e.address, '@', 2)
    AND d.verified_at IS NOT NULL))`

const LOOKUP_WORKERS = 2
const MAX_LOOKUP_BATCH = 100

export class RegistryDirectory extends Effect.Service<RegistryDirectory>()("mailroom/RegistryDirectory", {
  scoped: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    /** The published entry behind a handle, with the address to send to; none when unknown or pending. */
    const resolveHandle = (name: string, handle: string): Effect.Effect<Option.Option<ResolvedHandle>> =>
      sql<ResolvedHandle>`SELECT r.name AS registry, e.handle, e.address
          FROM registries r JOIN registry_entries e ON e.registry_id = r.id
         WHERE r.name = ${name} AND e.handle = ${handle} AND e.status = 'published' AND ${sql.literal(STILL_SENDABLE)}`.pipe(
        Effect.map((rows) => Option.fromNullable(rows[0])),
        Effect.orDie
      )

    // Messages arriving together share one indexed query; an address asked twice in a batch is looked up once.
    const batched = yield* makeBatcher({
      workers: LOOKUP_WORKERS,
      maxBatch: MAX_LOOKUP_BATCH,
      run: (addresses: ReadonlyArray<string>) =>
        Effect.gen(function*() {
          const unique = [...new Set(addresses)]
          const rows = yield* Effect.orDie(sql<VerifiedSender & { readonly ord: number }>`
            SELECT i.ord, r.name AS registry, e.handle
              FROM json_to_recordset(${JSON.stringify(unique.map((address, ord) => ({ ord, address })))}::json)
                AS i(ord int, address text)
              JOIN registry_entries e ON e.address = i.address AND e.status = 'published'
              JOIN registries r ON r.id = e.registry_id
             WHERE ${sql.literal(STILL_SENDABLE)}
             ORDER BY r.name, e.handle`)
          const found = new Map<string, Array<VerifiedSender>>()
          for (const row of rows) {
            const address = unique[row.ord]!
            const list = found.get(address) ?? []
            list.push({ registry: row.registry, handle: row.handle })
            found.set(address, list)
          }
          return addresses.map((a) => Exit.succeed<ReadonlyArray<VerifiedSender>>(found.get(a) ?? []))
        })
    })

    /** Published entries whose address is `address` (lowercased), ordered by registry then handle. */
    const verifiedSenders = (address: string): Effect.Effect<ReadonlyArray<VerifiedSender>> =>
      batched(address.trim().toLowerCase())

    return { resolveHandle, verifiedSenders } as const
  })
}) {}
