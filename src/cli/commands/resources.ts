/** `domains`, `endpoints`, `filters` and `routes`. */
import { Args, Command, Options } from "@effect/cli"
import { Console, Effect, Option, Schema } from "effect"
import type { Domain } from "../../domains/Api.js"
import { type Endpoint, Rules } from "../../endpoints/Api.js"
import type { Filter } from "../../filters/Api.js"
import type { Route } from "../../routes/Api.js"
import { CliFailure } from "../Failure.js"
import { col, showList, showOne } from "../Output.js"
import { authedClient } from "../Session.js"
import { booleanValue, fetchPages, idArg, opt, pageParams, paging, parseJsonOption } from "./common.js"

const uuidOption = (name: string, description: string) =>
  Options.text(name).pipe(Options.withSchema(Schema.UUID), Options.optional, Options.withDescription(description))

/** `--domain-id UUID` or `--domain-id none` (organization-wide). */
const domainIdOption = Options.text("domain-id").pipe(
  Options.withSchema(Schema.Union(Schema.UUID, Schema.Literal("none"))),
  Options.optional,
  Options.withDescription("one of the organization's domains, or `none` for organization-wide")
)
const domainIdValue = (v: Option.Option<string>) =>
  Option.match(v, { onNone: () => ({}), onSome: (id) => ({ domain_id: id === "none" ? null : id }) })

// --- domains -----------------------------------------------------------------------------------

const domainColumns = [
  col<Domain>("id", (d) => d.id),
  col<Domain>("domain", (d) => d.domain),
  col<Domain>("verified", (d) => d.verified),
  col<Domain>("active", (d) => (d.verified ? d.is_active : "-")),
  col<Domain>("created", (d) => d.created_at)
]

const domainsList = Command.make("list", paging, (p) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const page = yield* fetchPages(p, (cursor) => client.domains.list({ urlParams: pageParams(p.limit, cursor) }))
    yield* showList(target.json, page, domainColumns)
  })).pipe(Command.withDescription("Domains, newest first"))

const showDomain = (json: boolean, d: Domain) =>
  json || d.verified ? showOne(json, d) : Effect.gen(function*() {
    yield* showOne(false, {
      id: d.id,
      domain: d.domain,
      verified: d.verified,
      ...(d.verification ? { verification: d.verification.message } : {})
    })
    yield* Console.log(["", "Publish these DNS records, then run `mailroom domains verify ID`:",
      ...d.dns_records.map((r) => `  ${r.type} ${r.name} ${r.priority === null ? "" : `${r.priority} `}${r.value}`)].join("\n"))
  })

const confirmed = Options.boolean("confirmed").pipe(
  Options.withDescription("take mail over although the domain's MX points at another mailbox provider")
)

const domainsAdd = Command.make("add", {
  domain: Args.text({ name: "domain" }).pipe(Args.withDescription("e.g. acme.com")),
  confirmed
}, (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const d = yield* client.domains.claim({
      payload: { domain: o.domain, ...(o.confirmed ? { confirmed: true } : {}) },
      headers: {}
    })
    yield* showDomain(target.json, d)
  })).pipe(Command.withDescription("Claim a domain; publish the printed DNS records, then verify"))

const domainsVerify = Command.make("verify", { id: idArg("domain"), confirmed }, (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const d = yield* client.domains.verify({
      path: { id: o.id },
      payload: o.confirmed ? { confirmed: true } : {},
      headers: {}
    })
    yield* showDomain(target.json, d)
  })).pipe(Command.withDescription("Check the domain's DNS records"))

const domainsRm = Command.make("rm", { id: idArg("domain") }, (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    yield* showOne(target.json, yield* client.domains.remove({ path: { id: o.id } }))
  })).pipe(Command.withDescription("Remove a domain (its endpoints are deactivated, routes and filters deleted)"))

export const domains = Command.make("domains").pipe(
  Command.withDescription("Email domains"),
  Command.withSubcommands([domainsList, domainsAdd, domainsVerify, domainsRm])
)

// --- endpoints ---------------------------------------------------------------------------------

const endpointColumns = [
  col<Endpoint>("id", (e) => e.id),
  col<Endpoint>("kind", (e) => e.kind),
  col<Endpoint>("url", (e) => e.url ?? `function://${e.function_id}`),
  col<Endpoint>("enabled", (e) => e.enabled),
  col<Endpoint>("domain", (e) => e.domain_id ?? "(all)"),
  col<Endpoint>("route target", (e) => e.is_route_target)
]

const endpointsList = Command.make("list", paging, (p) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const page = yield* fetchPages(p, (cursor) => client.endpoints.list({ urlParams: pageParams(p.limit, cursor) }))
    yield* showList(target.json, page, endpointColumns)
  })).pipe(Command.withDescription("Active endpoints, newest first"))

const rulesOption = Options.text("rules").pipe(
  Options.optional,
  Options.withDescription("rules as JSON, e.g. '{\"event_types\":[\"email.received\"],\"max_size_bytes\":1000000}'")
)

const endpointsAdd = Command.make("add", {
  url: Options.text("url").pipe(Options.optional, Options.withDescription("https URL (http kind)")),
  kind: Options.choice("kind", ["http", "function"]).pipe(Options.optional, Options.withDescription("default http")),
  functionId: uuidOption("function-id", "the function (function kind)"),
  disabled: Options.boolean("disabled").pipe(Options.withDescription("create it disabled")),
  domainId: domainIdOption,
  routeTarget: Options.boolean("route-target").pipe(Options.withDescription("reachable only through routes")),
  rules: rulesOption
}, (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const rules = yield* parseJsonOption("rules", Rules, o.rules)
    const created = yield* client.endpoints.create({
      payload: {
        ...opt("url", o.url),
        ...opt("kind", o.kind),
        ...opt("function_id", o.functionId),
        ...(o.disabled ? { enabled: false } : {}),
        ...domainIdValue(o.domainId),
        ...(o.routeTarget ? { is_route_target: true } : {}),
        ...opt("rules", rules)
      },
      headers: {}
    })
    yield* showOne(target.json, created)
  })).pipe(Command.withDescription("Create a delivery endpoint (`--url URL` for a webhook)"))

const endpointsUpdate = Command.make("update", {
  id: idArg("endpoint"),
  url: Options.text("url").pipe(Options.optional, Options.withDescription("new URL")),
  enabled: booleanValue("enabled").pipe(Options.optional, Options.withDescription("true|false")),
  domainId: domainIdOption,
  rules: rulesOption
}, (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const rules = yield* parseJsonOption("rules", Rules, o.rules)
    const payload = { ...opt("url", o.url), ...opt("enabled", o.enabled), ...domainIdValue(o.domainId), ...opt("rules", rules) }
    if (Object.keys(payload).length === 0) {
      return yield* new CliFailure({ message: "nothing to change: pass --url, --enabled, --domain-id or --rules", usage: true })
    }
    yield* showOne(target.json, yield* client.endpoints.update({ path: { id: o.id }, payload }))
  })).pipe(Command.withDescription("Change an endpoint's url, enabled, domain or rules"))

const endpointsRm = Command.make("rm", { id: idArg("endpoint") }, (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    yield* showOne(target.json, yield* client.endpoints.remove({ path: { id: o.id } }))
  })).pipe(Command.withDescription("Deactivate an endpoint (its routes are removed)"))

const endpointsTest = Command.make("test", { id: idArg("endpoint") }, (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const result = yield* client.endpoints.test({ path: { id: o.id }, headers: {} })
    yield* showOne(target.json, result)
    if (!result.delivered) {
      return yield* new CliFailure({ message: `the test was not delivered: ${result.error ?? `HTTP ${result.status_code}`}` })
    }
  })).pipe(Command.withDescription("Send a signed synthetic email.received to the endpoint (exit 1 when not delivered)"))

export const endpoints = Command.make("endpoints").pipe(
  Command.withDescription("Delivery endpoints (webhooks and functions)"),
  Command.withSubcommands([endpointsList, endpointsAdd, endpointsUpdate, endpointsRm, endpointsTest])
)

// --- filters -----------------------------------------------------------------------------------

const filterColumns = [
  col<Filter>("id", (f) => f.id),
  col<Filter>("type", (f) => f.type),
  col<Filter>("pattern", (f) => f.pattern),
  col<Filter>("domain", (f) => f.domain_id ?? "(all)"),
  col<Filter>("enabled", (f) => f.enabled)
]

const filtersList = Command.make("list", paging, (p) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const page = yield* fetchPages(p, (cursor) => client.filters.list({ urlParams: pageParams(p.limit, cursor) }))
    yield* showList(target.json, page, filterColumns)
  })).pipe(Command.withDescription("Sender filters, newest first"))

const filtersAdd = Command.make("add", {
  type: Options.choice("type", ["whitelist", "blocklist"]).pipe(Options.withDescription("whitelist or blocklist")),
  pattern: Options.text("pattern").pipe(Options.withDescription("alice@acme.com, @acme.com or *.acme.com")),
  domainId: domainIdOption
}, (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const f = yield* client.filters.create({
      payload: { type: o.type, pattern: o.pattern, ...domainIdValue(o.domainId) },
      headers: {}
    })
    yield* showOne(target.json, f)
  })).pipe(Command.withDescription("Create a sender filter"))

const setEnabled = (name: "enable" | "disable") =>
  Command.make(name, { id: idArg("filter") }, (o) =>
    Effect.gen(function*() {
      const { client, target } = yield* authedClient
      yield* showOne(target.json, yield* client.filters.update({ path: { id: o.id }, payload: { enabled: name === "enable" } }))
    })).pipe(Command.withDescription(name === "enable" ? "Enable a filter" : "Disable a filter"))

const filtersRm = Command.make("rm", { id: idArg("filter") }, (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    yield* showOne(target.json, yield* client.filters.remove({ path: { id: o.id } }))
  })).pipe(Command.withDescription("Delete a filter"))

export const filters = Command.make("filters").pipe(
  Command.withDescription("Sender allow/block filters"),
  Command.withSubcommands([filtersList, filtersAdd, setEnabled("enable"), setEnabled("disable"), filtersRm])
)

// --- routes ------------------------------------------------------------------------------------

const routeColumns = [
  col<Route>("id", (r) => r.id),
  col<Route>("pattern", (r) => r.pattern),
  col<Route>("endpoint", (r) => r.endpoint_id),
  col<Route>("created", (r) => r.created_at)
]

const routesList = Command.make("list", paging, (p) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const page = yield* fetchPages(p, (cursor) => client.routes.list({ urlParams: pageParams(p.limit, cursor) }))
    yield* showList(target.json, page, routeColumns)
  })).pipe(Command.withDescription("Recipient routes, newest first"))

const routeTarget = {
  endpointId: uuidOption("endpoint-id", "an active endpoint"),
  functionId: uuidOption("function-id", "a function (its endpoint is reused or created)")
}

const routesAdd = Command.make("add", {
  pattern: Options.text("pattern").pipe(Options.withDescription("support@acme.com, *@acme.com, *+tag@acme.com")),
  ...routeTarget
}, (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const r = yield* client.routes.create({
      payload: { pattern: o.pattern, ...opt("endpoint_id", o.endpointId), ...opt("function_id", o.functionId) },
      headers: {}
    })
    yield* showOne(target.json, r)
  })).pipe(Command.withDescription("Bind a recipient pattern to an endpoint (--endpoint-id) or a function (--function-id)"))

const routesUpdate = Command.make("update", {
  id: idArg("route"),
  pattern: Options.text("pattern").pipe(Options.optional, Options.withDescription("new pattern")),
  ...routeTarget
}, (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const payload = { ...opt("pattern", o.pattern), ...opt("endpoint_id", o.endpointId), ...opt("function_id", o.functionId) }
    if (Object.keys(payload).length === 0) {
      return yield* new CliFailure({ message: "nothing to change: pass --pattern, --endpoint-id or --function-id", usage: true })
    }
    yield* showOne(target.json, yield* client.routes.update({ path: { id: o.id }, payload }))
  })).pipe(Command.withDescription("Change a route's pattern or target"))

const routesRm = Command.make("rm", { id: idArg("route") }, (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    yield* showOne(target.json, yield* client.routes.remove({ path: { id: o.id } }))
  })).pipe(Command.withDescription("Delete a route"))

export const routes = Command.make("routes").pipe(
  Command.withDescription("Recipient routes"),
  Command.withSubcommands([routesList, routesAdd, routesUpdate, routesRm])
)
