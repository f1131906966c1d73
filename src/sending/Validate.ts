/**
 * The pure checks of a send request that the request schema cannot express: cross-field rules,
 * parsed addresses, sizes and times, with registry recipients resolved (`validateSend`, which the
 * demo's send-mail runs too), and the 429 of a full quota window (`quotaRefusal`). Nothing here
 * reads the organization's state: those checks are Checks.ts's.
 */
import { Effect, Option } from "effect"
import { RateLimited, ValidationError } from "../contract/Errors.js"
import { type Decision, setLimitHeaders } from "../platform/RateLimiter.js"
import { parseRegistryRecipient, RegistryDirectory } from "../registries/Directory.js"
import { type Mailbox, parseMailbox } from "../mail/Addresses.js"
import { ATTACHMENTS_MAX_BYTES, MAX_RECIPIENTS, SCHEDULE_MAX_DAYS, SUBJECT_MAX_LENGTH } from "./Api.js"
import type { StoredAttachment } from "./SentRows.js"

/** What a caller asks to send, before any check. */
export interface SendInput {
  readonly kind: "send" | "reply" | "forward"
  readonly sourceEmailId: string | null
  readonly from: string
  readonly to: ReadonlyArray<string>
  readonly cc: ReadonlyArray<string>
  readonly bcc: ReadonlyArray<string>
  readonly replyTo: string | null
  readonly subject: string
  readonly text: string | null
  readonly html: string | null
  readonly headers: Record<string, string>
  readonly attachments: ReadonlyArray<{ readonly filename: string; readonly content_type?: string; readonly content_base64: string }>
  readonly sendAt: Date | null
  readonly discardContent: boolean
  readonly inReplyTo: string | null
  readonly references: ReadonlyArray<string>
}

interface Issue {
  readonly field: string
  readonly reason: string
}

const HEADER_NAME = /^(X-|List-)[A-Za-z0-9-]+$/i
const BASE64 = /^[A-Za-z0-9+/\r\n]*={0,2}[\r\n]*$/

/** A small MIME-type table for attachments sent without `content_type`. */
const TYPES: Record<string, string> = {
  txt: "text/plain", html: "text/html", htm: "text/html", csv: "text/csv", json: "application/json", pdf: "application/pdf",
  png: "image/png", jpg: "image/jpeg", jpeg: "image/jpeg", gif: "image/gif", webp: "image/webp", svg: "image/svg+xml",
  zip: "application/zip", gz: "application/gzip", ics: "text/calendar", eml: "message/rfc822", md: "text/markdown",
  xml: "application/xml"
}
export const guessType = (filename: string) => TYPES[filename.slice(filename.lastIndexOf(".") + 1).toLowerCase()] ?? "application/octet-stream"

const invalid = (issues: ReadonlyArray<Issue>) =>
  new ValidationError({
    message: issues.map((i) => `${i.field}: ${i.reason}`).join("; "),
    details: { issues: issues.map((i) => ({ field: i.field, reason: i.reason })) }
  })

export const HOUR_S = 3600
export const DAY_S = 86_400

/** The 429 of a full quota window, with that window's `ratelimit-*` and `Retry-After` headers. */
export const quotaRefusal = (limit: number, windowSeconds: number, used: number, oldest: Date | null, nowMs: number) => {
  const resetMs = oldest === null ? nowMs + windowSeconds * 1000 : oldest.getTime() + windowSeconds * 1000
  const decision: Decision = {
    allowed: false,
    limit,
    remaining: Math.max(0, limit - used),
    reset: Math.ceil(resetMs / 1000),
    retryAfter: Math.max(1, Math.ceil((resetMs - nowMs) / 1000)),
    windowSeconds
  }
  const window = windowSeconds === HOUR_S ? "hour" : "day"
  return Effect.zipRight(
    setLimitHeaders(decision, true),
    Effect.fail(
      new RateLimited({
        message: `send quota reached: ${limit} messages per ${window} on this plan; retry in ${decision.retryAfter} s`,
        details: { limit, window, window_seconds: windowSeconds, retry_after: decision.retryAfter }
      })
    )
  )
}

/**
 * Field checks the request schema cannot express (cross-field, parsed addresses, sizes, times), with
 * registry recipients resolved. The demo's send-mail runs the very same checks.
 */
export const validateSend = (input: SendInput, nowMs: number) =>
  Effect.gen(function*() {
    const directory = yield* RegistryDirectory
    const issues: Array<Issue> = []
    const from = parseMailbox(input.from)
    if (typeof from === "string") issues.push({ field: "from", reason: from })
    const recipients: Array<{ field: "to" | "cc" | "bcc"; value: string }> = [
      ...input.to.map((value) => ({ field: "to" as const, value })),
      ...input.cc.map((value) => ({ field: "cc" as const, value })),
      ...input.bcc.map((value) => ({ field: "bcc" as const, value }))
    ]
    if (input.to.length === 0) issues.push({ field: "to", reason: "at least one recipient is required" })
    if (recipients.length > MAX_RECIPIENTS) {
      issues.push({ field: "to", reason: `at most ${MAX_RECIPIENTS} recipients across to, cc and bcc (got ${recipients.length})` })
    }
    const resolved: Record<"to" | "cc" | "bcc", Array<Mailbox>> = { to: [], cc: [], bcc: [] }
    for (const r of recipients) {
      const handle = parseRegistryRecipient(r.value.trim())
      if (handle !== undefined) {
        const found = yield* directory.resolveHandle(handle.name, handle.handle)
        if (Option.isNone(found)) {
          issues.push({ field: r.field, reason: `${r.value.trim()} is not a published registry entry` })
        } else resolved[r.field].push({ name: "", address: found.value.address.toLowerCase() })
        continue
      }
      if (r.value.trim().startsWith("registry:")) {
        issues.push({ field: r.field, reason: "a registry recipient is written registry:<name>/<handle>" })
        continue
      }
      const m = parseMailbox(r.value)
      if (typeof m === "string") issues.push({ field: r.field, reason: `${JSON.stringify(r.value)} ${m}` })
      else resolved[r.field].push(m)
    }
    let replyTo: Mailbox | null = null
    if (input.replyTo !== null) {
      const m = parseMailbox(input.replyTo)
      if (typeof m === "string") issues.push({ field: "reply_to", reason: m })
      else replyTo = m
    }
    if (input.subject.length < 1 || input.subject.length > SUBJECT_MAX_LENGTH) {
      issues.push({ field: "subject", reason: `must be 1-${SUBJECT_MAX_LENGTH} characters` })
    } else if (/[\r\n]/.test(input.subject)) issues.push({ field: "subject", reason: "must not contain line breaks" })
    if (input.text === null && input.html === null) issues.push({ field: "text", reason: "one of text and html is required" })
    for (const [name, value] of Object.entries(input.headers)) {
      if (!HEADER_NAME.test(name)) issues.push({ field: `headers.${name}`, reason: "only X-* and List-* header names are allowed" })
      else if (/[\r\n]/.test(value)) issues.push({ field: `headers.${name}`, reason: "must not contain line breaks" })
    }
    let total = 0
    const attachments: Array<StoredAttachment> = []
    input.attachments.forEach((a, i) => {
      if (!BASE64.test(a.content_base64)) {
        issues.push({ field: `attachments.${i}.content_base64`, reason: "must be base64" })
        return
      }
      if (/[\r\n"\\/]/.test(a.filename)) issues.push({ field: `attachments.${i}.filename`, reason: "must be a plain file name" })
      if (a.content_type !== undefined && !/^[\w.+-]+\/[\w.+-]+$/.test(a.content_type)) {
        issues.push({ field: `attachments.${i}.content_type`, reason: "must be a MIME type such as text/plain" })
      }
      total += Buffer.from(a.content_base64, "base64").length
      attachments.push({ filename: a.filename, content_type: a.content_type ?? guessType(a.filename), content_base64: a.content_base64.replace(/[\r\n]/g, "") })
    })
    if (total > ATTACHMENTS_MAX_BYTES) issues.push({ field: "attachments", reason: "at most 10 MiB in all" })
    if (input.sendAt !== null) {
      if (input.sendAt.getTime() <= nowMs) issues.push({ field: "send_at", reason: "must be in the future" })
      else if (input.sendAt.getTime() > nowMs + SCHEDULE_MAX_DAYS * DAY_S * 1000) {
        issues.push({ field: "send_at", reason: `must be at most ${SCHEDULE_MAX_DAYS} days ahead` })
      }
    }
    if (issues.length > 0 || typeof from === "string") return yield* invalid(issues)
    return { from, to: resolved.to, cc: resolved.cc, bcc: resolved.bcc, replyTo, attachments }
  })
