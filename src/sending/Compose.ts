/**
 * The MIME of an outgoing message, built by nodemailer's composer (behind a buffering stream
 * transport) and DKIM-signed by it: Message-ID, Date, threading headers, custom `X-*`/`List-*`
 * headers, attachments (a forwarded original as `message/rfc822`). Bcc recipients are in the SMTP
 * envelope only, never in the headers.
 */
import nodemailer from "nodemailer"
import type { DkimSigning } from "../domains/Dkim.js"
import type { ContentRow } from "./SentRows.js"

const builder = nodemailer.createTransport({ streamTransport: true, buffer: true, newline: "crlf" })

export interface Composable {
  readonly fromHeader: string
  readonly to: ReadonlyArray<string>
  readonly cc: ReadonlyArray<string>
  readonly replyTo: string | null
  readonly subject: string
  readonly messageId: string
  readonly inReplyTo: string | null
  readonly references: ReadonlyArray<string>
  readonly date: Date
  readonly content: ContentRow
}

export const composeMessage = async (m: Composable, dkim: DkimSigning | undefined): Promise<Buffer> => {
  const info = await builder.sendMail({
    from: m.fromHeader,
    to: [...m.to],
    ...(m.cc.length > 0 ? { cc: [...m.cc] } : {}),
    ...(m.replyTo !== null ? { replyTo: m.replyTo } : {}),
    subject: m.subject,
    messageId: m.messageId,
    date: m.date,
    ...(m.inReplyTo !== null ? { inReplyTo: m.inReplyTo } : {}),
    ...(m.references.length > 0 ? { references: [...m.references] } : {}),
    headers: { ...m.content.headers },
    ...(m.content.text_body !== null ? { text: m.content.text_body } : {}),
    ...(m.content.html_body !== null ? { html: m.content.html_body } : {}),
    attachments: m.content.attachments.map((a) => ({
      filename: a.filename,
      contentType: a.content_type,
      content: Buffer.from(a.content_base64, "base64")
    })),
    ...(dkim !== undefined ? { dkim: { domainName: dkim.domainName, keySelector: dkim.keySelector, privateKey: dkim.privateKey } } : {})
  })
  return info.message as unknown as Buffer
}
