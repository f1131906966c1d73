/** Specs of `domains`, `endpoints`, `filters` and `routes`: where inbound mail is accepted and delivered. */
import { choice, flag, idArg, leaf, many, onOff, required, text, textArg, uuid } from "../Spec.js"
import { ID, paging } from "./shared.js"

const domainId = text("domain-id", "ID|none", "one of the organization's domains, or `none` for organization-wide", {
  field: "domain_id"
})
const confirmed = flag("confirmed", "take mail over although the domain's MX points at another mailbox provider")
const rules = text(
  "rules",
  "JSON",
  "delivery rules as JSON, e.g. '{\"event_types\":[\"email.received\"]}'"
)

// --- domains -----------------------------------------------------------------------------------

export const domainsList = leaf({
  name: "list",
  summary: "Domains, newest first",
  flags: paging,
  args: {},
  examples: ["mailroom domains list", "mailroom domains list --all --json"]
})

export const domainsAdd = leaf({
  name: "add",
  summary: "Claim a domain; publish the printed DNS records, then verify it",
  flags: { confirmed },
  args: { domain: textArg("domain", "the domain, e.g. acme.com") },
  examples: ["mailroom domains add acme.com"]
})

export const domainsVerify = leaf({
  name: "verify",
  summary: "Check the domain's DNS records",
  flags: { confirmed },
  args: { id: idArg("domain", "mailroom domains list") },
  examples: [`mailroom domains verify ${ID}`]
})

export const domainsRm = leaf({
  name: "rm",
  summary: "Remove a domain (its endpoints are deactivated, its routes and filters deleted)",
  flags: {},
  args: { id: idArg("domain", "mailroom domains list") },
  examples: [`mailroom domains rm ${ID}`]
})

// --- endpoints ---------------------------------------------------------------------------------

export const endpointsList = leaf({
  name: "list",
  summary: "Active endpoints, newest first",
  flags: paging,
  args: {},
  examples: ["mailroom endpoints list", "mailroom endpoints list --json"]
})

export const endpointsAdd = leaf({
  name: "add",
  summary: "Create a delivery endpoint",
  description: "A webhook (`--url`) receives each event as a signed POST; a function endpoint runs one of the " +
    "organization's functions.",
  flags: {
    url: text("url", "URL", "the https URL that receives the events (http kind)"),
    kind: choice("kind", ["http", "function"], "the endpoint's kind (default http)"),
    functionId: text("function-id", "FUNCTION", "the function to run, by id or name (function kind)", { field: "function_id" }),
    disabled: flag("disabled", "create it disabled"),
    domainId,
    routeTarget: flag("route-target", "reachable only through routes, not for every inbound email", {
      field: "is_route_target"
    }),
    rules
  },
  args: {},
  examples: [
    "mailroom endpoints add --url https://example.com/hooks/mail",
    "mailroom endpoints add --url https://example.com/support --route-target",
    `mailroom endpoints add --kind function --function-id ${ID}`
  ]
})

export const endpointsUpdate = leaf({
  name: "update",
  summary: "Change an endpoint's URL, state, domain or rules",
  flags: {
    url: text("url", "URL", "the new URL"),
    enabled: onOff("enabled", "turn the endpoint on or off"),
    domainId,
    rules
  },
  args: { id: idArg("endpoint", "mailroom endpoints list") },
  examples: [`mailroom endpoints update ${ID} --enabled false`]
})

export const endpointsRm = leaf({
  name: "rm",
  summary: "Deactivate an endpoint (its routes are removed)",
  flags: {},
  args: { id: idArg("endpoint", "mailroom endpoints list") },
  examples: [`mailroom endpoints rm ${ID}`]
})

export const endpointsTest = leaf({
  name: "test",
  summary: "Send a signed synthetic email.received to the endpoint",
  description: "Exits 1 when the endpoint did not accept it.",
  flags: {},
  args: { id: idArg("endpoint", "mailroom endpoints list") },
  examples: [`mailroom endpoints test ${ID}`]
})

// --- filters -----------------------------------------------------------------------------------

export const filtersList = leaf({
  name: "list",
  summary: "Sender filters, newest first",
  flags: paging,
  args: {},
  examples: ["mailroom filters list"]
})

export const filtersAdd = leaf({
  name: "add",
  summary: "Create a sender filter",
  flags: {
    type: required(choice("type", ["whitelist", "blocklist", "registry", "quarantine"], "accept only these senders, refuse them, " +
      "accept senders verified as entries of a registry, or hold back mail raising trust signals")),
    pattern: text("pattern", "PATTERN", "alice@acme.com, @acme.com or *.acme.com; for registry: its name; optional for quarantine"),
    signals: many("signal", "SIGNAL", "quarantine: a trust signal that holds mail back, e.g. ai_instructions, executable_attachment"),
    domainId
  },
  args: {},
  examples: [
    "mailroom filters add --type blocklist --pattern @spam.example",
    "mailroom filters add --type registry --pattern acme-agents",
    "mailroom filters add --type quarantine --signal hidden_text"
  ]
})

export const filtersEnable = leaf({
  name: "enable",
  summary: "Enable a filter",
  flags: {},
  args: { id: idArg("filter", "mailroom filters list") },
  examples: [`mailroom filters enable ${ID}`]
})

export const filtersDisable = leaf({
  name: "disable",
  summary: "Disable a filter",
  flags: {},
  args: { id: idArg("filter", "mailroom filters list") },
  examples: [`mailroom filters disable ${ID}`]
})

export const filtersRm = leaf({
  name: "rm",
  summary: "Delete a filter",
  flags: {},
  args: { id: idArg("filter", "mailroom filters list") },
  examples: [`mailroom filters rm ${ID}`]
})

// --- routes ------------------------------------------------------------------------------------

const routeTarget = {
  endpointId: uuid("endpoint-id", "an active endpoint", { field: "endpoint_id" }),
  functionId: text("function-id", "FUNCTION", "a function by id or name (its endpoint is reused or created)", { field: "function_id" })
}

export const routesList = leaf({
  name: "list",
  summary: "Recipient routes, newest first",
  flags: paging,
  args: {},
  examples: ["mailroom routes list"]
})

export const routesAdd = leaf({
  name: "add",
  summary: "Bind a recipient pattern to an endpoint or a function",
  flags: {
    pattern: required(text("pattern", "PATTERN", "support@acme.com, *@acme.com or *+tag@acme.com")),
    ...routeTarget
  },
  args: {},
  examples: [`mailroom routes add --pattern 'support@acme.com' --endpoint-id ${ID}`]
})

export const routesUpdate = leaf({
  name: "update",
  summary: "Change a route's pattern or target",
  flags: { pattern: text("pattern", "PATTERN", "the new pattern"), ...routeTarget },
  args: { id: idArg("route", "mailroom routes list") },
  examples: [`mailroom routes update ${ID} --pattern '*@acme.com'`]
})

export const routesRm = leaf({
  name: "rm",
  summary: "Delete a route",
  flags: {},
  args: { id: idArg("route", "mailroom routes list") },
  examples: [`mailroom routes rm ${ID}`]
})
