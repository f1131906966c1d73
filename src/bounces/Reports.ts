/**
 * Reading what comes back to a VERP return path: an RFC 3464 delivery status notification
 * (`multipart/report; report-type=delivery-status`) or an RFC 5965 abuse report
 * (`multipart/report; report-type=feedback-report`). The MIME structure is mailparser's; only the
 * report parts' `Field: value` groups (RFC 822 header syntax, groups split by blank lines) are read here.
 * Anything else, or a report missing what the RFC requires, is `malformed`: it is kept as ordinary mail.
 */
import { simpleParser } from "mailparser"

export interface DsnRecipient {
  /** Final-Recipient (or Original-Recipient), the address alone, lower case. */
  readonly recipient: string | null
  /** failed | delayed | delivered | relayed | expanded */
  readonly action: string
  /** The enhanced status code (RFC 3463), e.g. `5.1.1`. */
  readonly status: string | null
  readonly diagnostic: string | null
}

export type Report =
  | { readonly kind: "dsn"; readonly recipients: ReadonlyArray<DsnRecipient> }
  | {
    readonly kind: "arf"
    readonly feedbackType: string
    readonly recipient: string | null
    readonly userAgent: string | null
    readonly arrivalDate: string | null
  }
  | { readonly kind: "malformed"; readonly reason: string }

type Fields = ReadonlyMap<string, string>

/** `Name: value` groups of a report part: continuation lines unfolded, names lower case, first occurrence kept. */
export const fieldGroups = (text: string): ReadonlyArray<Fields> => {
  const groups: Array<Map<string, string>> = []
  let current = new Map<string, string>()
  let last: string | undefined
  for (const line of text.replace(/\r\n?/g, "\n").split("\n")) {
    if (line.trim() === "") {
      if (current.size > 0) groups.push(current)
      current = new Map()
      last = undefined
      continue
    }
    if (/^[ \t]/.test(line) && last !== undefined) {
      current.set(last, `${current.get(last)} ${line.trim()}`)
      continue
    }
    const colon = line.indexOf(":")
    if (colon <= 0) continue
    const name = line.slice(0, colon).trim().toLowerCase()
    if (!current.has(name)) current.set(name, line.slice(colon + 1).trim())
    last = name
  }
  if (current.size > 0) groups.push(current)
  return groups
}

/** `rfc822; Bob <bob@example.com>` → `bob@example.com`. */
const addressOfTyped = (value: string | undefined): string | null => {
  if (value === undefined) return null
  const bare = value.includes(";") ? value.slice(value.indexOf(";") + 1) : value
  const m = /<([^<>\s]+@[^<>\s]+)>/.exec(bare) ?? /([^\s<>;,"]+@[^\s<>;,"]+)/.exec(bare)
  return m === null ? null : m[1]!.toLowerCase()
}

const statusCode = (value: string | undefined) => /\b([245]\.\d{1,3}\.\d{1,3})\b/.exec(value ?? "")?.[1] ?? null

/** `smtp; 550 5.1.1 user unknown` → `550 5.1.1 user unknown`, at most 1,000 characters. */
const diagnosticOf = (value: string | undefined) => {
  if (value === undefined) return null
  const text = /^[A-Za-z-]+;/.test(value) ? value.slice(value.indexOf(";") + 1).trim() : value.trim()
  return text === "" ? null : text.slice(0, 1000)
}

const DSN_TYPES = new Set(["message/delivery-status", "message/global-delivery-status"])
const ARF_TYPES = new Set(["message/feedback-report"])
const ORIGINAL_TYPES = new Set(["message/rfc822", "text/rfc822-headers", "message/global", "message/global-headers"])

export const parseReport = async (raw: Buffer): Promise<Report> => {
  const parsed = await simpleParser(raw, { keepDeliveryStatus: true, skipHtmlToText: true, skipTextLinks: true, skipImageLinks: true })
  const ct = parsed.headers.get("content-type") as { value?: string; params?: Record<string, string> } | undefined
  if (ct?.value?.toLowerCase() !== "multipart/report") return { kind: "malformed", reason: "not a multipart/report" }
  const reportType = (ct.params?.["report-type"] ?? "").toLowerCase()
  const parts = parsed.attachments.map((a) => ({ type: a.contentType.toLowerCase(), text: a.content.toString("utf8") }))
  if (reportType === "delivery-status") {
    const part = parts.find((p) => DSN_TYPES.has(p.type))
    if (part === undefined) return { kind: "malformed", reason: "no message/delivery-status part" }
    // The first group is about the message, each further one about one recipient (RFC 3464 §2.1).
    const recipients = fieldGroups(part.text).slice(1).flatMap((g): Array<DsnRecipient> => {
      const action = g.get("action")?.toLowerCase().split(/[\s(]/)[0]
      if (action === undefined || action === "") return []
      return [{
        recipient: addressOfTyped(g.get("final-recipient") ?? g.get("original-recipient")),
        action,
        status: statusCode(g.get("status")),
        diagnostic: diagnosticOf(g.get("diagnostic-code"))
      }]
    })
    if (recipients.length === 0) return { kind: "malformed", reason: "no per-recipient fields with Action" }
    return { kind: "dsn", recipients }
  }
  if (reportType === "feedback-report") {
    const part = parts.find((p) => ARF_TYPES.has(p.type))
    if (part === undefined) return { kind: "malformed", reason: "no message/feedback-report part" }
    const fields = fieldGroups(part.text)[0]
    const feedbackType = fields?.get("feedback-type")?.toLowerCase().split(/\s/)[0]
    if (fields === undefined || feedbackType === undefined || feedbackType === "") {
      return { kind: "malformed", reason: "no Feedback-Type" }
    }
    // Without Original-Rcpt-To, the returned message's To names who complained.
    const original = parts.find((p) => ORIGINAL_TYPES.has(p.type))
    const originalTo = original === undefined ? undefined : fieldGroups(original.text)[0]?.get("to")
    return {
      kind: "arf",
      feedbackType,
      recipient: addressOfTyped(fields.get("original-rcpt-to")) ?? addressOfTyped(originalTo),
      userAgent: fields.get("user-agent") ?? null,
      arrivalDate: fields.get("arrival-date") ?? fields.get("received-date") ?? null
    }
  }
  return { kind: "malformed", reason: `report-type ${reportType || "missing"} is neither delivery-status nor feedback-report` }
}
