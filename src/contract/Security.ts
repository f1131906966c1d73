/**
 * Bearer authentication as part of the contract: the middleware tag (so the OpenAPI document lists
 * `security: bearer` and the 401 envelope on every protected operation) and the principal it provides.
 */
import { HttpApiMiddleware, HttpApiSecurity } from "@effect/platform"
import { Context } from "effect"
import { Wire } from "./Errors.js"

export type Role = "owner" | "admin" | "member"

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
}

export class CurrentPrincipal extends Context.Tag("mailroom/CurrentPrincipal")<CurrentPrincipal, Principal>() {}

export class Authentication extends HttpApiMiddleware.Tag<Authentication>()("mailroom/Authentication", {
  failure: Wire.Unauthorized,
  provides: CurrentPrincipal,
  security: { bearer: HttpApiSecurity.bearer }
}) {}
