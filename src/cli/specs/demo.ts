/** Specs of `demo`: the read-only demo mailbox, no login needed. */
import { choice, idArg, integer, leaf, text, textArg } from "../Spec.js"
import { dateRange, paging } from "./shared.js"

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
