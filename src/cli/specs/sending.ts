/** Specs of sending: `send`, `send-batch`, `reply`, `forward`, `sent`, `suppressions`, `outbound`. */
import { choice, flag, idArg, leaf, many, required, text, textArg, uuid } from "../Spec.js"
import { ID, paging } from "./shared.js"

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
