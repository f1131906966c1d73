/**
 * How a stored email is shown: the summary and the full email of the API, and the signed download
 * links the full email carries. Pure functions of a row (the links need DownloadTokens), shared by
 * every area that returns an email, so none of them imports a handler module.
 */
import { Effect } from "effect"
import { encodeCursor } from "../contract/Paging.js"
import type { Email, EmailSummary } from "./Api.js"
import { type DownloadKind, DownloadTokens } from "./DownloadTokens.js"
import type { EmailRow, SummaryRow } from "./Repo.js"
import { extractReplyText } from "../mail/ReplyText.js"
import { UNKNOWN_TRUST } from "../mail/Trust.js"

export const toSummary = (row: SummaryRow): EmailSummary => ({
  id: row.id,
  thread_id: row.thread_id,
  message_id: row.message_id,
  event_type: row.event_type,
  status: row.status,
  rejection_reason: row.rejection_reason,
  from: row.from_address,
  from_name: row.from_name,
  envelope_from: row.envelope_from,
  to: row.to_addresses,
  cc: row.cc_addresses,
  recipient: row.recipient,
  domain_id: row.domain_id,
  inbox_id: row.inbox_id ?? null,
  subject: row.subject,
  date: row.sent_at,
  size_bytes: row.size_bytes,
  spam_score: row.spam_score === null ? null : Number(row.spam_score),
  auth: row.auth,
  auto_submitted: row.auto_submitted,
  trust: row.trust ?? { ...UNKNOWN_TRUST, auto_submitted: row.auto_submitted },
  attachment_count: row.attachments.length,
  content_discarded: row.content_discarded_at !== null,
  labels: row.labels,
  read: row.read,
  received_at: row.received_at
})

/** A list page as the API shows it: the summaries, the total, and a cursor after the last when more follow. */
export const toSummaryPage = (page: { readonly rows: ReadonlyArray<SummaryRow>; readonly more: boolean; readonly total: number }, limit: number) => {
  const last = page.rows[page.rows.length - 1]
  return {
    items: page.rows.map(toSummary),
    meta: {
      total: page.total,
      limit,
      cursor: page.more && last ? encodeCursor({ createdAt: last.received_at, id: last.id }) : null
    }
  }
}

/** Download links of an email, each with a fresh signed token. */
export const downloadUrls = (base: string, emailId: string, attachments: number) =>
  Effect.gen(function*() {
    const tokens = yield* DownloadTokens
    const url = (path: string, kind: DownloadKind) =>
      Effect.map(tokens.issue(emailId, kind), (t) => `${base}/v1/emails/${emailId}/${path}?token=${t}`)
    return {
      raw: yield* url("raw", "raw"),
      attachments: yield* url("attachments.tar.gz", "attachments"),
      each: yield* Effect.forEach(Array.from({ length: attachments }, (_, i) => i), (i) =>
        url(`attachments/${i}`, `attachment:${i}`))
    }
  })

/** An email's attachments with their download links, and its raw and archive links, as shown. */
export const linksOf = (
  attachments: ReadonlyArray<{ readonly filename: string | null; readonly content_type: string; readonly size_bytes: number }>,
  urls: { readonly raw: string; readonly attachments: string; readonly each: ReadonlyArray<string> }
) => ({
  attachments: attachments.map((a, i) => ({
    filename: a.filename,
    content_type: a.content_type,
    size_bytes: a.size_bytes,
    download_url: urls.each[i]!
  })),
  raw_url: urls.raw,
  attachments_url: urls.attachments
})

/**
 * The stored reply text; mail stored before it was computed at ingestion (its column null while
 * there is a body) gets it computed here.
 */
const replyText = (row: { text_body: string | null; html_body: string | null; extracted_text?: string | null }) =>
  row.extracted_text ?? (row.text_body !== null || row.html_body !== null ? extractReplyText(row.text_body, row.html_body) : null)

/** One received email as the API shows it (`GET /emails/{id}`), with fresh download links. */
export const toEmail = (
  base: string,
  row: EmailRow & { text_body: string | null; html_body: string | null; extracted_text?: string | null }
) =>
  Effect.map(downloadUrls(base, row.id, row.attachments.length), (urls): Email => ({
    ...toSummary(row),
    in_reply_to: row.in_reply_to,
    references: row.references,
    headers: row.headers,
    text: row.content_discarded_at === null ? row.text_body : null,
    html: row.content_discarded_at === null ? row.html_body : null,
    extracted_text: row.content_discarded_at === null ? replyText(row) : null,
    ...linksOf(row.attachments, urls)
  }))
