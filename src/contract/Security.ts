/**
 * Bearer authentication as part of the contract: the middleware tag (so the OpenAPI document lists
 * `security: bearer` and the 401 envelope on every protected operation) and the principal it provides.
 */
import { HttpApiMiddleware, HttpApiSecurity } from "@effect/platform"
import { Context, Schema } from "effect"
import { Wire } from "./Errors.js"

export type Role = "owner" | "admin" | "member"

/** What an API key may do; `admin` is everything. OAuth tokens and keys made before scopes act as `admin`. */
export const SCOPES = ["emails:read", "emails:send", "functions", "memories", "search", "registries", "payments", "admin"] as const
export type Scope = (typeof SCOPES)[number]
export const ScopeSchema = Schema.Literal(...SCOPES)

/** Whether a principal may act with `scope` (absent scopes: a full credential). */
export const hasScope = (p: Principal, scope: Scope): boolean =>
  p.scopes === undefined || p.scopes.includes("admin") || p.scopes.includes(scope)

/** Who is calling: always one organization; the role is resolved on every request. */
export interface Principal {
  readonly orgId: string
  readonly role: Role
  readonly userId: string | null
  readonly credential:
    | { readonly kind: "api_key"; readonly id: string }
    | { readonly kind: "oauth"; readonly id: string; readonly clientId: string }
  /**
   * Present when the caller is an automation: a running function invocation's `MAILROOM` binding.
   * What it sends is automatic mail (`Auto-Submitted`, the loop guard's budgets).
   */
  readonly automation?: { readonly functionId: string }
  /** A scoped API key's scopes; absent for a credential with every scope. */
  readonly scopes?: ReadonlyArray<Scope>
  /** A key limited to these inboxes; absent or null: every inbox of the organization. */
  readonly inboxIds?: ReadonlyArray<string> | null
}

/**
 * The scope an operation needs, by its method and route template (`POST /v1/send-mail`); undefined
 * when any valid credential may call it. The one table lives in src/policy/ (it knows the groups).
 */
export class ScopePolicy extends Context.Tag("mailroom/ScopePolicy")<ScopePolicy, {
  readonly required: (method: string, route: string) => Scope | undefined
}>() {}

export class CurrentPrincipal extends Context.Tag("mailroom/CurrentPrincipal")<CurrentPrincipal, Principal>() {}

export class Authentication extends HttpApiMiddleware.Tag<Authentication>()("mailroom/Authentication", {
  // 403 `forbidden` with details.missing_scope: a scoped key calling outside its scopes.
  failure: Schema.Union(Wire.Unauthorized, Wire.Forbidden),
  provides: CurrentPrincipal,
  security: { bearer: HttpApiSecurity.bearer }
}) {}
