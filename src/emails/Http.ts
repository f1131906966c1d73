/** Handlers of the Emails area and the downloads (token or bearer). */
import { HttpServerRequest, HttpServerResponse } from "@effect/platform"
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
import { decodeCursor, DEFAULT_PAGE_SIZE } from "../contract/Paging.js"
import { CurrentPrincipal } from "../contract/Security.js"
import * as ApiGroup from "../platform/ApiGroup.js"
import { bearerToken, wwwAuthenticate } from "../platform/Authentication.js"
import { AppConfig } from "../platform/Config.js"
import { Credentials } from "../platform/Credentials.js"
import { setHeader } from "../platform/HttpHeaders.js"
import { inboxesOf } from "../platform/InboxLimit.js"
import { type DownloadKind, DownloadTokens } from "./DownloadTokens.js"
import { toEmail, toSummary, toSummaryPage } from "./Present.js"
import { emailListQuery, EmailsRepo } from "./Repo.js"

export const EmailsHttpLive = ApiGroup.group(MailroomApi, "emails", (handlers) =>
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
          return toSummaryPage(yield* repo.list(principal, emailListQuery(urlParams, limit, after)), limit)
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

export const DownloadsHttpLive = ApiGroup.group(MailroomApi, "downloads", (handlers) =>
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
