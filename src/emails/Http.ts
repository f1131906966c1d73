/** Handlers of the Emails area and the downloads (token or bearer). */
import { HttpApiBuilder, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import contentDisposition from "content-disposition"
import { Effect, Layer, Option } from "effect"
import { simpleParser } from "mailparser"
import { Readable } from "node:stream"
import { createGzip } from "node:zlib"
import { pack } from "tar-stream"
import { MailroomApi } from "../Api.js"
import {
  DownloadTokenExpired,
  DownloadTokenInvalid,
  NotFound,
  Unauthorized
} from "../contract/Errors.js"
import { decodeCursor, DEFAULT_PAGE_SIZE, encodeCursor } from "../contract/Paging.js"
import { CurrentPrincipal } from "../contract/Security.js"
import { bearerToken, wwwAuthenticate } from "../platform/Authentication.js"
import { AppConfig } from "../platform/Config.js"
import { Credentials } from "../platform/Credentials.js"
import { setHeader } from "../platform/HttpHeaders.js"
import { inboxesOf } from "../platform/InboxLimit.js"
import type { Email, EmailSummary } from "./Api.js"
import { type DownloadKind, DownloadTokens } from "./DownloadTokens.js"
import { type EmailRow, EmailsRepo, type SummaryRow } from "./Repo.js"
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
    attachments: row.attachments.map((a, i) => ({
      filename: a.filename,
      content_type: a.content_type,
      size_bytes: a.size_bytes,
      download_url: urls.each[i]!
    })),
    raw_url: urls.raw,
    attachments_url: urls.attachments
  }))

export const EmailsHttpLive = HttpApiBuilder.group(MailroomApi, "emails", (handlers) =>
  Effect.gen(function*() {
    const repo = yield* EmailsRepo
    const tokens = yield* DownloadTokens
    const config = yield* AppConfig
    const notFound = new NotFound({ message: "email not found" })
    return handlers
      .handle("list", ({ urlParams }) =>
        Effect.gen(function*() {
          const principal = yield* CurrentPrincipal
          const limit = urlParams.limit ?? DEFAULT_PAGE_SIZE
          const after = yield* decodeCursor(urlParams.cursor)
          const page = yield* repo.list(principal, {
            limit,
            after: Option.fromNullable(after),
            ...(urlParams.recipient !== undefined ? { recipient: urlParams.recipient } : {}),
            ...(urlParams.sender !== undefined ? { sender: urlParams.sender } : {}),
            ...(urlParams.event_type !== undefined ? { eventType: urlParams.event_type } : {}),
            ...(urlParams.status !== undefined ? { status: urlParams.status } : {}),
            ...(urlParams.date_from !== undefined ? { dateFrom: urlParams.date_from } : {}),
            ...(urlParams.date_to !== undefined ? { dateTo: urlParams.date_to } : {}),
            ...(urlParams.label !== undefined ? { label: urlParams.label } : {}),
            ...(urlParams.unread !== undefined ? { unread: urlParams.unread } : {}),
            includeWake: urlParams.include === "wake",
            ...(urlParams.inbox_id !== undefined ? { inboxId: urlParams.inbox_id } : {})
          })
          const last = page.rows[page.rows.length - 1]
          return {
            items: page.rows.map(toSummary),
            meta: {
              total: page.total,
              limit,
              cursor: page.more && last ? encodeCursor({ createdAt: last.received_at, id: last.id }) : null
            }
          }
        }))
      .handle("get", ({ path }) =>
        Effect.gen(function*() {
          const principal = yield* CurrentPrincipal
          const row = yield* Effect.flatten(repo.find(principal, path.id)).pipe(Effect.mapError(() => notFound))
          return yield* toEmail(config.publicBaseUrl, row).pipe(Effect.provideService(DownloadTokens, tokens))
        }))
      .handle("update", ({ path, payload }) =>
        Effect.gen(function*() {
          const principal = yield* CurrentPrincipal
          const row = yield* Effect.flatten(repo.update(principal, path.id, payload)).pipe(Effect.mapError(() => notFound))
          return yield* toEmail(config.publicBaseUrl, row).pipe(Effect.provideService(DownloadTokens, tokens))
        }))
      .handle("delete", ({ path }) =>
        Effect.gen(function*() {
          const principal = yield* CurrentPrincipal
          const row = yield* Effect.flatten(repo.remove(principal, path.id)).pipe(Effect.mapError(() => notFound))
          return toSummary(row)
        }))
  })).pipe(Layer.provide(EmailsRepo.Default))

/** Attachments of a raw message, in order, with their content. */
const attachmentsOf = (raw: Uint8Array) =>
  Effect.promise(() => simpleParser(Buffer.from(raw), { skipHtmlToText: true, skipTextToHtml: true })).pipe(
    Effect.map((m) => m.attachments)
  )

const safeName = (name: string | undefined, i: number) => {
  const base = (name ?? `attachment-${i}`).replace(/[/\\\u0000-\u001f]/g, "_").slice(0, 90) || `attachment-${i}`
  return `${String(i).padStart(3, "0")}-${base}`
}

/**
 * A filename from a message (a sender chose it, encoded words may decode to CR, LF or NUL) made fit
 * for `Content-Disposition`: control characters become `_`, the encoder adds RFC 6266 `filename*`
 * for anything outside ISO-8859-1 and keeps only the base name.
 */
export const headerSafeName = (name: string) => name.replace(/[\u0000-\u001f\u007f-\u009f]/g, "_").trim() || "attachment"

/** A declared content type is the sender's too: a malformed one is served as opaque bytes. */
const safeContentType = (type: string) =>
  /^[\w.+-]+\/[\w.+-]+(\s*;\s*[\w.+-]+=("[^"\r\n]*"|[\w.+-]+))*$/.test(type) ? type : "application/octet-stream"

const tarGz = (files: ReadonlyArray<{ name: string; content: Buffer }>) =>
  Effect.promise(async () => {
    const archive = pack()
    for (const f of files) archive.entry({ name: f.name, size: f.content.length, mode: 0o644 }, f.content)
    archive.finalize()
    const chunks: Array<Buffer> = []
    for await (const chunk of Readable.from(archive).pipe(createGzip())) chunks.push(chunk as Buffer)
    return Buffer.concat(chunks)
  })

export const DownloadsHttpLive = HttpApiBuilder.group(MailroomApi, "downloads", (handlers) =>
  Effect.gen(function*() {
    const repo = yield* EmailsRepo
    const tokens = yield* DownloadTokens
    const credentials = yield* Credentials
    const config = yield* AppConfig
    const challenge = wwwAuthenticate(config.publicBaseUrl)

    /** The raw message if the signed token (or the bearer credential's organization) allows it. */
    const authorize = (id: string, kind: DownloadKind, token: string | undefined) =>
      Effect.gen(function*() {
        const found = yield* repo.raw(id)
        if (token !== undefined) {
          const verdict = yield* tokens.verify(token, id, kind)
          if (verdict === "expired") {
            return yield* new DownloadTokenExpired({
              message: "this download link is older than 24 hours",
              details: {
                remediation:
                  "Request the same URL without the token parameter and with Authorization: Bearer <API key>; bearer downloads do not expire. Or fetch a fresh link from GET /v1/emails/{id}."
              }
            })
          }
          if (verdict === "invalid") {
            return yield* new DownloadTokenInvalid({ message: "the download token failed verification for this email and download" })
          }
        } else {
          const req = yield* HttpServerRequest.HttpServerRequest
          const bearer = bearerToken(req.headers["authorization"])
          const principal = Option.isSome(bearer) ? yield* credentials.resolve(bearer.value) : Option.none()
          if (Option.isNone(principal)) {
            yield* setHeader("www-authenticate", challenge)
            return yield* new Unauthorized({ message: "pass the signed token of a download URL or a bearer credential" })
          }
          const limit = inboxesOf(principal.value)
          if (
            Option.isNone(found) || found.value.org_id !== principal.value.orgId ||
            (limit !== undefined && (found.value.inbox_id === null || !limit.includes(found.value.inbox_id)))
          ) {
            return yield* new NotFound({ message: "email not found" })
          }
        }
        if (Option.isNone(found)) return yield* new NotFound({ message: "email not found" })
        if (found.value.discarded || found.value.raw === null) {
          return yield* new NotFound({ message: "the content of this email was discarded" })
        }
        return found.value.raw
      })

    const binary = (body: Uint8Array, contentType: string, filename: string) =>
      HttpServerResponse.uint8Array(body, {
        contentType: safeContentType(contentType),
        headers: {
          "content-disposition": contentDisposition(headerSafeName(filename), { type: "attachment" }),
          "cache-control": "private, no-store",
          // The sender chose the bytes and the declared type: a browser must not guess a more active one.
          "x-content-type-options": "nosniff"
        }
      })

    return handlers
      .handle("raw", ({ path, urlParams }) =>
        Effect.map(authorize(path.id, "raw", urlParams.token), (raw) => binary(raw, "message/rfc822", `${path.id}.eml`)))
      .handle("attachments", ({ path, urlParams }) =>
        Effect.gen(function*() {
          const raw = yield* authorize(path.id, "attachments", urlParams.token)
          const atts = yield* attachmentsOf(raw)
          const archive = yield* tarGz(atts.map((a, i) => ({ name: safeName(a.filename, i), content: a.content })))
          return binary(archive, "application/gzip", `${path.id}-attachments.tar.gz`)
        }))
      .handle("attachment", ({ path, urlParams }) =>
        Effect.gen(function*() {
          const raw = yield* authorize(path.id, `attachment:${path.index}`, urlParams.token)
          const atts = yield* attachmentsOf(raw)
          const a = atts[path.index]
          if (a === undefined) return yield* new NotFound({ message: `email has no attachment ${path.index}` })
          return binary(a.content, a.contentType, a.filename ?? `attachment-${path.index}`)
        }))
  })).pipe(Layer.provide(EmailsRepo.Default))
