/** Specs of `threads` and `search`: received and sent mail read as conversations or by query. */
import { choice, flag, idArg, integer, leaf, text, textArg, uuid } from "../Spec.js"
import { ID, paging } from "./shared.js"

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
