/**
 * The command tree: groups, their commands, and where each handler lives. Handlers are imported on
 * use, so a command loads the API client and Effect only when it runs, and `--help` loads neither.
 */
import { globalFlags } from "./Root.js"
import type { Handler, LeafSpec } from "./Spec.js"
import * as S from "./Specs.js"
import * as O from "./OversightSpecs.js"

export interface Leaf {
  readonly kind: "leaf"
  readonly spec: LeafSpec
  readonly load: () => Promise<Handler<LeafSpec>>
}

export interface Group {
  readonly kind: "group"
  readonly name: string
  readonly summary: string
  readonly examples: ReadonlyArray<string>
  readonly children: ReadonlyArray<Node>
}

export type Node = Leaf | Group

/** Pairs a spec with its handler; the handler's parameter type is checked against the spec. */
const cmd = <Spec extends LeafSpec>(spec: Spec, load: () => Promise<Handler<Spec>>): Leaf => ({
  kind: "leaf",
  spec,
  // The parser builds the values from this same spec, so they have the shape the handler declares.
  load: load as unknown as () => Promise<Handler<LeafSpec>>
})

const group = (name: string, summary: string, examples: ReadonlyArray<string>, children: ReadonlyArray<Node>): Group => ({
  kind: "group",
  name,
  summary,
  examples,
  children
})

const auth = () => import("./commands/auth.js")
const account = () => import("./commands/account.js")
const resources = () => import("./commands/resources.js")
const inboxes = () => import("./commands/inboxes.js")
const mail = () => import("./commands/mail.js")
const functions = () => import("./commands/functions.js")
const wake = () => import("./commands/wake.js")
const registries = () => import("./commands/registries.js")
const demo = () => import("./commands/demo.js")
const payments = () => import("./commands/payments.js")
const conversations = () => import("./commands/conversations.js")
const sending = () => import("./commands/sending.js")
const oversight = () => import("./commands/oversight.js")

export { globalFlags }

export const root: Group = group(
  "mailroom",
  "Mailroom from the terminal: inboxes, domains, endpoints, deliveries, functions and local forwarding.",
  [
    "mailroom agent create --accept-terms",
    "mailroom endpoints add --url https://example.com/hooks/mail",
    "mailroom listen --forward-to http://localhost:8000/webhooks",
    "mailroom deliveries list --status failed --json"
  ],
  [
    cmd(S.login, () => auth().then((m) => m.login)),
    cmd(S.signup, () => auth().then((m) => m.signup)),
    group("agent", "Agent accounts", ["mailroom agent create --accept-terms"], [
      cmd(S.agentCreate, () => auth().then((m) => m.agentCreate))
    ]),
    cmd(S.claim, () => auth().then((m) => m.claim)),
    cmd(S.logout, () => auth().then((m) => m.logout)),
    cmd(S.whoami, () => auth().then((m) => m.whoami)),
    group("account", "The organization's account", ["mailroom account show", "mailroom account update --spam-threshold 6"], [
      cmd(S.accountShow, () => account().then((m) => m.show)),
      cmd(S.accountUpdate, () => account().then((m) => m.update)),
      cmd(S.accountStorage, () => account().then((m) => m.storage))
    ]),
    group("secret", "The webhook signing secret", ["mailroom secret show", "mailroom secret rotate"], [
      cmd(S.secretShow, () => account().then((m) => m.secretShow)),
      cmd(S.secretRotate, () => account().then((m) => m.secretRotate))
    ]),
    group("domains", "Email domains", ["mailroom domains add acme.com", "mailroom domains list"], [
      cmd(S.domainsList, () => resources().then((m) => m.domainsList)),
      cmd(S.domainsAdd, () => resources().then((m) => m.domainsAdd)),
      cmd(S.domainsVerify, () => resources().then((m) => m.domainsVerify)),
      cmd(S.domainsRm, () => resources().then((m) => m.domainsRm))
    ]),
    group("endpoints", "Delivery endpoints (webhooks and functions)", [
      "mailroom endpoints add --url https://example.com/hooks/mail",
      "mailroom endpoints list",
      "mailroom endpoints test <id>"
    ], [
      cmd(S.endpointsList, () => resources().then((m) => m.endpointsList)),
      cmd(S.endpointsAdd, () => resources().then((m) => m.endpointsAdd)),
      cmd(S.endpointsUpdate, () => resources().then((m) => m.endpointsUpdate)),
      cmd(S.endpointsRm, () => resources().then((m) => m.endpointsRm)),
      cmd(S.endpointsTest, () => resources().then((m) => m.endpointsTest))
    ]),
    group("filters", "Sender allow and block filters", ["mailroom filters add --type blocklist --pattern @spam.example"], [
      cmd(S.filtersList, () => resources().then((m) => m.filtersList)),
      cmd(S.filtersAdd, () => resources().then((m) => m.filtersAdd)),
      cmd(S.filtersEnable, () => resources().then((m) => m.filtersEnable)),
      cmd(S.filtersDisable, () => resources().then((m) => m.filtersDisable)),
      cmd(S.filtersRm, () => resources().then((m) => m.filtersRm))
    ]),
    group("routes", "Recipient routes", ["mailroom routes add --pattern 'support@acme.com' --endpoint-id <id>"], [
      cmd(S.routesList, () => resources().then((m) => m.routesList)),
      cmd(S.routesAdd, () => resources().then((m) => m.routesAdd)),
      cmd(S.routesUpdate, () => resources().then((m) => m.routesUpdate)),
      cmd(S.routesRm, () => resources().then((m) => m.routesRm))
    ]),
    group("inboxes", "Addresses on the managed domain", ["mailroom inboxes create --username support"], [
      cmd(S.inboxesList, () => inboxes().then((m) => m.inboxesList)),
      cmd(S.inboxesCreate, () => inboxes().then((m) => m.inboxesCreate)),
      cmd(S.inboxesGet, () => inboxes().then((m) => m.inboxesGet)),
      cmd(S.inboxesRename, () => inboxes().then((m) => m.inboxesRename)),
      cmd(S.inboxesDelete, () => inboxes().then((m) => m.inboxesDelete))
    ]),
    group("emails", "Received mail", ["mailroom emails list", "mailroom emails raw <id> > message.eml"], [
      cmd(S.emailsList, () => mail().then((m) => m.emailsList)),
      cmd(S.emailsGet, () => mail().then((m) => m.emailsGet)),
      cmd(S.emailsLabel, () => mail().then((m) => m.emailsLabel)),
      cmd(S.emailsRead, () => mail().then((m) => m.emailsRead)),
      cmd(S.emailsUnread, () => mail().then((m) => m.emailsUnread)),
      cmd(S.emailsRaw, () => mail().then((m) => m.emailsRaw)),
      cmd(S.emailsAttachments, () => mail().then((m) => m.emailsAttachments)),
      cmd(S.emailsQuarantined, () => mail().then((m) => m.emailsQuarantined)),
      cmd(S.emailsRelease, () => mail().then((m) => m.emailsRelease))
    ]),
    cmd(S.send, () => sending().then((m) => m.send)),
    cmd(S.sendBatch, () => sending().then((m) => m.sendBatch)),
    cmd(S.reply, () => sending().then((m) => m.reply)),
    cmd(S.forward, () => sending().then((m) => m.forward)),
    group("sent", "Sent and scheduled emails", ["mailroom sent list --status scheduled", "mailroom sent cancel <id>"], [
      cmd(S.sentList, () => sending().then((m) => m.sentList)),
      cmd(S.sentGet, () => sending().then((m) => m.sentGet)),
      cmd(S.sentCancel, () => sending().then((m) => m.sentCancel)),
      cmd(S.sentReschedule, () => sending().then((m) => m.sentReschedule))
    ]),
    group("suppressions", "Addresses not mailed after a hard bounce or complaint", ["mailroom suppressions list", "mailroom suppressions rm <address>"], [
      cmd(S.suppressionsList, () => sending().then((m) => m.suppressionsList)),
      cmd(S.suppressionsRm, () => sending().then((m) => m.suppressionsRm))
    ]),
    group("outbound", "The outbound relay and send quotas", ["mailroom outbound status"], [
      cmd(S.outboundStatus, () => sending().then((m) => m.outboundStatus))
    ]),
    group("deliveries", "Webhook deliveries", ["mailroom deliveries list --status failed", "mailroom deliveries replay <id>"], [
      cmd(S.deliveriesList, () => mail().then((m) => m.deliveriesList)),
      cmd(S.deliveriesGet, () => mail().then((m) => m.deliveriesGet)),
      cmd(S.deliveriesReplay, () => mail().then((m) => m.deliveriesReplay))
    ]),
    group("functions", "Hosted functions run in workerd on inbound mail", [
      "mailroom functions deploy worker.js --name triage --endpoint",
      "mailroom functions invoke <id>",
      "mailroom functions logs <id> --follow"
    ], [
      cmd(S.functionsDeploy, () => functions().then((m) => m.deploy)),
      cmd(S.functionsList, () => functions().then((m) => m.list)),
      cmd(S.functionsGet, () => functions().then((m) => m.get)),
      cmd(S.functionsDelete, () => functions().then((m) => m.remove)),
      cmd(S.functionsInvoke, () => functions().then((m) => m.invoke)),
      cmd(S.functionsLogs, () => functions().then((m) => m.logs))
    ]),
    group("memories", "JSON key-value memories of the organization or of a function", [
      "mailroom memories set settings '{\"tone\":\"brief\"}'",
      "mailroom memories list --prefix sender/"
    ], [
      cmd(S.memoriesList, () => functions().then((m) => m.memoriesList)),
      cmd(S.memoriesGet, () => functions().then((m) => m.memoriesGet)),
      cmd(S.memoriesSet, () => functions().then((m) => m.memoriesSet)),
      cmd(S.memoriesDelete, () => functions().then((m) => m.memoriesDelete))
    ]),
    group("templates", "Installable function templates", [
      "mailroom templates list",
      "mailroom templates install auto-reply --route support@acme.com"
    ], [
      cmd(S.templatesList, () => functions().then((m) => m.templatesList)),
      cmd(S.templatesShow, () => functions().then((m) => m.templatesShow)),
      cmd(S.templatesInstall, () => functions().then((m) => m.templatesInstall))
    ]),
    group("demo", "The public sandbox: synthetic data in the real shapes, no login needed", [
      "mailroom demo emails",
      "mailroom demo email <id> --json"
    ], [
      cmd(S.demoAccount, () => demo().then((m) => m.demoAccount)),
      cmd(S.demoEmails, () => demo().then((m) => m.demoEmails)),
      cmd(S.demoEmail, () => demo().then((m) => m.demoEmail)),
      cmd(S.demoThreads, () => demo().then((m) => m.demoThreads)),
      cmd(S.demoThread, () => demo().then((m) => m.demoThread)),
      cmd(S.demoSearch, () => demo().then((m) => m.demoSearch)),
      cmd(S.demoDeliveries, () => demo().then((m) => m.demoDeliveries))
    ]),
    group("registries", "Directories of agents addressed by handle", [
      "mailroom registries create acme-agents",
      "mailroom registries publish acme-agents --handle bill --address b@acme.com",
      "mailroom registries entry acme-agents billing"
    ], [
      cmd(S.registriesCreate, () => registries().then((m) => m.registriesCreate)),
      cmd(S.registriesList, () => registries().then((m) => m.registriesList)),
      cmd(S.registriesShow, () => registries().then((m) => m.registriesShow)),
      cmd(S.registriesUpdate, () => registries().then((m) => m.registriesUpdate)),
      cmd(S.registriesDelete, () => registries().then((m) => m.registriesDelete)),
      cmd(S.registriesPublish, () => registries().then((m) => m.registriesPublish)),
      cmd(S.registriesEntries, () => registries().then((m) => m.registriesEntries)),
      cmd(S.registriesEntry, () => registries().then((m) => m.registriesEntry)),
      cmd(S.registriesUnpublish, () => registries().then((m) => m.registriesUnpublish)),
      cmd(S.registriesApprove, () => registries().then((m) => m.registriesApprove)),
      cmd(S.registriesReject, () => registries().then((m) => m.registriesReject))
    ]),
    group("threads", "Conversations across received and sent mail", ["mailroom threads list", `mailroom threads get <id>`], [
      cmd(S.threadsList, () => conversations().then((m) => m.threadsList)),
      cmd(S.threadsGet, () => conversations().then((m) => m.threadsGet))
    ]),
    cmd(S.search, () => conversations().then((m) => m.search)),
    group("wake", "Scheduled commands for your functions, and who may mail them", [
      "mailroom wake add triage --type digest --cron '0 8 * * *'",
      "mailroom wake list"
    ], [
      cmd(S.wakeAdd, () => wake().then((m) => m.add)),
      cmd(S.wakeWatch, () => wake().then((m) => m.watch)),
      cmd(S.wakeList, () => wake().then((m) => m.list)),
      cmd(S.wakeCancel, () => wake().then((m) => m.cancel)),
      cmd(S.wakeRun, () => wake().then((m) => m.run)),
      group("allowlist", "Senders allowed to mail commands to a function's wake address", [
        "mailroom wake allowlist set triage --sender ops@acme.com"
      ], [
        cmd(S.wakeAllowlistGet, () => wake().then((m) => m.allowlistGet)),
        cmd(S.wakeAllowlistSet, () => wake().then((m) => m.allowlistSet))
      ])
    ]),
    group("payments", "x402 payments: spend policy, payout wallets, challenges, paying", [
      "mailroom payments challenges create --amount 1.5",
      "mailroom payments pay <id> --key-file wallet.key",
      "mailroom payments list --direction in"
    ], [
      group("policy", "The spend policy", ["mailroom payments policy show", "mailroom payments policy set --daily-cap 20"], [
        cmd(S.paymentsPolicyShow, () => payments().then((m) => m.policyShow)),
        cmd(S.paymentsPolicySet, () => payments().then((m) => m.policySet))
      ]),
      group("payout", "Payout wallets", ["mailroom payments payout set eip155:84532 0x…"], [
        cmd(S.paymentsPayoutSet, () => payments().then((m) => m.payoutSet)),
        cmd(S.paymentsPayoutList, () => payments().then((m) => m.payoutList))
      ]),
      group("challenges", "Payment challenges (x402 PaymentRequired)", ["mailroom payments challenges create --amount 1.5"], [
        cmd(S.paymentsChallengesCreate, () => payments().then((m) => m.challengesCreate)),
        cmd(S.paymentsChallengesList, () => payments().then((m) => m.challengesList)),
        cmd(S.paymentsChallengesGet, () => payments().then((m) => m.challengesGet))
      ]),
      cmd(S.paymentsPay, () => payments().then((m) => m.pay)),
      cmd(S.paymentsList, () => payments().then((m) => m.list)),
      cmd(S.paymentsGet, () => payments().then((m) => m.get))
    ]),
    group("api-keys", "Scoped API keys", ["mailroom api-keys create --name reader --scope emails:read", "mailroom api-keys list"], [
      cmd(O.apiKeysCreate, () => oversight().then((m) => m.apiKeysCreate)),
      cmd(O.apiKeysList, () => oversight().then((m) => m.apiKeysList)),
      cmd(O.apiKeysRevoke, () => oversight().then((m) => m.apiKeysRevoke))
    ]),
    group("drafts", "Sends held for approval (account send_approval)", ["mailroom drafts list", "mailroom drafts approve <id>"], [
      cmd(O.draftsList, () => oversight().then((m) => m.draftsList)),
      cmd(O.draftsGet, () => oversight().then((m) => m.draftsGet)),
      cmd(O.draftsApprove, () => oversight().then((m) => m.draftsApprove)),
      cmd(O.draftsReject, () => oversight().then((m) => m.draftsReject))
    ]),
    cmd(S.listen, () => import("./commands/listen.js").then((m) => m.listen)),
    cmd(S.mcp, () => import("./commands/mcp.js").then((m) => m.mcp))
  ]
)

export const nameOf = (node: Node) => (node.kind === "leaf" ? node.spec.name : node.name)
