/**
 * The search document of a message: what lexical search indexes and what gets embedded. Written in
 * the statement that stores the message (so it is found lexically at once); its embedding comes
 * later from the backlog (Backlog.ts).
 */

/** A tsvector is capped at 1 MB: the body is cut well below that. */
export const BODY_CHARS = 100_000

const ENTITIES: Record<string, string> = { amp: "&", lt: "<", gt: ">", quot: "\"", apos: "'", nbsp: " " }

/** The readable text of an HTML body, for messages that carry no text part. */
export const htmlText = (html: string): string =>
  html
    .replace(/<(script|style|head)[\s\S]*?<\/\1\s*>/gi, " ")
    .replace(/<[^>]*>/g, " ")
    .replace(/&(#\d+|#x[0-9a-f]+|[a-z]+);/gi, (m, e: string) => {
      if (e[0] === "#") {
        const code = e[1] === "x" || e[1] === "X" ? parseInt(e.slice(2), 16) : parseInt(e.slice(1), 10)
        return Number.isFinite(code) && code > 0 && code <= 0x10ffff ? String.fromCodePoint(code) : " "
      }
      return ENTITIES[e.toLowerCase()] ?? m
    })
    .replace(/\s+/g, " ")
    .trim()

/** The body text a message is searched by. */
export const searchBody = (text: string | null, html: string | null): string | null => {
  const body = text !== null && text.trim() !== "" ? text : html !== null ? htmlText(html) : null
  return body === null ? null : body.slice(0, BODY_CHARS)
}

export interface SearchDocumentInput {
  readonly id: string
  readonly orgId: string
  readonly kind: "received" | "sent"
  readonly emailId: string | null
  readonly fromAddress: string | null
  readonly fromName: string | null
  readonly recipients: ReadonlyArray<string>
  readonly subject: string | null
  readonly text: string | null
  readonly html: string | null
  /** The reply text (src/mail/ReplyText.ts): ranked above the rest of the body. */
  readonly extractedText?: string | null
}

/** The row of `search_documents` (its `at` defaults to the statement's time, as the message's does). */
export const documentRow = (d: SearchDocumentInput): Record<string, unknown> => ({
  id: d.id,
  org_id: d.orgId,
  kind: d.kind,
  email_id: d.emailId,
  from_address: d.fromAddress?.toLowerCase() ?? null,
  from_name: d.fromName,
  recipients: JSON.stringify([...new Set(d.recipients.map((a) => a.toLowerCase()))]),
  subject: d.subject,
  body: searchBody(d.text, d.html),
  extracted: d.extractedText?.slice(0, BODY_CHARS) ?? null
})

/**
 * What gets embedded: the subject and the start of the body. The in-process model's cost grows with
 * the text (12 ms for 20 words, 43 ms for 80, 61 ms for 300, per text in batches of 16) while what a
 * message is about is mostly in its subject and first lines.
 */
export const EMBEDDED_BODY_CHARS = 600

export const embeddingText = (subject: string | null, body: string | null): string =>
  `${subject ?? ""}\n${(body ?? "").replace(/\s+/g, " ").slice(0, EMBEDDED_BODY_CHARS)}`.trim()
