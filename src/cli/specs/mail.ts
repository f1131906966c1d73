/** Specs of `emails` and `deliveries`: received mail and its webhook deliveries. */
import { choice, flag, idArg, integer, leaf, many, text, uuid } from "../Spec.js"
import { dateRange, ID, paging } from "./shared.js"

const out = text("out", "FILE", "write to this file instead of stdout", { alias: "o" })

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
