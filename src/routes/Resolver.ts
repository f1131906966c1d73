/**
 * Which endpoint receives mail for a recipient: an explicit route (exact
 * before wildcard, most specific wildcard first) → the domain's default endpoint → the organization
 * fallback (`domain_id: null`). Managed inbox addresses (and their `+tag` forms) belong to their
 * organization and use its fallback. Only active, enabled endpoints are chosen; a route whose
 * endpoint is disabled is passed over. Mail for an inactive or unverified domain resolves to nothing.
 *
 * Everything the inbound path needs about a recipient (owner, spam threshold, every candidate
 * destination, the organization's filters, its storage use and attachment policy) comes from ONE
 * query: it runs at RCPT time, once per recipient, and its answer is carried through DATA to the
 * storing statement, so a message costs no further lookups of these.
 */
import { SqlClient, type Statement } from "@effect/sql"
import { Effect, Exit, Option } from "effect"
import { type AttachmentPolicy, parsePolicy } from "../account/AttachmentPolicy.js"
import type { EndpointRow } from "../endpoints/Repo.js"
import type { FilterLike } from "../filters/Evaluate.js"
import { domainOf } from "../mail/SenderPatterns.js"
import { makeBatcher } from "../platform/Batching.js"
import { AppConfig } from "../platform/Config.js"
import { compareSpecificity, matchesRoute, parseRoutePattern } from "./Patterns.js"

export interface Resolution {
  readonly orgId: string
  /** The recipient's domain row; null for the managed inbox. */
  readonly domainId: string | null
  readonly via: "route" | "domain_default" | "fallback" | "wake" | "none"
  readonly routeId: string | null
  readonly endpoint: Option.Option<EndpointRow>
}

/** A served recipient: its resolution plus what ingestion applies to it. */
export interface RecipientFacts {
  readonly resolution: Resolution
  /** The domain's threshold where set (paid plans), else the account's; null disables. */
  readonly spamThreshold: number | null
  /** Enabled filters that apply (organization-wide plus the domain's own), oldest first. */
  readonly filters: ReadonlyArray<FilterLike>
  /** A function's wake address (`fn-<id>@<managed domain>`): the function and who may mail commands. */
  readonly wake: WakeTarget | null
  /** The inbox (managed domain) the address belongs to, or its `+tag` base; null at a domain or a wake address. */
  readonly inboxId: string | null
  /** The owner's storage and attachment rules, as they stood at the lookup. */
  readonly org: OrgFacts
}

/** What the inbound path checks a message against for the recipient's organization. */
export interface OrgFacts {
  /** Bytes stored so far (the early, RCPT-time answer; the binding check is made as rows are inserted). */
  readonly usedBytes: number
  /** The plan's storage quota in bytes; null: no quota. */
  readonly quotaBytes: number | null
  readonly attachmentPolicy: AttachmentPolicy | null
}

/** Whether the organization can store `bytes` more, by the facts read at RCPT time. */
export const hasRoomFor = (org: OrgFacts, bytes: number) => org.quotaBytes === null || org.usedBytes + bytes <= org.quotaBytes

export interface WakeTarget {
  readonly functionId: string
  /** Lowercased addresses and `@domain`s. */
  readonly allowlist: ReadonlyArray<string>
}

/** `fn-<uuid>@<domain>`: a function's wake address (lowercased). */
export const WAKE_ADDRESS = /^fn-([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})@/

/** An endpoint row as `to_json` gives it: timestamps are ISO strings. */
type EndpointJson = Omit<EndpointRow, "deactivated_at" | "created_at" | "updated_at"> & {
  readonly deactivated_at: string | null
  readonly created_at: string
  readonly updated_at: string
}

/** The recipient's owner with, as JSON, every candidate destination and the filters. */
interface OwnerRow {
  readonly org_id: string
  readonly domain_id: string | null
  readonly threshold: string | null
  readonly filters: ReadonlyArray<FilterLike>
  /** Routes of the recipient's domain (or managed inbox) to active, enabled endpoints, oldest first. */
  readonly routes: ReadonlyArray<{ readonly id: string; readonly pattern: string; readonly endpoint: EndpointJson }>
  readonly domain_default: EndpointJson | null
  readonly fallback: EndpointJson | null
  readonly wake_function: string | null
  readonly wake_allowlist: ReadonlyArray<string> | null
  readonly inbox_id: string | null
  /** Bigints as text (drivers differ in how they return int8). */
  readonly used_bytes: string
  readonly quota_bytes: string | null
  readonly attachment_policy: unknown
}

const endpointOf = (e: EndpointJson): EndpointRow => ({
  ...e,
  deactivated_at: e.deactivated_at === null ? null : new Date(e.deactivated_at),
  created_at: new Date(e.created_at),
  updated_at: new Date(e.updated_at)
})

/** Lookup queries in flight at once; more lookups wait and go together in the next query. */
const LOOKUP_WORKERS = 2
const MAX_LOOKUP_BATCH = 100

export class RouteResolver extends Effect.Service<RouteResolver>()("mailroom/RouteResolver", {
  scoped: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const config = yield* AppConfig
    const managed = config.managedInboxDomain.toLowerCase()

    /**
     * Everything about each recipient's owner, one row per served recipient (`ord` says which): the
     * owner is found by inbox address on the managed domain (the default or a created one, or its
     * `+tag` base) or by verified, active domain;
     * each candidate is a correlated subquery on an index, evaluated for served recipients only.
     */
    const owners = (
      requests: ReadonlyArray<{ readonly address: string; readonly base: string; readonly domain: string; readonly wake: string | null }>
    ) => {
      const candidates = (org: Statement.Fragment, dom: Statement.Fragment) =>
        sql`(SELECT coalesce(json_agg(json_build_object('type', f.type, 'pattern', f.pattern, 'signals', f.signals) ORDER BY f.created_at), '[]'::json)
               FROM filters f WHERE f.org_id = ${org} AND f.enabled AND (f.domain_id IS NULL OR f.domain_id = ${dom})) AS filters,
            (SELECT coalesce(json_agg(json_build_object('id', r.id, 'pattern', r.pattern, 'endpoint', to_json(e)) ORDER BY r.created_at, r.id), '[]'::json)
               FROM routes r JOIN endpoints e ON e.id = r.endpoint_id AND e.org_id = r.org_id
              WHERE r.org_id = ${org} AND r.domain_id IS NOT DISTINCT FROM ${dom} AND e.deactivated_at IS NULL AND e.enabled) AS routes,
            (SELECT to_json(e) FROM endpoints e WHERE e.org_id = ${org} AND e.deactivated_at IS NULL AND e.enabled
                AND NOT e.is_route_target AND e.domain_id = ${dom} LIMIT 1) AS domain_default,
            (SELECT to_json(e) FROM endpoints e WHERE e.org_id = ${org} AND e.deactivated_at IS NULL AND e.enabled
                AND NOT e.is_route_target AND e.domain_id IS NULL LIMIT 1) AS fallback`
      const input = JSON.stringify(requests.map((r, ord) => ({ ord, ...r })))
      const noWake = sql`NULL::uuid AS wake_function, NULL::json AS wake_allowlist`
      return sql<OwnerRow & { readonly ord: number }>`
        SELECT i.ord, x.*, coalesce(su.used_bytes, 0)::text AS used_bytes, storage_quota_bytes(og.plan)::text AS quota_bytes,
               og.attachment_policy
          FROM json_to_recordset(${input}::json) AS i(ord int, address text, base text, domain text, wake uuid)
          CROSS JOIN LATERAL (
            (SELECT o.id AS org_id, NULL::uuid AS domain_id, o.spam_threshold AS threshold, ${candidates(sql`o.id`, sql`NULL::uuid`)}, ${noWake}, ib.id AS inbox_id
               FROM inboxes ib JOIN organizations o ON o.id = ib.org_id
              WHERE i.domain = ${managed} AND i.wake IS NULL AND ib.address IN (i.address, i.base)
              LIMIT 1)
            UNION ALL
            (SELECT d.org_id, d.id, coalesce(d.spam_threshold, o.spam_threshold), ${candidates(sql`d.org_id`, sql`d.id`)}, ${noWake}, NULL::uuid AS inbox_id
               FROM domains d JOIN organizations o ON o.id = d.org_id
              WHERE i.domain <> ${managed} AND d.domain = i.domain AND d.verified_at IS NOT NULL AND d.is_active)
            UNION ALL
            -- A function's wake address: its own endpoint, no spam threshold or filters (the allowlist decides).
            (SELECT f.org_id, NULL::uuid, NULL::numeric, '[]'::json, '[]'::json, NULL::json,
                    (SELECT to_json(e) FROM endpoints e WHERE e.org_id = f.org_id AND e.function_id = f.id
                        AND e.deactivated_at IS NULL AND e.enabled LIMIT 1),
                    f.id, coalesce((SELECT a.senders FROM function_wake_allowlists a WHERE a.function_id = f.id), '[]'::jsonb)::json, NULL::uuid
               FROM functions f
              WHERE i.wake IS NOT NULL AND f.id = i.wake)
          ) x
          JOIN organizations og ON og.id = x.org_id
          LEFT JOIN storage_usage su ON su.org_id = x.org_id`
    }

    const factsOf = (row: OwnerRow, address: string): RecipientFacts => {
      const { domain_id: domainId, org_id: orgId } = row
      const facts = (resolution: Resolution): RecipientFacts => ({
        resolution,
        spamThreshold: row.threshold === null ? null : Number(row.threshold),
        filters: row.filters,
        wake: row.wake_function === null ? null : { functionId: row.wake_function, allowlist: row.wake_allowlist ?? [] },
        inboxId: row.inbox_id,
        org: {
          usedBytes: Number(row.used_bytes),
          quotaBytes: row.quota_bytes === null ? null : Number(row.quota_bytes),
          attachmentPolicy: parsePolicy(row.attachment_policy)
        }
      })
      if (row.wake_function !== null) {
        return facts({
          orgId,
          domainId: null,
          via: "wake",
          routeId: null,
          endpoint: row.fallback === null ? Option.none() : Option.some(endpointOf(row.fallback))
        })
      }
      const route = row.routes
        .map((r) => ({ r, p: parseRoutePattern(r.pattern) }))
        .filter((c): c is { r: typeof c.r; p: NonNullable<typeof c.p> } => c.p !== undefined && matchesRoute(c.p, address))
        // Array.sort is stable: equal specificity keeps the oldest route first.
        .sort((a, b) => compareSpecificity(a.p, b.p))[0]
      if (route !== undefined) {
        return facts({ orgId, domainId, via: "route", routeId: route.r.id, endpoint: Option.some(endpointOf(route.r.endpoint)) })
      }
      if (row.domain_default !== null) {
        return facts({ orgId, domainId, via: "domain_default", routeId: null, endpoint: Option.some(endpointOf(row.domain_default)) })
      }
      return facts({
        orgId,
        domainId,
        via: row.fallback === null ? "none" : "fallback",
        routeId: null,
        endpoint: row.fallback === null ? Option.none() : Option.some(endpointOf(row.fallback))
      })
    }

    // Concurrent lookups (SMTP sessions arriving together) share one query; the same address
    // asked twice in a batch is looked up once.
    const batched = yield* makeBatcher({
      workers: LOOKUP_WORKERS,
      maxBatch: MAX_LOOKUP_BATCH,
      run: (addresses: ReadonlyArray<string>) =>
        Effect.gen(function*() {
          const unique = [...new Set(addresses)]
          const requests = unique.map((address) => {
            const domain = domainOf(address)!
            const local = address.slice(0, address.lastIndexOf("@"))
            const plus = local.indexOf("+")
            const base = domain === managed && plus > 0 ? `${local.slice(0, plus)}@${domain}` : address
            const wake = domain === managed ? WAKE_ADDRESS.exec(address)?.[1] ?? null : null
            return { address, base, domain, wake }
          })
          const rows = yield* Effect.orDie(owners(requests))
          const found = new Map<string, RecipientFacts>()
          for (const row of rows) {
            const address = unique[row.ord]!
            if (!found.has(address)) found.set(address, factsOf(row, address))
          }
          return addresses.map((a) => Exit.succeed(Option.fromNullable(found.get(a))))
        })
    })

    const lookup = (recipient: string): Effect.Effect<Option.Option<RecipientFacts>> => {
      const address = recipient.trim().toLowerCase()
      return domainOf(address) === undefined ? Effect.succeed(Option.none()) : batched(address)
    }

    const resolve = (recipient: string): Effect.Effect<Option.Option<Resolution>> =>
      Effect.map(lookup(recipient), Option.map((f) => f.resolution))

    return { lookup, resolve } as const
  })
}) {}
