/**
 * The reply text of a message: what its author wrote, without the quoted history under it or the
 * signature. The parsing is email-reply-parser's (quote headers of Gmail, Outlook, Apple Mail and
 * ten locales, `>` quotes, `-- ` and "Sent from my …" signatures); an HTML-only body is first turned
 * into text by html-to-text, which writes a `<blockquote>` as `>` lines so the parser sees the quote.
 */
import EmailReplyParser from "email-reply-parser"
import { convert } from "html-to-text"

/**
 * A reply's own text is at the top: only the start of a long body is parsed, which bounds the work
 * (the parser's expressions run over every line) on the path that stores mail.
 */
export const REPLY_SCAN_CHARS = 64 * 1024

const htmlAsText = (html: string) =>
  convert(html.slice(0, REPLY_SCAN_CHARS), {
    wordwrap: false,
    selectors: [
      { selector: "a", options: { ignoreHref: true } },
      { selector: "img", format: "skip" },
      { selector: "hr", format: "skip" },
      { selector: "h1", options: { uppercase: false } },
      { selector: "h2", options: { uppercase: false } },
      { selector: "h3", options: { uppercase: false } },
      { selector: "table", format: "block" },
      { selector: "tr", format: "block" },
      { selector: "td", format: "inline" }
    ]
  }).replace(/\n{3,}/g, "\n\n") // `<div><br></div>` spacers: one blank line is what the reader saw

/**
 * The new text of a message (the text part, else the HTML part), trimmed; null when it has no body.
 * A message that is all quote gives "".
 */
export const extractReplyText = (text: string | null, html: string | null): string | null => {
  const source = text !== null && text.trim() !== "" ? text : html !== null && html.trim() !== "" ? htmlAsText(html) : null
  if (source === null) return null
  const body = source.slice(0, REPLY_SCAN_CHARS).replace(/\r\n?/g, "\n")
  return new EmailReplyParser().read(body).getVisibleText().trim()
}

const computed = new WeakMap<object, string | null>()

/**
 * Records the reply text computed for `message` elsewhere (a worker thread analysed it and sent
 * both back): `replyTextOf` answers it without parsing again.
 */
export const rememberReplyText = (message: object, value: string | null) => {
  computed.set(message, value)
}

/**
 * `extractReplyText` of a parsed message, computed once: the store and the event payload of each of
 * its copies ask for the same message's text.
 */
export const replyTextOf = (message: { readonly text: string | null; readonly html: string | null }): string | null => {
  if (computed.has(message)) return computed.get(message)!
  const value = extractReplyText(message.text, message.html)
  computed.set(message, value)
  return value
}
