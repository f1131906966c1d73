/** Specs of `functions`, `memories` and `templates`: the organization's code and its state. */
import { flag, integer, leaf, many, required, text, textArg } from "../Spec.js"
import { functionRef, ID, paging } from "./shared.js"

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
