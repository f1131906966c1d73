/**
 * Contract of the Inbox area: `GET /inbox` says, for the managed inbox address and every domain of
 * the organization, whether inbound mail is ready to flow and, when it is not, why.
 */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { DateTimeString, Ok, Uuid } from "../contract/Envelope.js"
import { Authentication } from "../contract/Security.js"

export const IssueCode = Schema.Literal(
  "domain_unverified",
  "domain_inactive",
  "mx_missing",
  "mx_other_provider",
  "mx_lookup_failed",
  "no_destination",
  "endpoint_disabled",
  "no_catch_all",
  "last_delivery_failed",
  "last_delivery_retrying"
)
export type IssueCode = typeof IssueCode.Type

export const InboxIssue = Schema.Struct({
  code: IssueCode,
  severity: Schema.Literal("error", "warning").annotations({
    description: "error: mail cannot reach a destination (ready is false); warning: worth a look, ready is unaffected"
  }),
  message: Schema.String
}).annotations({ identifier: "InboxIssue" })
export type InboxIssue = typeof InboxIssue.Type

export const MxCheck = Schema.Struct({
  status: Schema.Literal("ok", "missing", "other_provider", "lookup_failed", "not_checked").annotations({
    description: "ok: an MX points at `expected`; not_checked: the managed inbox domain is run by the service"
  }),
  hosts: Schema.Array(Schema.String).annotations({ description: "MX hosts found, lowest priority first" }),
  expected: Schema.String
}).annotations({ identifier: "InboxMxCheck" })

export const InboxEndpoint = Schema.Struct({
  id: Uuid,
  kind: Schema.Literal("http", "function"),
  url: Schema.NullOr(Schema.String),
  function_id: Schema.NullOr(Uuid),
  enabled: Schema.Boolean
}).annotations({ identifier: "InboxEndpoint" })

export const InboxDestination = Schema.Struct({
  via: Schema.Literal("route", "domain_default", "fallback"),
  route_id: Schema.NullOr(Uuid),
  endpoint: InboxEndpoint
}).annotations({ identifier: "InboxDestination" })

export const LastDelivery = Schema.Struct({
  id: Uuid,
  endpoint_id: Uuid,
  status: Schema.Literal("pending", "delivered", "header_confirmed", "failed"),
  attempt_count: Schema.Int,
  last_error_code: Schema.NullOr(Schema.String),
  at: DateTimeString.annotations({ description: "when the delivery last changed (its updated_at)" })
}).annotations({ identifier: "InboxLastDelivery" })

export const InboxAddress = Schema.Struct({
  kind: Schema.Literal("managed_inbox", "domain"),
  address: Schema.NullOr(Schema.String).annotations({ description: "the managed inbox address; null for a domain" }),
  domain: Schema.String,
  domain_id: Schema.NullOr(Uuid),
  verified: Schema.Boolean,
  is_active: Schema.Boolean,
  mx: MxCheck,
  destination: Schema.NullOr(InboxDestination).annotations({
    description: "where mail for the address (managed inbox) or for any address of the domain without a route goes"
  }),
  routes: Schema.Int.annotations({ description: "routes of this domain (or the managed inbox) whose endpoint is enabled" }),
  last_delivery: Schema.NullOr(LastDelivery),
  last_received_at: Schema.NullOr(DateTimeString),
  ready: Schema.Boolean.annotations({ description: "true when no issue has severity error" }),
  issues: Schema.Array(InboxIssue)
}).annotations({ identifier: "InboxAddress" })
export type InboxAddress = typeof InboxAddress.Type

export const InboxStatus = Schema.Struct({
  ready: Schema.Boolean.annotations({ description: "true when the managed inbox and every domain are ready" }),
  managed_inbox: Schema.NullOr(InboxAddress),
  domains: Schema.Array(InboxAddress).annotations({ description: "verified and unverified domains, newest first" }),
  checked_at: DateTimeString
}).annotations({ identifier: "InboxStatus" })
export type InboxStatus = typeof InboxStatus.Type

export class InboxApi extends HttpApiGroup.make("inbox")
  .add(
    HttpApiEndpoint.get("status", "/inbox")
      .addSuccess(Ok(InboxStatus, "InboxStatus"))
      .annotate(OpenApi.Summary, "Is inbound mail ready? Verification, MX, destination, last delivery, per address")
  )
  .middleware(Authentication)
  .annotate(OpenApi.Description, "Check inbound setup and processing readiness")
{}
