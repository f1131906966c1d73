/** Every command's flags, arguments, help and examples (the handlers are in commands/, loaded on use). */
import { choice, flag, idArg, integer, leaf, many, onOff, optionalIdArg, required, text, textArg, uuid } from "./Spec.js"

// --- shared flags ------------------------------------------------------------------------------

const paging = {
  limit: integer("limit", "page size, 1 to 100 (default 50)", { min: 1, max: 100 }),
  cursor: text("cursor", "CURSOR", "continue after the previous page (its meta.cursor)"),
  all: flag("all", "follow the cursors and print every page")
}

const dateRange = {
  from: text("from", "DATE", "created at or after this time (ISO 8601, e.g. 2026-01-31T00:00:00Z)"),
  to: text("to", "DATE", "created at or before this time (ISO 8601)")
}

const deviceName = text("device-name", "NAME", "name of this session in the dashboard (default: the host name)")
const acceptTerms = flag("accept-terms", "accept the terms of service without asking")
const code = text("code", "CODE", "the 6-digit code from the email: verifies the flow already started (without it: asked on stdin)")
const out = text("out", "FILE", "write to this file instead of stdout", { alias: "o" })
const domainId = text("domain-id", "ID|none", "one of the organization's domains, or `none` for organization-wide", {
  field: "domain_id"
})
const confirmed = flag("confirmed", "take mail over although the domain's MX points at another mailbox provider")
const rules = text(
  "rules",
  "JSON",
  "delivery rules as JSON, e.g. '{\"event_types\":[\"email.received\"]}'"
)

/** Examples write ids as a placeholder: a real UUID makes the line too long to read. */
const ID = "<id>"

// --- credentials -------------------------------------------------------------------------------

export const login = leaf({
  name: "login",
  summary: "Log in through the browser and store the tokens in the profile",
  description: "Starts a device authorization: approve the printed code in a browser (opened for you unless " +
    "--no-browser). The access and refresh tokens are stored in the profile, readable only by you.",
  flags: { noBrowser: flag("no-browser", "only print the URL; do not open a browser"), deviceName },
  args: {},
  examples: ["mailroom login", "mailroom login --no-browser --device-name \"build server\""]
})

export const signup = leaf({
  name: "signup",
  summary: "Create an account with your email address and log in",
  description: "A code is mailed to the address; type it when asked. With nothing on stdin (a script, an agent) " +
    "the command stops once the code is mailed; `mailroom signup --email ADDRESS --code CODE` then finishes it. " +
    "A service without an outbound mail relay writes the mail to its dev outbox instead (see the message after " +
    "the code is sent).",
  flags: {
    email: required(text("email", "ADDRESS", "your email address")),
    acceptTerms,
    signupCode: text("signup-code", "CODE", "a reserved sign-up code"),
    code,
    deviceName
  },
  args: {},
  examples: [
    "mailroom signup --email ada@example.com --accept-terms",
    "mailroom signup --email ada@example.com --code 123456"
  ]
})

export const agentCreate = leaf({
  name: "create",
  summary: "Create an emailless agent account and store its API key",
  flags: { acceptTerms, deviceName, force: flag("force", "replace credentials already stored in the profile") },
  args: {},
  examples: ["mailroom agent create --accept-terms", "mailroom agent create --accept-terms --profile bot --json"]
})

export const claim = leaf({
  name: "claim",
  summary: "Claim this agent account for a person (moves it to the developer plan)",
  description: "`--email` mails a code to the person; type it when asked. With nothing on stdin (a script, an " +
    "agent) the command stops once the code is mailed; `mailroom claim --email ADDRESS --code CODE` then verifies " +
    "that code (it does not ask for a new one).",
  flags: {
    email: text("email", "ADDRESS", "the person's email address (a code is mailed to it)"),
    link: flag("link", "print a single-use claim link for a person instead"),
    code
  },
  args: {},
  examples: [
    "mailroom claim --email ada@example.com",
    "mailroom claim --email ada@example.com --code 123456",
    "mailroom claim --link"
  ]
})

export const logout = leaf({
  name: "logout",
  summary: "Revoke this login and remove the stored credentials",
  flags: {},
  args: {},
  examples: ["mailroom logout", "mailroom logout --profile work"]
})

export const whoami = leaf({
  name: "whoami",
  summary: "Show the organization and credential in use",
  flags: {},
  args: {},
  examples: ["mailroom whoami", "mailroom whoami --json"]
})

// --- account -----------------------------------------------------------------------------------

export const accountShow = leaf({
  name: "show",
  summary: "Plan, limits, entitlements and settings",
  flags: {},
  args: {},
  examples: ["mailroom account show --json"]
})

export const accountUpdate = leaf({
  name: "update",
  summary: "Change account settings",
  flags: {
    spamThreshold: text("spam-threshold", "N|none", "reject mail scoring at least this (0 to 15), or `none` to turn it off", {
      field: "spam_threshold"
    }),
    discardContent: onOff("discard-content", "drop stored content once a delivery is confirmed", {
      field: "discard_content_on_webhook_confirmed"
    }),
    sendApproval: choice("send-approval", ["none", "new_recipients", "all"], "which sends wait for approval (mailroom drafts)", {
      field: "send_approval"
    })
  },
  args: {},
  examples: ["mailroom account update --spam-threshold 6", "mailroom account update --discard-content true"]
})

export const accountStorage = leaf({
  name: "storage",
  summary: "Storage used (mail and memories) against the plan's quota",
  flags: {},
  args: {},
  examples: ["mailroom account storage"]
})

export const secretShow = leaf({
  name: "show",
  summary: "The webhook signing secret (created on first read)",
  flags: {},
  args: {},
  examples: ["mailroom secret show", "mailroom secret show --json"]
})

export const secretRotate = leaf({
  name: "rotate",
  summary: "Replace the webhook secret; the old one stops working at once",
  description: "Allowed once per hour.",
  flags: {},
  args: {},
  examples: ["mailroom secret rotate"]
})

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

// --- inboxes -----------------------------------------------------------------------------------

const username = text("username", "NAME", "the local part on the managed domain (letters, digits, '.', '_', '-')")
const displayName = text("display-name", "NAME", "the inbox's display name", { field: "display_name" })

export const inboxesList = leaf({
  name: "list",
  summary: "The organization's inboxes (the default one included), newest first",
  flags: paging,
  args: {},
  examples: ["mailroom inboxes list"]
})

export const inboxesCreate = leaf({
  name: "create",
  summary: "Create an inbox on the managed domain (random username when none is given)",
  description: "Mail to the new address and its +tag forms is stored with the inbox's id; send-mail can use it as " +
    "`from`. Each plan allows `limits.inboxes_max` inboxes, the default one included (`mailroom account`).",
  flags: { username, displayName },
  args: {},
  examples: ["mailroom inboxes create --username support --display-name 'Support'", "mailroom inboxes create"]
})

export const inboxesGet = leaf({
  name: "get",
  summary: "Show one inbox",
  flags: {},
  args: { id: idArg("inbox", "mailroom inboxes list") },
  examples: [`mailroom inboxes get ${ID}`]
})

export const inboxesRename = leaf({
  name: "rename",
  summary: "Change an inbox's username and/or display name",
  description: "A new username changes the address (not for the default inbox, nor while routes use the inbox).",
  flags: {
    username,
    displayName,
    clearDisplayName: flag("clear-display-name", "remove the display name")
  },
  args: { id: idArg("inbox", "mailroom inboxes list") },
  examples: [`mailroom inboxes rename ${ID} --username sales`, `mailroom inboxes rename ${ID} --display-name 'Sales team'`]
})

export const inboxesDelete = leaf({
  name: "delete",
  summary: "Delete an inbox (not the default one, nor one that routes use); its mail stays",
  flags: {},
  args: { id: idArg("inbox", "mailroom inboxes list") },
  examples: [`mailroom inboxes delete ${ID}`]
})

// --- emails ------------------------------------------------------------------------------------

export const emailsList = leaf({
  name: "list",
  summary: "Received emails, newest first",
  flags: {
    ...paging,
    ...dateRange,
    recipient: text("recipient", "ADDRESS", "only mail to this address"),
    sender: text("sender", "ADDRESS", "only mail from this address"),
    eventType: text("event-type", "TYPE", "only this event type, e.g. email.received", { field: "event_type" }),
    status: choice("status", ["accepted", "rejected", "quarantined"], "only accepted, rejected or quarantined mail"),
    includeWake: flag("include-wake", "also list wake firings (event type wake.command), left out by default"),
    label: text("label", "LABEL", "only mail with this label"),
    unread: flag("unread", "only mail not marked read"),
    inboxId: uuid("inbox-id", "only mail that reached this inbox (mailroom inboxes list)", { field: "inbox_id" })
  },
  args: {},
  examples: [
    "mailroom emails list --sender ada@example.com",
    "mailroom emails list --from 2026-01-01T00:00:00Z --all --json",
    "mailroom emails list --include-wake",
    "mailroom emails list --label invoices --unread"
  ]
})

export const emailsLabel = leaf({
  name: "label",
  summary: "Add or remove labels of an email (1-64 of a-z, 0-9, _, : and -; at most 20)",
  flags: {
    add: many("add", "LABEL", "a label to add"),
    remove: many("remove", "LABEL", "a label to remove"),
    clear: flag("clear", "remove every label first")
  },
  args: { id: idArg("email", "mailroom emails list") },
  examples: [`mailroom emails label ${ID} --add invoices --remove inbox`, `mailroom emails label ${ID} --clear`]
})

export const emailsRead = leaf({
  name: "read",
  summary: "Mark an email read",
  flags: {},
  args: { id: idArg("email", "mailroom emails list") },
  examples: [`mailroom emails read ${ID}`]
})

export const emailsUnread = leaf({
  name: "unread",
  summary: "Mark an email unread",
  flags: {},
  args: { id: idArg("email", "mailroom emails list") },
  examples: [`mailroom emails unread ${ID}`]
})

export const emailsQuarantined = leaf({
  name: "quarantined",
  summary: "Mail held back by quarantine filters or the attachment policy, newest first",
  flags: { ...paging },
  args: {},
  examples: ["mailroom emails quarantined"]
})

export const emailsRelease = leaf({
  name: "release",
  summary: "Release a quarantined email: it is delivered now, like new mail",
  flags: {},
  args: { id: idArg("email", "mailroom emails quarantined") },
  examples: [`mailroom emails release ${ID}`]
})

export const emailsGet = leaf({
  name: "get",
  summary: "One email with its text; --json for everything (headers, html, links)",
  flags: {},
  args: { id: idArg("email", "mailroom emails list") },
  examples: [`mailroom emails get ${ID}`]
})

export const emailsRaw = leaf({
  name: "raw",
  summary: "The raw MIME message, to stdout or a file",
  flags: { out },
  args: { id: idArg("email", "mailroom emails list") },
  examples: [`mailroom emails raw ${ID} > message.eml`, `mailroom emails raw ${ID} --out message.eml`]
})

export const emailsAttachments = leaf({
  name: "attachments",
  summary: "Every attachment as .tar.gz, or one with --index",
  flags: { index: integer("index", "one attachment by its position (0-based)", { min: 0 }), out },
  args: { id: idArg("email", "mailroom emails list") },
  examples: [`mailroom emails attachments ${ID} --out attachments.tar.gz`, `mailroom emails attachments ${ID} --index 0 -o invoice.pdf`]
})

// --- deliveries --------------------------------------------------------------------------------

export const deliveriesList = leaf({
  name: "list",
  summary: "Webhook deliveries, newest first",
  flags: {
    ...paging,
    ...dateRange,
    emailId: uuid("email-id", "only this email's deliveries", { field: "email_id" }),
    status: choice("status", ["pending", "delivered", "header_confirmed", "failed"], "only deliveries in this state")
  },
  args: {},
  examples: ["mailroom deliveries list --status failed", "mailroom deliveries list --all --json"]
})

export const deliveriesGet = leaf({
  name: "get",
  summary: "One delivery",
  flags: {},
  args: { id: idArg("delivery", "mailroom deliveries list") },
  examples: [`mailroom deliveries get ${ID}`]
})

export const deliveriesReplay = leaf({
  name: "replay",
  summary: "Send the stored payload again with a fresh signature",
  description: "Exits 1 when the endpoint did not accept it.",
  flags: {},
  args: { id: idArg("delivery", "mailroom deliveries list") },
  examples: [`mailroom deliveries replay ${ID}`]
})

// --- payments ----------------------------------------------------------------------------------

const network = text("network", "CAIP-2", "network, e.g. eip155:84532 (default: the service's first network)")

export const paymentsPolicyShow = leaf({
  name: "show",
  summary: "The spend policy and what was paid today (UTC)",
  flags: {},
  args: {},
  examples: ["mailroom payments policy show", "mailroom payments policy show --json"]
})

export const paymentsPolicySet = leaf({
  name: "set",
  summary: "Change the spend policy: kill-switch, caps, payee allowlist",
  description: "Amounts are USDC decimals such as 2.5. `none` removes a cap; `--allow any` removes the allowlist. " +
    "Options left out keep their value.",
  flags: {
    paused: onOff("paused", "kill-switch: while true every payment is declined"),
    perPaymentCap: text("per-payment-cap", "USDC|none", "largest single payment", { field: "per_payment_cap" }),
    dailyCap: text("daily-cap", "USDC|none", "most paid per UTC day", { field: "daily_cap" }),
    allow: text("allow", "LIST|any", "payees that may be paid: comma-separated organization ids and addresses", {
      field: "payee_allowlist"
    })
  },
  args: {},
  examples: [
    "mailroom payments policy set --per-payment-cap 5 --daily-cap 20",
    "mailroom payments policy set --paused true",
    "mailroom payments policy set --allow <org-id>,<address>"
  ]
})

export const paymentsPayoutSet = leaf({
  name: "set",
  summary: "Set the wallet the organization is paid to on a network",
  flags: {},
  args: {
    network: textArg("network", "CAIP-2 network id, e.g. eip155:84532"),
    address: textArg("address", "EVM address, any case (mixed case must be a valid EIP-55 checksum); shown in EIP-55 form")
  },
  examples: ["mailroom payments payout set eip155:84532 <address>"]
})

export const paymentsPayoutList = leaf({
  name: "list",
  summary: "Payout wallets per network",
  flags: {},
  args: {},
  examples: ["mailroom payments payout list"]
})

export const paymentsChallengesCreate = leaf({
  name: "create",
  summary: "Ask for a payment: an x402 challenge to the organization's payout wallet",
  flags: {
    amount: required(text("amount", "USDC", "amount as a decimal, e.g. 1.5")),
    network,
    description: text("description", "TEXT", "what the payment is for"),
    expiresIn: integer("expires-in", "seconds until it expires (30 to 604800, default 3600)", { min: 30, max: 604_800 }),
    payerAddress: text("payer-address", "ADDRESS", "only this wallet may pay", { field: "payer_address" }),
    deliverTo: text("deliver-to", "EMAIL", "also mail the challenge to this address", { field: "deliver_to" })
  },
  args: {},
  examples: [
    "mailroom payments challenges create --amount 1.5 --description \"report #42\"",
    "mailroom payments challenges create --amount 2 --deliver-to a@example.com"
  ]
})

export const paymentsChallengesList = leaf({
  name: "list",
  summary: "The organization's challenges, newest first",
  flags: { ...paging, status: choice("status", ["pending", "paid", "expired"], "only challenges in this state") },
  args: {},
  examples: ["mailroom payments challenges list --status pending"]
})

export const paymentsChallengesGet = leaf({
  name: "get",
  summary: "One challenge, with its x402 PaymentRequired",
  flags: {},
  args: { id: idArg("challenge", "mailroom payments challenges list") },
  examples: [`mailroom payments challenges get ${ID} --json`]
})

export const paymentsPay = leaf({
  name: "pay",
  summary: "Pay a challenge: sign locally with a key file, then settle",
  description: "Reads the challenge, signs an EIP-3009 authorization for exactly what it asks with the private key " +
    "in --key-file (0x followed by 64 hex digits), and sends the signed payload. The key never leaves this machine. " +
    "With --email instead of a challenge id: reads the challenge a received email carries, signs it, and replies " +
    "to that email with the signed payment; the payee answers by mail with a receipt or a reject.",
  flags: {
    keyFile: required(text("key-file", "FILE", "file holding the payer wallet's private key")),
    email: uuid("email", "pay by replying to this received email (it carries the challenge)")
  },
  args: { id: optionalIdArg("challenge", "mailroom payments challenges list") },
  examples: [
    `mailroom payments pay ${ID} --key-file ~/.config/mailroom/wallet.key`,
    `mailroom payments pay --email ${ID} --key-file wallet.key`
  ]
})

export const paymentsList = leaf({
  name: "list",
  summary: "Payments made and received, newest first",
  flags: {
    ...paging,
    direction: choice("direction", ["in", "out"], "`out`: paid by you; `in`: paid to you"),
    status: choice("status", ["settling", "settled", "failed"], "only payments in this state")
  },
  args: {},
  examples: ["mailroom payments list --direction in", "mailroom payments list --status failed --json"]
})

export const paymentsGet = leaf({
  name: "get",
  summary: "One payment",
  flags: {},
  args: { id: idArg("payment", "mailroom payments list") },
  examples: [`mailroom payments get ${ID}`]
})

// --- listen ------------------------------------------------------------------------------------

export const listen = leaf({
  name: "listen",
  summary: "Forward this organization's new deliveries to a local URL",
  description: "Each delivery is POSTed with its exact body and signature headers, so a local handler verifies " +
    "Mailroom-Signature with the account's webhook secret as in production. No public URL is needed.",
  flags: {
    forwardTo: required(text("forward-to", "URL", "the local URL that receives each delivery", { alias: "f" })),
    maxEvents: integer("max-events", "stop after forwarding this many deliveries (default: until Ctrl-C)", { min: 1 })
  },
  args: {},
  examples: ["mailroom listen --forward-to http://localhost:8000/webhooks", "mailroom listen -f http://localhost:8000/webhooks --json"]
})

// --- mcp ---------------------------------------------------------------------------------------

export const mcp = leaf({
  name: "mcp",
  summary: "Serve Mailroom's MCP tools over stdio, with this profile's credential",
  description: "For an MCP client that starts servers as commands (stdio). The tools are the ones of the service's " +
    "`/mcp` endpoint; each call is the API request it names, made with this profile's credential. Runs until stdin closes.",
  flags: {},
  args: {},
  examples: ["mailroom mcp", "MAILROOM_API_KEY=mr_live_… mailroom mcp"]
})

// --- functions ---------------------------------------------------------------------------------

const secret = many("secret", "NAME=VALUE", "a secret the function reads from `env`; `NAME=` with nothing after removes it")

export const functionsDeploy = leaf({
  name: "deploy",
  summary: "Deploy a JavaScript module as a function (or redeploy the function of that name)",
  description: "The file is one ES module whose default export has `async fetch(request, env)`. The service loads " +
    "it in workerd first and refuses it with workerd's message if it does not load. When the organization already " +
    "has a function of this name, its code (and the given secrets) are replaced: the next invocation sees them. " +
    "A new function, its endpoint and its route are made in one request: if one is refused, nothing is made.",
  flags: {
    name: required(text("name", "NAME", "the function's name: 1-64 of a-z, 0-9 and -")),
    secret,
    route: text("route", "PATTERN", "also route mail for this address pattern (e.g. you@agents.localhost, *@acme.com) to it"),
    endpoint: flag("endpoint", "also create its endpoint, a route target: routes and wakes reach it"),
    fallback: flag("fallback", "make its endpoint the organization-wide fallback: every mail without a route reaches it")
  },
  args: { file: textArg("file", "the module's file, e.g. worker.js") },
  examples: [
    "mailroom functions deploy worker.js --name triage",
    "mailroom functions deploy worker.js --name triage --route support@acme.com"
  ]
})

const functionRef = textArg("function", "the function's id or name (`mailroom functions list` shows them)")

export const functionsList = leaf({
  name: "list",
  summary: "Functions, newest first",
  flags: paging,
  args: {},
  examples: ["mailroom functions list", "mailroom functions list --json"]
})

export const functionsGet = leaf({
  name: "get",
  summary: "One function (with --code: only its module source)",
  flags: { code: flag("code", "print only the module source") },
  args: { id: functionRef },
  examples: [`mailroom functions get ${ID}`, `mailroom functions get ${ID} --code > worker.js`]
})

export const functionsDelete = leaf({
  name: "delete",
  summary: "Delete a function, its endpoint, routes and memories",
  flags: {},
  args: { id: functionRef },
  examples: [`mailroom functions delete ${ID}`]
})

export const functionsInvoke = leaf({
  name: "invoke",
  summary: "Run a function now on a synthetic email.received (or the event in a file)",
  description: "Prints the status, the response and the console output. Exits 1 unless the function answered 2xx.",
  flags: { event: text("event", "FILE", "a JSON file holding the event payload to send instead") },
  args: { id: functionRef },
  examples: [`mailroom functions invoke ${ID}`, `mailroom functions invoke ${ID} --event event.json --json`]
})

export const functionsLogs = leaf({
  name: "logs",
  summary: "A function's invocations: outcome, duration and console output, newest last",
  flags: {
    limit: integer("limit", "how many recent invocations, 1 to 100 (default 20)", { min: 1, max: 100 }),
    follow: flag("follow", "keep printing new invocations as they happen (Ctrl-C ends)", { alias: "f" })
  },
  args: { id: functionRef },
  examples: [`mailroom functions logs ${ID}`, `mailroom functions logs ${ID} --follow`]
})

// --- memories ----------------------------------------------------------------------------------

const memoryScope = text("function", "FUNCTION", "a function's memories (its id or name) instead of the organization's")

export const memoriesList = leaf({
  name: "list",
  summary: "Memory keys in byte order",
  flags: {
    prefix: text("prefix", "TEXT", "only keys starting with this"),
    limit: integer("limit", "page size, 1 to 1000 (default 100)", { min: 1, max: 1000 }),
    cursor: text("cursor", "CURSOR", "continue after the previous page (its meta.cursor)"),
    function: memoryScope
  },
  args: {},
  examples: ["mailroom memories list --prefix sender/", `mailroom memories list --function ${ID}`]
})

export const memoriesGet = leaf({
  name: "get",
  summary: "A memory item's value (with --json: the whole item)",
  flags: { function: memoryScope },
  args: { key: textArg("key", "the item's key") },
  examples: ["mailroom memories get settings", `mailroom memories get last-run --function ${ID} --json`]
})

export const memoriesSet = leaf({
  name: "set",
  summary: "Store a JSON value under a key",
  description: "The value is JSON (`42`, `true`, `'\"text\"'`, `'{\"a\":1}'`); anything that is not JSON is stored " +
    "as a string.",
  flags: {
    ttl: integer("ttl", "seconds until the item expires", { min: 1 }),
    function: memoryScope
  },
  args: { key: textArg("key", "the item's key"), value: textArg("value", "the value, as JSON") },
  examples: ["mailroom memories set settings '{\"tone\":\"brief\"}'", "mailroom memories set greeting hello --ttl 3600"]
})

export const memoriesDelete = leaf({
  name: "delete",
  summary: "Delete a memory item",
  flags: { function: memoryScope },
  args: { key: textArg("key", "the item's key") },
  examples: ["mailroom memories delete settings"]
})

// --- templates ---------------------------------------------------------------------------------

const slugArg = textArg("slug", "the template's slug (`mailroom templates list` shows them)")

export const templatesList = leaf({
  name: "list",
  summary: "Installable function templates (no login needed)",
  flags: {},
  args: {},
  examples: ["mailroom templates list"]
})

export const templatesShow = leaf({
  name: "show",
  summary: "A template's README, secrets and events (--code: only its module)",
  flags: { code: flag("code", "print only the module source") },
  args: { slug: slugArg },
  examples: ["mailroom templates show auto-reply", "mailroom templates show auto-reply --code > worker.js"]
})

export const templatesInstall = leaf({
  name: "install",
  summary: "Install a template as a function with its endpoint (and a route)",
  description: "Creates the function, its endpoint subscribed to the template's events and, with --route, a " +
    "route of that address pattern to it, all or nothing. Without --route the function's endpoint is the " +
    "organization-wide one.",
  flags: {
    name: text("name", "NAME", "the function's name (default: the slug)"),
    secret: many("secret", "NAME=VALUE", "a secret for the function (the template's required ones must be given)"),
    route: text("route", "PATTERN", "route mail for this address pattern to the function, e.g. support@acme.com")
  },
  args: { slug: slugArg },
  examples: [
    "mailroom templates install remember-senders",
    "mailroom templates install forward-to-webhook --secret TARGET_URL=https://…"
  ]
})

// --- registries --------------------------------------------------------------------------------

const registryName = textArg("name", "the registry's name (3-64 of a-z, 0-9 and -), or its id")
const handleArg = textArg("handle", "the entry's handle in the registry")
const policy = choice("policy", ["owner_only", "request", "open"], "who may publish: only you, anyone after your approval, anyone", {
  field: "publish_policy"
})
const entryFields = {
  description: text("description", "TEXT", "what the agent does (at most 500 characters)"),
  capabilities: text("capabilities", "LIST", "comma-separated capabilities, e.g. invoices.read,invoices.pay"),
  metadata: text("metadata", "JSON", "a JSON object, e.g. '{\"model\":\"x\"}' (at most 8 KiB)")
}

export const registriesCreate = leaf({
  name: "create",
  summary: "Create a registry (its name is unique across the service)",
  flags: { description: text("description", "TEXT", "what the registry lists"), policy },
  args: { name: textArg("name", "the registry's name (3-64 of a-z, 0-9 and -)") },
  examples: ["mailroom registries create acme-agents", "mailroom registries create acme-partners --policy request"]
})

export const registriesList = leaf({
  name: "list",
  summary: "Registries, newest first",
  flags: { ...paging, owned: flag("owned", "only the registries this organization owns") },
  args: {},
  examples: ["mailroom registries list", "mailroom registries list --owned --json"]
})

export const registriesShow = leaf({
  name: "show",
  summary: "One registry",
  flags: {},
  args: { name: registryName },
  examples: ["mailroom registries show acme-agents"]
})

export const registriesUpdate = leaf({
  name: "update",
  summary: "Change a registry's description or publish policy (owner only)",
  flags: { description: text("description", "TEXT|none", "the new description, or `none` to clear it"), policy },
  args: { name: registryName },
  examples: ["mailroom registries update acme-agents --policy open"]
})

export const registriesDelete = leaf({
  name: "delete",
  summary: "Delete a registry and every entry in it (owner only)",
  flags: {},
  args: { name: registryName },
  examples: ["mailroom registries delete acme-agents"]
})

export const registriesPublish = leaf({
  name: "publish",
  summary: "Publish an agent under a handle",
  description: "The address must be one this organization can send from: its managed inbox (or a +tag form) or an " +
    "address at one of its verified domains. In a `request` registry of another organization the entry stays " +
    "pending until the owner approves it.",
  flags: {
    handle: required(text("handle", "HANDLE", "1-64 of a-z, 0-9, '.', '_' and '-', unique in the registry")),
    address: required(text("address", "ADDRESS", "the agent's address")),
    ...entryFields
  },
  args: { name: registryName },
  examples: [
    "mailroom registries publish acme-agents --handle bill --address b@acme.com",
    "mailroom registries publish acme --handle desk --address d@acme.com --json"
  ]
})

export const registriesEntries = leaf({
  name: "entries",
  summary: "A registry's entries, newest first (pending ones too for the owner)",
  flags: { ...paging, status: choice("status", ["pending", "published"], "only entries in this state") },
  args: { name: registryName },
  examples: ["mailroom registries entries acme-agents", "mailroom registries entries acme-agents --status pending"]
})

export const registriesEntry = leaf({
  name: "entry",
  summary: "Resolve a handle: one entry with its address",
  flags: {},
  args: { name: registryName, handle: handleArg },
  examples: ["mailroom registries entry acme-agents billing", "mailroom registries entry acme-agents billing --json"]
})

export const registriesUnpublish = leaf({
  name: "unpublish",
  summary: "Remove an entry (its publisher or the registry's owner)",
  flags: {},
  args: { name: registryName, handle: handleArg },
  examples: ["mailroom registries unpublish acme-agents billing"]
})

export const registriesApprove = leaf({
  name: "approve",
  summary: "Publish a pending entry of your registry",
  flags: {},
  args: { name: registryName, handle: handleArg },
  examples: ["mailroom registries approve acme-partners their-agent"]
})

export const registriesReject = leaf({
  name: "reject",
  summary: "Refuse a pending entry of your registry (it is removed, its handle freed)",
  flags: {},
  args: { name: registryName, handle: handleArg },
  examples: ["mailroom registries reject acme-partners their-agent"]
})

// --- wake --------------------------------------------------------------------------------------


export const wakeAdd = leaf({
  name: "add",
  summary: "Schedule a typed command for a function (exactly one of --at, --in, --every, --cron)",
  description: "The function receives it as a signed email: event wake.command with wake {id, type, payload, " +
    "scheduled_for, fired_at, sender, verified}.",
  flags: {
    type: required(text("type", "TYPE", "the command's type: 1-64 of a-z, 0-9, _, . and -")),
    payload: text("payload", "JSON", "the command's payload, as JSON"),
    at: text("at", "TIME", "once, at this time (ISO 8601)"),
    in: text("in", "DELAY", "once, after this delay: 30s, 15m, 2h, 1d"),
    every: text("every", "INTERVAL", "repeatedly, every interval (at least 1m)"),
    cron: text("cron", "EXPR", "on a 5-field cron schedule, in UTC, e.g. '0 8 * * *'")
  },
  args: { fn: functionRef },
  examples: ["mailroom wake add triage --type digest --cron '0 8 * * *'", "mailroom wake add triage --type ping --in 15m"]
})

export const wakeWatch = leaf({
  name: "watch",
  summary: "Wake a function unless mail joins a thread in time",
  description: "The watch ends by itself (canceled, reason replied) when received mail joins the thread in time; " +
    "otherwise the function gets event wake.command with wake.thread_id. `mailroom wake cancel <id>` stops it.",
  flags: {
    within: required(text("within", "DELAY", "how long to wait: 30m, 48h, 7d")),
    fn: required(text("function", "FUNCTION", "the function to wake (id or name)")),
    type: required(text("type", "TYPE", "the command's type: 1-64 of a-z, 0-9, _, . and -")),
    payload: text("payload", "JSON", "the command's payload, as JSON")
  },
  args: { thread: idArg("thread", "mailroom threads list") },
  examples: ["mailroom wake watch <thread-id> --within 48h --function triage --type nudge"]
})

export const wakeList = leaf({
  name: "list",
  summary: "Wakes, newest first",
  flags: {
    ...paging,
    function: text("function", "FUNCTION", "only this function's wakes (its id or name)", { field: "function_id" }),
    status: choice("status", ["scheduled", "completed", "canceled"], "only wakes in this state")
  },
  args: {},
  examples: ["mailroom wake list --status scheduled"]
})

export const wakeCancel = leaf({
  name: "cancel",
  summary: "Cancel a wake (it never fires again)",
  flags: {},
  args: { id: idArg("wake", "mailroom wake list") },
  examples: [`mailroom wake cancel ${ID}`]
})

export const wakeRun = leaf({
  name: "run",
  summary: "Fire a wake now (its schedule is unchanged)",
  flags: {},
  args: { id: idArg("wake", "mailroom wake list") },
  examples: [`mailroom wake run ${ID}`]
})

export const wakeAllowlistGet = leaf({
  name: "get",
  summary: "Who may mail commands to a function's wake address",
  flags: {},
  args: { fn: functionRef },
  examples: ["mailroom wake allowlist get triage"]
})

export const wakeAllowlistSet = leaf({
  name: "set",
  summary: "Replace the senders allowed to mail commands (none given: nobody)",
  flags: { sender: many("sender", "ADDRESS|@DOMAIN", "an allowed sender address, or @domain for all of a domain") },
  args: { fn: functionRef },
  examples: ["mailroom wake allowlist set triage --sender ops@acme.com --sender @acme.com"]
})

// --- demo --------------------------------------------------------------------------------------

export const demoAccount = leaf({
  name: "account",
  summary: "The demo agent's account (no login needed)",
  flags: {},
  args: {},
  examples: ["mailroom demo account"]
})

export const demoEmails = leaf({
  name: "emails",
  summary: "The demo mailbox, newest first, with the filters of `emails list` (no login needed)",
  flags: {
    ...paging,
    ...dateRange,
    sender: text("sender", "ADDRESS", "only mail from this address"),
    status: choice("status", ["accepted", "rejected"], "only accepted or rejected mail")
  },
  args: {},
  examples: ["mailroom demo emails", "mailroom demo emails --sender maria@northwind.example --json"]
})

export const demoEmail = leaf({
  name: "email",
  summary: "One demo email with its text (no login needed)",
  flags: {},
  args: { id: idArg("email", "mailroom demo emails") },
  examples: ["mailroom demo email <id>"]
})

export const demoThreads = leaf({
  name: "threads",
  summary: "The demo's conversations, last activity first (no login needed)",
  flags: { ...paging, participant: text("participant", "ADDRESS", "only threads with this address") },
  args: {},
  examples: ["mailroom demo threads", "mailroom demo threads --participant maria@northwind.example"]
})

export const demoThread = leaf({
  name: "thread",
  summary: "One demo conversation with its messages, oldest first (no login needed)",
  flags: {},
  args: { id: idArg("thread", "mailroom demo threads") },
  examples: ["mailroom demo thread <id>"]
})

export const demoSearch = leaf({
  name: "search",
  summary: "Search the demo mailbox like `mailroom search` (no login needed)",
  flags: {
    mode: choice("mode", ["hybrid", "lexical", "semantic"], "how to search (default hybrid)"),
    scope: choice("scope", ["all", "received", "sent"], "which mail (default all)"),
    limit: integer("limit", "results, 1 to 50 (default 20)", { min: 1, max: 50 })
  },
  args: { query: textArg("query", "what to look for, 1 to 500 characters") },
  examples: ["mailroom demo search invoice", "mailroom demo search \"moving a meeting\" --mode semantic"]
})

export const demoDeliveries = leaf({
  name: "deliveries",
  summary: "The demo's webhook deliveries (no login needed)",
  flags: { ...paging, status: choice("status", ["pending", "delivered", "header_confirmed", "failed"], "only deliveries in this state") },
  args: {},
  examples: ["mailroom demo deliveries --status pending"]
})

// --- threads and search ------------------------------------------------------------------------

export const threadsList = leaf({
  name: "list",
  summary: "Conversations across received and sent mail, last activity first",
  flags: {
    ...paging,
    from: text("from", "DATE", "last activity at or after this time (ISO 8601)"),
    to: text("to", "DATE", "last activity at or before this time (ISO 8601)"),
    participant: text("participant", "ADDRESS", "only threads with a message from, to or cc this address"),
    includeWake: flag("include-wake", "also count wake firings, and list threads made only of them (left out by default)"),
    inboxId: uuid("inbox-id", "only threads with mail received at or sent from this inbox", { field: "inbox_id" })
  },
  args: {},
  examples: ["mailroom threads list", "mailroom threads list --participant ada@example.com --json", "mailroom threads list --include-wake"]
})

export const threadsGet = leaf({
  name: "get",
  summary: "One conversation with its messages, oldest first",
  flags: {},
  args: { id: idArg("thread", "mailroom threads list") },
  examples: [`mailroom threads get ${ID}`]
})

export const search = leaf({
  name: "search",
  summary: "Search received and sent mail (hybrid by default: full-text and meaning)",
  description: "Lexical syntax: \"a phrase\", -exclude, or. Semantic search finds mail by meaning (it need not share " +
    "a word with the query); hybrid fuses both. The table shows which legs found each message. Needs the search " +
    "entitlement (developer plan and above).",
  flags: {
    mode: choice("mode", ["hybrid", "lexical", "semantic"], "how to search (default hybrid)"),
    scope: choice("scope", ["all", "received", "sent"], "which mail (default all)"),
    limit: integer("limit", "results, 1 to 50 (default 20)", { min: 1, max: 50 }),
    from: text("from", "ADDRESS", "only mail from this address"),
    to: text("to", "ADDRESS", "only mail to (or cc) this address"),
    dateFrom: text("date-from", "DATE", "on or after this time (ISO 8601)"),
    dateTo: text("date-to", "DATE", "on or before this time (ISO 8601)"),
    thread: uuid("thread", "only this thread's messages", { field: "thread_id" }),
    inboxId: uuid("inbox-id", "only mail received at or sent from this inbox", { field: "inbox_id" })
  },
  args: { query: textArg("query", "what to look for, 1 to 500 characters") },
  examples: [
    "mailroom search \"invoice march\"",
    "mailroom search \"flight to Berlin\" --mode semantic --scope received",
    "mailroom search '\"quarterly report\" -draft' --mode lexical --json"
  ]
})

// --- sending -----------------------------------------------------------------------------------

const sendAt = text("at", "TIME", "send later: ISO 8601, or a delay (30s, 15m, 2h, 1d); at most 30 days", {
  field: "send_at"
})
const idempotencyKey = text("idempotency-key", "KEY", "a retry with the same key gets the first answer (24 h)")
const attach = many("attach", "FILE", "attach this file; 10 MiB in all", { field: "attachments" })
const htmlFile = text("html-file", "FILE", "the HTML body, read from this file", { field: "html" })
const textFile = text("text-file", "FILE", "the plain-text body, read from this file (- for stdin)")
const fromAddress = text("from", "ADDRESS", "send as this address (default: the one it was received at)")

export const send = leaf({
  name: "send",
  summary: "Send an email now, or later with --at",
  description: "--from is the organization's inbox address (or a +tag form) or an address at a verified domain; " +
    "without it, the organization's only address (its inbox, when it has no verified domain). " +
    "Recipients are `addr`, `Name <addr>` or `registry:<name>/<handle>`. Give a body with --text, --text-file or " +
    "--html-file (text and HTML together make a multipart/alternative message). A reply-only agent account may " +
    "only write to addresses that wrote to it first: a refused recipient is listed with its fix.",
  flags: {
    from: text("from", "ADDRESS", "the sender: `addr` or `Name <addr>` (default: the organization's only address)"),
    to: many("to", "ADDRESS", "a recipient"),
    cc: many("cc", "ADDRESS", "a copy recipient"),
    bcc: many("bcc", "ADDRESS", "a blind copy recipient (not in the headers)"),
    replyTo: text("reply-to", "ADDRESS", "where replies should go"),
    subject: required(text("subject", "TEXT", "the subject line")),
    text: text("text", "TEXT", "the plain-text body"),
    textFile,
    htmlFile,
    attach,
    at: sendAt,
    idempotencyKey
  },
  args: {},
  examples: [
    "mailroom send --to ada@example.com --subject Hi --text Hi",
    "mailroom send --from me@acme.com --to ada@example.com --subject Q3 \\\n" +
      "    --text-file body.txt --attach q3.pdf --at 2026-12-01T08:00:00Z"
  ]
})

export const sendBatch = leaf({
  name: "send-batch",
  summary: "Send up to 100 emails in one request, from a JSON file",
  description: "The file holds a JSON array of send-mail bodies ({from?, to, cc?, bcc?, subject, text?, html?, …}), or " +
    "{\"messages\": [...]}. Each message is checked, counted and sent on its own: one that fails is listed with " +
    "its error code and the others are still sent.",
  flags: {
    file: required(text("file", "FILE", "the messages as JSON (- for stdin)")),
    idempotencyKey
  },
  args: {},
  examples: ["mailroom send-batch --file messages.json", "mailroom send-batch --file - --json < messages.json"]
})

export const suppressionsList = leaf({
  name: "list",
  summary: "Addresses sends refuse after a hard bounce or complaint, newest first",
  flags: { ...paging },
  args: {},
  examples: ["mailroom suppressions list", "mailroom suppressions list --all --json"]
})

export const suppressionsRm = leaf({
  name: "rm",
  summary: "Mail an address again: remove it from the suppression list",
  flags: {},
  args: { address: textArg("address", "the suppressed address") },
  examples: ["mailroom suppressions rm ada@example.com"]
})

export const reply = leaf({
  name: "reply",
  summary: "Reply to a received email (threaded, Re: subject)",
  description: "The reply goes to the original's Reply-To, else its From; --all also to its To and Cc, minus the " +
    "organization's own addresses. Mail that was rejected, has no sender to answer or is an automatic " +
    "message cannot be replied to (inbound_not_repliable).",
  flags: {
    text: text("text", "TEXT", "the plain-text body"),
    textFile,
    htmlFile,
    all: flag("all", "reply to all: also the original's To and Cc", { field: "reply_all" }),
    from: fromAddress,
    attach,
    at: sendAt,
    idempotencyKey
  },
  args: { id: idArg("email", "mailroom emails list") },
  examples: [`mailroom reply ${ID} --text "Thanks, done."`, `mailroom reply ${ID} --all --html-file answer.html`]
})

export const forward = leaf({
  name: "forward",
  summary: "Forward a received email, attached as message/rfc822",
  flags: {
    to: many("to", "ADDRESS", "a recipient"),
    text: text("text", "TEXT", "a note above the forwarded message"),
    from: fromAddress,
    idempotencyKey
  },
  args: { id: idArg("email", "mailroom emails list") },
  examples: [`mailroom forward ${ID} --to ops@acme.com --text "FYI"`]
})

export const sentList = leaf({
  name: "list",
  summary: "Sent and scheduled emails, newest first",
  flags: {
    ...paging,
    status: choice("status", ["scheduled", "sending", "sent", "failed", "canceled", "bounced", "complained"], "only emails in this state"),
    to: text("to", "ADDRESS", "only emails with this recipient (to, cc or bcc)"),
    dateFrom: text("date-from", "DATE", "created at or after this time (ISO 8601)"),
    dateTo: text("date-to", "DATE", "created at or before this time (ISO 8601)"),
    inboxId: uuid("inbox-id", "only emails sent from this inbox", { field: "inbox_id" })
  },
  args: {},
  examples: ["mailroom sent list --status scheduled", "mailroom sent list --to ada@example.com --all --json"]
})

export const sentGet = leaf({
  name: "get",
  summary: "One sent email with its text and attachments (--json: also the HTML)",
  flags: {},
  args: { id: idArg("sent email", "mailroom sent list") },
  examples: [`mailroom sent get ${ID}`]
})

export const sentCancel = leaf({
  name: "cancel",
  summary: "Cancel a scheduled send",
  flags: {},
  args: { id: idArg("sent email", "mailroom sent list") },
  examples: [`mailroom sent cancel ${ID}`]
})

export const sentReschedule = leaf({
  name: "reschedule",
  summary: "Move a scheduled send to another time",
  flags: { at: required(sendAt) },
  args: { id: idArg("sent email", "mailroom sent list") },
  examples: [`mailroom sent reschedule ${ID} --at 2026-12-01T08:00:00Z`, `mailroom sent reschedule ${ID} --at 2h`]
})

export const outboundStatus = leaf({
  name: "status",
  summary: "The outbound relay, the send quotas and their use, scheduled sends",
  flags: {},
  args: {},
  examples: ["mailroom outbound status", "mailroom outbound status --json"]
})
