/**
 * Event classification from a message's structure (not its wording, where a standard exists):
 * RFC 3464 delivery status notifications, RFC 8460 TLS reports, RFC 7489 aggregate reports and
 * RFC 6591 authentication-failure reports; everything else is `email.received`.
 */
import type { ParsedEmail } from "../mail/Parse.js"

export type EventType =
  | "email.received"
  | "email.bounced"
  | "email.tls_report"
  | "email.dmarc_report"
  | "email.dmarc_failure"
  /** Never from classification: a copy for a function's wake address with a command (Store.eventOf). */
  | "wake.command"

const hasPart = (p: ParsedEmail, types: ReadonlyArray<string>) =>
  p.attachments.some((a) => types.includes(a.content_type))

/** `<receiver>!<policy domain>!<begin>!<end>[!id].xml[.gz|.zip]` (RFC 7489 §7.2.1.1). */
const DMARC_AGGREGATE_NAME = /^[^!]+![^!]+!\d{9,}!\d{9,}(![^.]*)?\.(xml|xml\.gz|xml\.zip|gz|zip)$/i

const BOUNCE_SENDER = /^(mailer-daemon|postmaster|mail-daemon)@/i
const BOUNCE_SUBJECT = /(undeliver|delivery status notification|returned mail|failure notice|delivery failure|mail delivery failed)/i

/**
 * The body of the message's first part of a `message/<subtype>` report type. In a top-level report
 * that part precedes any returned message, so a report quoted inside the returned message is never
 * read instead.
 */
const reportPart = (head: string, subtypes: string): string | undefined => {
  const re = new RegExp(`(?:^|\\n)content-type:[ \\t]*message\\/(?:${subtypes})\\b[^]*?\\r?\\n\\r?\\n([^]*?)(?:\\r?\\n--|$)`, "i")
  return re.exec(head)?.[1]
}

const fieldValues = (part: string, field: string) =>
  [...part.matchAll(new RegExp(`^${field}:[ \\t]*([a-z-]+)`, "gim"))].map((m) => m[1]!.toLowerCase())

const dsnActions = (head: string): ReadonlyArray<string> => {
  const part = reportPart(head, "delivery-status|global-delivery-status")
  return part === undefined ? [] : fieldValues(part, "action")
}

/**
 * A DSN is a bounce when a recipient failed. Delay warnings (`delayed`) and success notices
 * (`delivered`, `relayed`, `expanded`) are DSNs too but not bounces: they stay `email.received`.
 * A report without readable `Action:` fields is taken as a bounce, as its structure says.
 */
const isFailureDsn = (head: string) => {
  const actions = dsnActions(head)
  return actions.length === 0 || actions.includes("failed")
}

export const classify = (p: ParsedEmail, raw: Buffer): EventType => {
  const reportType = (p.contentTypeParams["report-type"] ?? "").toLowerCase()
  const isReport = p.contentType === "multipart/report"

  if (
    (isReport && reportType === "tlsrpt") || p.headers["tls-report-domain"] !== undefined ||
    hasPart(p, ["application/tlsrpt+json", "application/tlsrpt+gzip"])
  ) return "email.tls_report"

  if ((isReport && reportType === "feedback-report") || hasPart(p, ["message/feedback-report"])) {
    // ARF is also used for abuse complaints; DMARC failure reports say Feedback-Type: auth-failure.
    const head = raw.subarray(0, 256 * 1024).toString("latin1")
    const part = reportPart(head, "feedback-report")
    const types = part === undefined ? fieldValues(head, "feedback-type") : fieldValues(part, "feedback-type")
    if (types.includes("auth-failure")) return "email.dmarc_failure"
  }

  if (isReport && (reportType === "delivery-status" || reportType === "global-delivery-status")) {
    return isFailureDsn(raw.subarray(0, 256 * 1024).toString("latin1")) ? "email.bounced" : "email.received"
  }

  if (
    hasPart(p, ["message/delivery-status", "message/global-delivery-status"]) ||
    (p.from !== null && BOUNCE_SENDER.test(p.from.address) && BOUNCE_SUBJECT.test(p.subject ?? ""))
  ) return "email.bounced"

  if (
    p.attachments.some((a) => a.filename !== null && DMARC_AGGREGATE_NAME.test(a.filename)) ||
    (/^report domain:/i.test(p.subject ?? "") &&
      hasPart(p, ["application/zip", "application/gzip", "application/x-gzip", "text/xml", "application/xml"]))
  ) return "email.dmarc_report"

  return "email.received"
}

/**
 * Whether a message says it was sent by an automaton (RFC 3834): `Auto-Submitted` with any value but
 * `no`, or `Precedence: bulk|junk|list`. Such mail is `auto_submitted`: automations should not answer
 * it, and it is no "message from a person" for the loop guard.
 */
export const isAutoSubmitted = (headers: Readonly<Record<string, string>>): boolean => {
  const first = (name: string) => Object.hasOwn(headers, name) ? headers[name]!.split("\n")[0]!.trim().toLowerCase() : ""
  const auto = first("auto-submitted").split(";")[0]!.trim()
  if (auto !== "" && auto !== "no") return true
  return ["bulk", "junk", "list"].includes(first("precedence"))
}
