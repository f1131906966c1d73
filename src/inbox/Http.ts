/**
 * `GET /inbox`: the readiness report. Every check is read-only and bounded: MX lookups go through
 * the `Dns` service (DNS_SERVER, 2 s, one try) concurrently, and a failed lookup is an issue in the
 * report, never a failed request.
 */
import { Clock, Effect, Either, Layer, Option } from "effect"
import { MailroomApi } from "../Api.js"
import { CurrentPrincipal } from "../contract/Security.js"
import { isOurExchange } from "../domains/Present.js"
import type { DomainRow } from "../domains/Repo.js"
import type { EndpointRow } from "../endpoints/Repo.js"
import { Dns } from "../net/Dns.js"
import * as ApiGroup from "../platform/ApiGroup.js"
import { AppConfig } from "../platform/Config.js"
import { RouteResolver } from "../routes/Resolver.js"
import type { InboxAddress, InboxIssue, IssueCode } from "./Api.js"
import { InboxRepo, type LastDeliveryRow } from "./Repo.js"

type Mx = InboxAddress["mx"]
type Destination = NonNullable<InboxAddress["destination"]>

const issue = (code: IssueCode, severity: InboxIssue["severity"], message: string): InboxIssue => ({ code, severity, message })

const endpointOf = (e: EndpointRow): Destination["endpoint"] => ({
  id: e.id,
  kind: e.kind,
  url: e.url,
  function_id: e.function_id,
  enabled: e.enabled
})

const describe = (e: EndpointRow) => e.kind === "http" ? `endpoint ${e.id} (${e.url})` : `function endpoint ${e.id}`

/** A default-destination slot's endpoints (domain default or fallback), enabled ones first. */
const slot = (all: ReadonlyArray<EndpointRow>, domainId: string | null) =>
  all.filter((e) => !e.is_route_target && e.domain_id === domainId).sort((a, b) => Number(b.enabled) - Number(a.enabled))

const deliveryIssues = (d: LastDeliveryRow | null): Array<InboxIssue> => {
  if (d === null) return []
  if (d.status === "failed") {
    return [issue("last_delivery_failed", "warning",
      `the last delivery (${d.id}) failed after ${d.attempt_count} attempt(s)` +
        (d.last_error_code !== null ? ` with ${d.last_error_code}` : "") + "; replay it once the endpoint is fixed")]
  }
  if (d.status === "pending" && d.last_error_code !== null) {
    return [issue("last_delivery_retrying", "warning",
      `the last delivery (${d.id}) is being retried after ${d.attempt_count} failed attempt(s) (${d.last_error_code})`)]
  }
  return []
}

export const InboxHttpLive = ApiGroup.group(MailroomApi, "inbox", (handlers) =>
  Effect.gen(function*() {
    const repo = yield* InboxRepo
    const dns = yield* Dns
    const resolver = yield* RouteResolver
    const config = yield* AppConfig
    const managed = config.managedInboxDomain.toLowerCase()

    const mxCheck = (domain: string): Effect.Effect<Mx> =>
      Effect.map(Effect.either(dns.mx(domain)), (r) => {
        if (Either.isLeft(r)) return { status: "lookup_failed" as const, hosts: [], expected: managed }
        const hosts = [...r.right].sort((a, b) => a.priority - b.priority).map((m) => m.exchange)
        if (hosts.length === 0) return { status: "missing" as const, hosts, expected: managed }
        if (hosts.some((h) => isOurExchange(h, managed))) return { status: "ok" as const, hosts, expected: managed }
        return { status: "other_provider" as const, hosts, expected: managed }
      })

    const mxIssues = (domain: string, mx: Mx): Array<InboxIssue> => {
      switch (mx.status) {
        case "missing":
          return [issue("mx_missing", "error", `${domain} has no MX record; publish MX 10 ${managed}`)]
        case "other_provider":
          return [issue("mx_other_provider", "error",
            `${domain}'s MX points at ${mx.hosts.join(", ")}, so its mail goes to another provider; point it at ${managed}`)]
        case "lookup_failed":
          return [issue("mx_lookup_failed", "warning", `the MX lookup for ${domain} failed; it is retried on the next check`)]
        default:
          return []
      }
    }

    /** No enabled destination: a disabled one in a slot (or on a route) says why, else there is none. */
    const missingDestination = (
      disabled: ReadonlyArray<EndpointRow>,
      routes: number,
      what: string
    ): Array<InboxIssue> => {
      if (routes > 0) {
        return [issue("no_catch_all", "warning",
          `mail for ${what} that matches no route is stored but not delivered: there is no domain default or fallback endpoint`)]
      }
      const first = disabled[0]
      if (first !== undefined) {
        return [issue("endpoint_disabled", "error", `${describe(first)} would receive mail for ${what} but is disabled`)]
      }
      return [issue("no_destination", "error",
        `no endpoint receives mail for ${what}: create an organization fallback endpoint, a domain default or a route; ` +
          "until then mail is stored and visible through GET /emails only")]
    }

    const finish = (base: Omit<InboxAddress, "ready" | "issues">, issues: Array<InboxIssue>): InboxAddress => ({
      ...base,
      ready: !issues.some((i) => i.severity === "error"),
      issues
    })

    const managedReport = (orgId: string, address: string, all: ReadonlyArray<EndpointRow>, routes: number) =>
      Effect.gen(function*() {
        const [resolution, lastDelivery, lastReceived] = yield* Effect.all([
          resolver.resolve(address),
          repo.lastDelivery(orgId, null),
          repo.lastReceived(orgId, null)
        ])
        const destination: Destination | null = Option.match(Option.flatMap(resolution, (r) =>
          r.via === "none" ? Option.none() : Option.map(r.endpoint, (e) => ({ r, e }))), {
          onNone: () => null,
          onSome: ({ e, r }) => ({ via: r.via as Destination["via"], route_id: r.routeId, endpoint: endpointOf(e) })
        })
        const issues: Array<InboxIssue> = []
        if (destination === null) {
          // The resolver already passed over routes to disabled endpoints; a disabled fallback explains the gap.
          issues.push(...missingDestination(slot(all, null).filter((e) => !e.enabled), 0, address))
        }
        issues.push(...deliveryIssues(lastDelivery))
        return finish({
          kind: "managed_inbox",
          address,
          domain: managed,
          domain_id: null,
          verified: true,
          is_active: true,
          mx: { status: "not_checked", hosts: [], expected: managed },
          destination,
          routes,
          last_delivery: lastDelivery === null ? null : toLast(lastDelivery),
          last_received_at: lastReceived
        }, issues)
      })

    const domainReport = (orgId: string, d: DomainRow, all: ReadonlyArray<EndpointRow>, routes: number) =>
      Effect.gen(function*() {
        const [mx, lastDelivery, lastReceived] = yield* Effect.all([
          mxCheck(d.domain),
          repo.lastDelivery(orgId, d.id),
          repo.lastReceived(orgId, d.id)
        ])
        const own = slot(all, d.id)
        const fallback = slot(all, null)
        const holder = own.find((e) => e.enabled) ?? fallback.find((e) => e.enabled)
        const destination: Destination | null = holder === undefined ? null : {
          via: holder.domain_id === null ? "fallback" : "domain_default",
          route_id: null,
          endpoint: endpointOf(holder)
        }
        const verified = d.verified_at !== null
        const issues: Array<InboxIssue> = []
        if (!verified) {
          issues.push(issue("domain_unverified", "error",
            `${d.domain} is not verified: publish TXT _mailroom.${d.domain} and call POST /domains/${d.id}/verify`))
        } else if (!d.is_active) {
          issues.push(issue("domain_inactive", "error", `${d.domain} is turned off (is_active: false); its mail is refused`))
        }
        issues.push(...mxIssues(d.domain, mx))
        if (destination === null) issues.push(...missingDestination([...own, ...fallback], routes, d.domain))
        issues.push(...deliveryIssues(lastDelivery))
        return finish({
          kind: "domain",
          address: null,
          domain: d.domain,
          domain_id: d.id,
          verified,
          is_active: d.is_active,
          mx,
          destination,
          routes,
          last_delivery: lastDelivery === null ? null : toLast(lastDelivery),
          last_received_at: lastReceived
        }, issues)
      })

    return handlers.handle("status", () =>
      Effect.gen(function*() {
        const { orgId } = yield* CurrentPrincipal
        const [address, domains, all, counts] = yield* Effect.all([
          repo.managedAddress(orgId),
          repo.domains(orgId),
          repo.endpoints(orgId),
          repo.routeCounts(orgId)
        ])
        const routesOf = (domainId: string | null) => counts.find((c) => c.domain_id === domainId)?.n ?? 0
        const [managedInbox, domainReports] = yield* Effect.all([
          address === null ? Effect.succeed(null) : managedReport(orgId, address, all, routesOf(null)),
          Effect.forEach(domains, (d) => domainReport(orgId, d, all, routesOf(d.id)), { concurrency: 8 })
        ])
        const now = yield* Clock.currentTimeMillis
        return {
          ready: (managedInbox?.ready ?? true) && domainReports.every((r) => r.ready),
          managed_inbox: managedInbox,
          domains: domainReports,
          checked_at: new Date(now)
        }
      }))
  })).pipe(Layer.provide([
  InboxRepo.Default,
  Dns.Default
]))

const toLast = (d: LastDeliveryRow) => ({
  id: d.id,
  endpoint_id: d.endpoint_id,
  status: d.status,
  attempt_count: d.attempt_count,
  last_error_code: d.last_error_code,
  at: d.updated_at
})
