/**
 * The `Policy` service: the one vocabulary of who may do what. Two halves, decided in two places:
 *
 * - the credential: the scope table below (what each operation needs from an API key's scopes),
 *   enforced by the bearer middleware before any handler runs (`scopeOf`, also `ScopePolicy`);
 * - the organization: named permissions (Permissions.ts: plan features, entitlements, the
 *   operator-granted payments, sending) that handlers and services ask for with
 *   `policy.require(orgId, "functions.use")`, failing with that permission's refusal.
 *
 * The service owns its SqlClient: callers never provide one. It reads an organization's facts in
 * one statement per check and caches nothing, so a plan change or an operator grant applies to the
 * next request.
 *
 * The scope table: what each operation needs from a credential's scopes. An API key carries
 * scopes (`admin` is everything; OAuth tokens and keys made before scopes are `admin`); every
 * authenticated operation of the HttpApi is held to this table by the bearer middleware, and so is
 * every MCP tool and CLI command, which call the same operations.
 *
 * A group names the scope its reads need and the scope its writes need; an operation listed in
 * OPERATIONS overrides its group. A group missing here needs `admin` (new groups are closed until
 * someone decides otherwise); `null` means any valid credential.
 */
import { HttpApi } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { Context, Effect, Layer } from "effect"
import { MailroomApi } from "../Api.js"
import type { Entitlement, Plan } from "../contract/Plans.js"
import { entitlementsOf } from "../contract/Plans.js"
import { type Scope, ScopePolicy } from "../contract/Security.js"
import { AppConfig } from "../platform/Config.js"
import { decide, type OrgFacts, type Permission, type Refusal } from "./Permissions.js"

interface GroupScopes {
  readonly read: Scope | null
  readonly write: Scope | null
}

const both = (scope: Scope | null): GroupScopes => ({ read: scope, write: scope })

export const GROUPS: Readonly<Record<string, GroupScopes>> = {
  account: { read: null, write: "admin" },
  emails: { read: "emails:read", write: "admin" },
  downloads: both("emails:read"),
  inbox: { read: "emails:read", write: "admin" },
  threads: both("emails:read"),
  events: both("emails:read"),
  listen: both("emails:read"),
  sending: { read: "emails:read", write: "emails:send" },
  drafts: { read: "emails:read", write: "admin" },
  inboxes: { read: "emails:read", write: "admin" },
  // Removing a suppression lets mail go to that address again: a sender's decision.
  suppressions: { read: "emails:read", write: "emails:send" },
  // Releasing quarantined mail overrides a protection: the account's business.
  quarantine: both("admin"),
  search: both("search"),
  functions: both("functions"),
  templates: both("functions"),
  wakes: both("functions"),
  memories: both("memories"),
  registries: both("registries"),
  payments: both("payments"),
  // Logging out acts on the credential itself; claiming the account is the account's business.
  authSession: both("admin"),
  apiKeys: both("admin")
}

/** Operations whose scope differs from their group's (`group.endpoint`). */
export const OPERATIONS: Readonly<Record<string, Scope | null>> = {
  "authSession.logout": null,
  // The account's storage figures are a read; its webhook secret is a credential of its own.
  "account.webhookSecret": "admin",
  "account.rotateWebhookSecret": "admin",
  // Paying an email's challenge is answering mail.
  "payments.payByEmail": "payments",
  // Reaching out through a wake is running functions (the watcher is a function).
  "wakes.watchThread": "functions",
  // Labels and read state are the reader's bookkeeping on mail it may read; they change no content.
  "emails.update": "emails:read"
}

const requiredOf = (group: string, endpoint: string, method: string): Scope | null => {
  const named = OPERATIONS[`${group}.${endpoint}`]
  if (named !== undefined) return named
  const g = GROUPS[group]
  if (g === undefined) return "admin"
  return method === "GET" ? g.read : g.write
}

/** `METHOD /v1/path-template` → scope, for every operation of an HttpApi. */
export const scopeTable = (api: HttpApi.HttpApi.Any): ReadonlyMap<string, Scope | null> => {
  const table = new Map<string, Scope | null>()
  HttpApi.reflect(api as HttpApi.HttpApi<string, never, never, never>, {
    onGroup: () => {},
    onEndpoint: ({ endpoint, group }) => {
      table.set(`${endpoint.method.toUpperCase()} ${endpoint.path}`, requiredOf(group.identifier, endpoint.name, endpoint.method.toUpperCase()))
    }
  })
  return table
}

export class Policy extends Context.Tag("mailroom/Policy")<Policy, {
  /** The scope an operation needs, by method and route template; undefined: every valid credential may call it. */
  readonly scopeOf: (method: string, route: string) => Scope | undefined
  /** The organization's plan and entitlements (an unknown organization: `agent`, nothing granted). */
  readonly factsOf: (orgId: string) => Effect.Effect<OrgFacts>
  readonly planOf: (orgId: string) => Effect.Effect<Plan>
  /** Fails with the permission's refusal (Permissions.ts) unless the organization holds it. */
  readonly require: <P extends Permission>(orgId: string, permission: P) => Effect.Effect<void, Refusal<P>>
}>() {}

export const PolicyLive = Layer.effect(
  Policy,
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const config = yield* AppConfig
    const table = scopeTable(MailroomApi)

    const factsOf = (orgId: string) =>
      sql<{ plan: Plan; granted: ReadonlyArray<Entitlement> }>`
        SELECT o.plan, coalesce((SELECT json_agg(g.entitlement) FROM organization_entitlements g WHERE g.org_id = o.id), '[]'::json) AS granted
        FROM organizations o WHERE o.id = ${orgId}`.pipe(
        Effect.map((rows): OrgFacts => {
          const plan = rows[0]?.plan ?? "agent"
          return { plan, entitlements: entitlementsOf(plan, rows[0]?.granted ?? []) }
        }),
        Effect.orDie
      )

    return Policy.of({
      // A route outside the HttpApi (/mcp) needs only a valid credential: its tool calls are checked
      // as the operations they are.
      scopeOf: (method, route) => table.get(`${method.toUpperCase()} ${route}`) ?? undefined,
      factsOf,
      planOf: (orgId) => Effect.map(factsOf(orgId), (f) => f.plan),
      require: (orgId, permission) => Effect.flatMap(factsOf(orgId), (facts) => decide(permission, facts, config.publicBaseUrl))
    })
  })
)

/** The bearer middleware's view of the policy: the scope half. */
export const ScopePolicyLive = Layer.effect(ScopePolicy, Effect.map(Policy, (p) => ({ required: p.scopeOf })))
