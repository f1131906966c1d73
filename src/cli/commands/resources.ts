/** `domains`, `endpoints`, `filters` and `routes`. */
import { Console, Effect, Option } from "effect"
import type { Domain } from "../../domains/Api.js"
import { type Endpoint, Rules } from "../../endpoints/Api.js"
import type { Filter } from "../../filters/Api.js"
import type { Route } from "../../routes/Api.js"
import type { Signal as SignalName } from "../../mail/Signals.js"
import { CliFailure } from "../Failure.js"
import { col, showList, showOne } from "../Output.js"
import { authedClient } from "../Session.js"
import type { Handler } from "../Spec.js"
import type * as S from "../Specs.js"
import { fetchPages, opt, pageParams, parseJsonOption } from "./common.js"
import { optionalFunctionId } from "./refs.js"

/** `--domain-id UUID` or `--domain-id none` (organization-wide). */
const domainIdValue = (v: Option.Option<string>) =>
  Option.match(v, {
    onNone: () => Effect.succeed({}),
    onSome: (id) =>
      id === "none"
        ? Effect.succeed({ domain_id: null })
        : /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(id)
        ? Effect.succeed({ domain_id: id })
        : Effect.fail(
          new CliFailure({
            message: `--domain-id: "${id}" is neither a UUID nor \`none\` (\`mailroom domains list\` shows the ids)`,
            usage: true
          })
        )
  })

// --- domains -----------------------------------------------------------------------------------

const domainColumns = [
  col<Domain>("id", (d) => d.id),
  col<Domain>("domain", (d) => d.domain),
  col<Domain>("verified", (d) => d.verified),
  col<Domain>("active", (d) => (d.verified ? d.is_active : "-")),
  col<Domain>("created", (d) => d.created_at)
]

export const domainsList: Handler<typeof S.domainsList> = (p) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const page = yield* fetchPages(p, (cursor) => client.domains.list({ urlParams: pageParams(p.limit, cursor) }))
    yield* showList(target.json, page, domainColumns)
  })

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

export const domainsAdd: Handler<typeof S.domainsAdd> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const d = yield* client.domains.claim({
      payload: { domain: o.domain, ...(o.confirmed ? { confirmed: true } : {}) },
      headers: {}
    })
    yield* showDomain(target.json, d)
  })

export const domainsVerify: Handler<typeof S.domainsVerify> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const d = yield* client.domains.verify({
      path: { id: o.id },
      payload: o.confirmed ? { confirmed: true } : {},
      headers: {}
    })
    yield* showDomain(target.json, d)
  })

export const domainsRm: Handler<typeof S.domainsRm> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    yield* showOne(target.json, yield* client.domains.remove({ path: { id: o.id } }))
  })

// --- endpoints ---------------------------------------------------------------------------------

const endpointColumns = [
  col<Endpoint>("id", (e) => e.id),
  col<Endpoint>("kind", (e) => e.kind),
  col<Endpoint>("url", (e) => e.url ?? `function://${e.function_id}`),
  col<Endpoint>("enabled", (e) => e.enabled),
  col<Endpoint>("domain", (e) => e.domain_id ?? "(all)"),
  col<Endpoint>("route target", (e) => e.is_route_target)
]

export const endpointsList: Handler<typeof S.endpointsList> = (p) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const page = yield* fetchPages(p, (cursor) => client.endpoints.list({ urlParams: pageParams(p.limit, cursor) }))
    yield* showList(target.json, page, endpointColumns)
  })

export const endpointsAdd: Handler<typeof S.endpointsAdd> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const rules = yield* parseJsonOption("rules", Rules, o.rules)
    const domain = yield* domainIdValue(o.domainId)
    const created = yield* client.endpoints.create({
      payload: {
        ...opt("url", o.url),
        ...opt("kind", o.kind),
        ...opt("function_id", yield* optionalFunctionId(client, o.functionId)),
        ...(o.disabled ? { enabled: false } : {}),
        ...domain,
        ...(o.routeTarget ? { is_route_target: true } : {}),
        ...opt("rules", rules)
      },
      headers: {}
    })
    yield* showOne(target.json, created)
  })

export const endpointsUpdate: Handler<typeof S.endpointsUpdate> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const rules = yield* parseJsonOption("rules", Rules, o.rules)
    const domain = yield* domainIdValue(o.domainId)
    const payload = { ...opt("url", o.url), ...opt("enabled", o.enabled), ...domain, ...opt("rules", rules) }
    if (Object.keys(payload).length === 0) {
      return yield* new CliFailure({ message: "nothing to change: pass --url, --enabled, --domain-id or --rules", usage: true })
    }
    yield* showOne(target.json, yield* client.endpoints.update({ path: { id: o.id }, payload }))
  })

export const endpointsRm: Handler<typeof S.endpointsRm> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    yield* showOne(target.json, yield* client.endpoints.remove({ path: { id: o.id } }))
  })

export const endpointsTest: Handler<typeof S.endpointsTest> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const result = yield* client.endpoints.test({ path: { id: o.id }, headers: {} })
    yield* showOne(target.json, result)
    if (!result.delivered) {
      return yield* new CliFailure({ message: `the test was not delivered: ${result.error ?? `HTTP ${result.status_code}`}` })
    }
  })

// --- filters -----------------------------------------------------------------------------------

const filterColumns = [
  col<Filter>("id", (f) => f.id),
  col<Filter>("type", (f) => f.type),
  col<Filter>("pattern", (f) => f.pattern ?? (f.signals ?? []).join(",")),
  col<Filter>("domain", (f) => f.domain_id ?? "(all)"),
  col<Filter>("enabled", (f) => f.enabled)
]

export const filtersList: Handler<typeof S.filtersList> = (p) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const page = yield* fetchPages(p, (cursor) => client.filters.list({ urlParams: pageParams(p.limit, cursor) }))
    yield* showList(target.json, page, filterColumns)
  })

export const filtersAdd: Handler<typeof S.filtersAdd> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const domain = yield* domainIdValue(o.domainId)
    const f = yield* client.filters.create({
      payload: {
        type: o.type,
        ...opt("pattern", o.pattern),
        ...(o.signals.length > 0 ? { signals: o.signals as ReadonlyArray<SignalName> } : {}),
        ...domain
      },
      headers: {}
    })
    yield* showOne(target.json, f)
  })

const setEnabled = (enabled: boolean) => (o: { readonly id: string }) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    yield* showOne(target.json, yield* client.filters.update({ path: { id: o.id }, payload: { enabled } }))
  })

export const filtersEnable: Handler<typeof S.filtersEnable> = setEnabled(true)
export const filtersDisable: Handler<typeof S.filtersDisable> = setEnabled(false)

export const filtersRm: Handler<typeof S.filtersRm> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    yield* showOne(target.json, yield* client.filters.remove({ path: { id: o.id } }))
  })

// --- routes ------------------------------------------------------------------------------------

const routeColumns = [
  col<Route>("id", (r) => r.id),
  col<Route>("pattern", (r) => r.pattern),
  col<Route>("endpoint", (r) => r.endpoint_id),
  col<Route>("created", (r) => r.created_at)
]

export const routesList: Handler<typeof S.routesList> = (p) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const page = yield* fetchPages(p, (cursor) => client.routes.list({ urlParams: pageParams(p.limit, cursor) }))
    yield* showList(target.json, page, routeColumns)
  })

export const routesAdd: Handler<typeof S.routesAdd> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const r = yield* client.routes.create({
      payload: { pattern: o.pattern, ...opt("endpoint_id", o.endpointId), ...opt("function_id", yield* optionalFunctionId(client, o.functionId)) },
      headers: {}
    })
    yield* showOne(target.json, r)
  })

export const routesUpdate: Handler<typeof S.routesUpdate> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const payload = {
      ...opt("pattern", o.pattern),
      ...opt("endpoint_id", o.endpointId),
      ...opt("function_id", yield* optionalFunctionId(client, o.functionId))
    }
    if (Object.keys(payload).length === 0) {
      return yield* new CliFailure({ message: "nothing to change: pass --pattern, --endpoint-id or --function-id", usage: true })
    }
    yield* showOne(target.json, yield* client.routes.update({ path: { id: o.id }, payload }))
  })

export const routesRm: Handler<typeof S.routesRm> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    yield* showOne(target.json, yield* client.routes.remove({ path: { id: o.id } }))
  })
