/** Specs of `wake`: scheduled commands, thread watches and who may mail commands to a function. */
import { choice, idArg, leaf, many, required, text } from "../Spec.js"
import { functionRef, ID, paging } from "./shared.js"

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
