/**
 * MIME parsing with mailparser: the fields Mailroom stores and delivers. A message that cannot be
 * parsed is still stored (raw) with `parse_error` set: accepted mail is never dropped for its shape.
 */
import {
  type AddressObject,
  type AttachmentStream,
  type HeaderLines,
  type Headers,
  type HeaderValue,
  MailParser,
  type MessageText
} from "mailparser"
import { sniff, SNIFF_BYTES } from "./Sniff.js"

export interface ParsedAttachment {
  readonly filename: string | null
  readonly content_type: string
  readonly size_bytes: number
  readonly content_id: string | null
  readonly disposition: string | null
  /** What the content is, from its first bytes (src/mail/Sniff.ts); null when unknown. */
  readonly kind?: string | null
}

export interface ParsedEmail {
  readonly messageId: string | null
  readonly inReplyTo: string | null
  readonly references: ReadonlyArray<string>
  readonly subject: string | null
  readonly from: { readonly address: string; readonly name: string | null } | null
  readonly to: ReadonlyArray<string>
  readonly cc: ReadonlyArray<string>
  readonly date: Date | null
  /** Lower-cased header name → value (unfolded); repeated headers joined with "\n". No prototype. */
  readonly headers: Readonly<Record<string, string>>
  readonly contentType: string
  readonly contentTypeParams: Readonly<Record<string, string>>
  readonly text: string | null
  readonly html: string | null
  readonly attachments: ReadonlyArray<ParsedAttachment>
}

const addresses = (value: AddressObject | Array<AddressObject> | undefined): Array<string> => {
  if (value === undefined) return []
  const list = Array.isArray(value) ? value : [value]
  const out: Array<string> = []
  const walk = (entries: AddressObject["value"]) => {
    for (const e of entries) {
      if (e.address) out.push(e.address.toLowerCase())
      if (e.group) walk(e.group)
    }
  }
  for (const a of list) walk(a.value)
  return out
}

const MAX_ADDRESSES = 1000

export const emptyParsed: ParsedEmail = {
  messageId: null,
  inReplyTo: null,
  references: [],
  subject: null,
  from: null,
  to: [],
  cc: [],
  date: null,
  headers: {},
  contentType: "text/plain",
  contentTypeParams: {},
  text: null,
  html: null,
  attachments: []
}

/** Whether any string of `value` (keys included) holds a NUL; allocates nothing. */
const hasNul = (value: unknown): boolean => {
  if (typeof value === "string") return value.includes("\u0000")
  if (Array.isArray(value)) return value.some(hasNul)
  if (value !== null && typeof value === "object" && !(value instanceof Date)) {
    for (const key of Object.keys(value)) {
      if (key.includes("\u0000") || hasNul((value as Record<string, unknown>)[key])) return true
    }
  }
  return false
}

/**
 * PostgreSQL text and jsonb cannot hold NUL characters; the raw MIME keeps the exact bytes. Almost
 * no mail has one, and rebuilding every object of a parsed message to find none was 3% of the CPU
 * an accepted email took: the message is copied only when it has one.
 */
const noNul = <A>(value: A): A => (hasNul(value) ? withoutNul(value) : value)

const withoutNul = <A>(value: A): A => {
  if (typeof value === "string") return (value.includes("\u0000") ? value.replace(/\u0000/g, "") : value) as A
  if (Array.isArray(value)) return value.map(withoutNul) as A
  if (value !== null && typeof value === "object" && !(value instanceof Date)) {
    // fromEntries defines own properties (even `__proto__`); a prototype-free map stays prototype-free.
    const entries = Object.fromEntries(Object.entries(value).map(([k, v]) => [withoutNul(k), withoutNul(v)]))
    return (Object.getPrototypeOf(value) === null ? Object.assign(Object.create(null), entries) : entries) as A
  }
  return value
}

export const parseEmail = async (raw: Buffer): Promise<ParsedEmail> => noNul(await parseUnsafe(capAddressHeaders(raw)))

/** Longest address header handed to the parser; at most MAX_ADDRESSES are kept anyway. */
export const MAX_ADDRESS_HEADER_BYTES = 64 * 1024
const ADDRESS_HEADERS = /^(to|cc|bcc|from|sender|reply-to|resent-to|resent-cc|resent-bcc|resent-from|resent-sender)$/i

/**
 * Address parsing is superlinear in a header's length: a 50,000-address `To:` (640 KB) took over a
 * second of event-loop time. Such a header is cut (at an address boundary) before parsing; the raw
 * message is stored unchanged. Messages without an oversized address header are passed as they are.
 */
export const capAddressHeaders = (raw: Buffer): Buffer => {
  const crlf = raw.indexOf("\r\n\r\n")
  const lf = raw.indexOf("\n\n")
  const end = crlf >= 0 && (lf < 0 || crlf < lf) ? crlf : lf
  const headerEnd = end >= 0 ? end : raw.length
  if (headerEnd <= MAX_ADDRESS_HEADER_BYTES) return raw
  const head = raw.subarray(0, headerEnd).toString("latin1")
  // Split into fields: a line starting with whitespace continues the previous field.
  const fields = head.split(/\r?\n(?![ \t])/)
  let changed = false
  const out = fields.map((field) => {
    if (field.length <= MAX_ADDRESS_HEADER_BYTES) return field
    const colon = field.indexOf(":")
    if (colon < 0 || !ADDRESS_HEADERS.test(field.slice(0, colon).trim())) return field
    const cut = field.lastIndexOf(",", MAX_ADDRESS_HEADER_BYTES)
    changed = true
    return field.slice(0, cut > colon ? cut : MAX_ADDRESS_HEADER_BYTES)
  })
  if (!changed) return raw
  return Buffer.concat([Buffer.from(out.join("\r\n"), "latin1"), raw.subarray(headerEnd)])
}

/** Input is handed to the parser in slices, so no single step of the parse holds the event loop long. */
const SLICE_BYTES = 64 * 1024

interface Collected {
  headers: Headers
  headerLines: HeaderLines
  text: string | undefined
  html: string | undefined
  attachments: Array<AttachmentStream>
  /** The first SNIFF_BYTES of each attachment, in order. */
  heads: Array<Buffer>
}

/**
 * mailparser's streaming MailParser, as simpleParser drives it, except that attachment bodies are
 * counted and dropped (only their metadata is kept: their bytes stay in the stored raw message), and
 * the input is written in slices with backpressure. simpleParser kept every decoded attachment and
 * decoded each input chunk in one go: a 25 MB message cost 5-6 times its size in memory.
 */
const collect = (raw: Buffer) =>
  new Promise<Collected>((resolve, reject) => {
    const parser = new MailParser({ skipHtmlToText: true, skipTextToHtml: true, skipImageLinks: true, skipTextLinks: true })
    const out: Collected = { headers: new Map(), headerLines: [], text: undefined, html: undefined, attachments: [], heads: [] }
    let settled = false
    const fail = (e: unknown) => {
      if (settled) return
      settled = true
      parser.destroy()
      reject(e instanceof Error ? e : new Error(String(e)))
    }
    parser.on("error", fail)
    parser.on("headers", (headers: Headers) => {
      out.headers = headers
      out.headerLines = (parser as unknown as { headerLines: HeaderLines }).headerLines
    })
    parser.on("data", (data: AttachmentStream | MessageText) => {
      if (data.type === "attachment") {
        out.attachments.push(data)
        // Drained, not kept (only the first bytes, to tell what it is); the hasher counts the size.
        // release() lets the parser go on.
        const index = out.heads.push(Buffer.alloc(0)) - 1
        data.content.on("data", (chunk: Buffer) => {
          const head = out.heads[index]!
          if (head.length < SNIFF_BYTES) out.heads[index] = Buffer.concat([head, chunk.subarray(0, SNIFF_BYTES - head.length)])
        })
        data.content.on("end", () => data.release())
        data.content.on("error", fail)
      } else {
        if (data.text !== undefined) out.text = data.text
        if (typeof data.html === "string") out.html = data.html
      }
    })
    parser.on("end", () => {
      if (settled) return
      settled = true
      resolve(out)
    })
    let offset = 0
    const write = () => {
      while (offset < raw.length) {
        const slice = raw.subarray(offset, offset + SLICE_BYTES)
        offset += slice.length
        if (!parser.write(slice)) return void parser.once("drain", write)
      }
      parser.end()
    }
    write()
  })

const headerValue = (headers: Headers, key: string): HeaderValue | undefined => headers.get(key)
const asString = (v: HeaderValue | undefined): string | undefined => (typeof v === "string" ? v : undefined)
const isAddressObject = (v: unknown): v is AddressObject =>
  typeof v === "object" && v !== null && "value" in v && Array.isArray((v as { value: unknown }).value)
const asAddresses = (v: HeaderValue | undefined): AddressObject | Array<AddressObject> | undefined =>
  Array.isArray(v) ? (v as ReadonlyArray<unknown>).filter(isAddressObject) : isAddressObject(v) ? v : undefined

const parseUnsafe = async (raw: Buffer): Promise<ParsedEmail> => {
  const collected = await collect(raw)
  const mailHeaders = collected.headers
  const from = asAddresses(headerValue(mailHeaders, "from"))
  const dateValue = headerValue(mailHeaders, "date")
  const refsValue = headerValue(mailHeaders, "references")
  const mail = {
    headerLines: collected.headerLines,
    headers: mailHeaders,
    messageId: asString(headerValue(mailHeaders, "message-id")),
    inReplyTo: asString(headerValue(mailHeaders, "in-reply-to")),
    references: typeof refsValue === "string"
      ? [refsValue]
      : Array.isArray(refsValue)
      ? (refsValue as ReadonlyArray<unknown>).filter((r): r is string => typeof r === "string")
      : undefined,
    subject: asString(headerValue(mailHeaders, "subject")),
    from: from === undefined ? undefined : Array.isArray(from) ? from[0] : from,
    to: asAddresses(headerValue(mailHeaders, "to")),
    cc: asAddresses(headerValue(mailHeaders, "cc")),
    date: dateValue instanceof Date ? dateValue : undefined,
    text: collected.text,
    html: collected.html,
    attachments: collected.attachments,
    heads: collected.heads
  }
  // No prototype: a header named `constructor`, `__proto__` or `toString` is a header like any other.
  const headers: Record<string, string> = Object.create(null)
  for (const { key, line } of mail.headerLines) {
    const colon = line.indexOf(":")
    const value = (colon >= 0 ? line.slice(colon + 1) : "").replace(/\r?\n[ \t]+/g, " ").trim()
    const previous = headers[key]
    headers[key] = previous === undefined ? value : `${previous}\n${value}`
  }
  const ct = mail.headers.get("content-type")
  const contentType = typeof ct === "object" && ct !== null && "value" in ct ? String(ct.value).toLowerCase() : "text/plain"
  const params: Record<string, string> = {}
  if (typeof ct === "object" && ct !== null && "params" in ct && ct.params) {
    for (const [k, v] of Object.entries(ct.params as Record<string, string>)) params[k.toLowerCase()] = String(v)
  }
  const fromValue = mail.from?.value[0]
  const refs = mail.references ?? []
  return {
    messageId: mail.messageId ?? null,
    inReplyTo: mail.inReplyTo ?? null,
    references: refs.slice(0, 1000),
    subject: mail.subject ?? null,
    from: fromValue?.address ? { address: fromValue.address.toLowerCase(), name: fromValue.name || null } : null,
    to: addresses(mail.to).slice(0, MAX_ADDRESSES),
    cc: addresses(mail.cc).slice(0, MAX_ADDRESSES),
    date: mail.date && !Number.isNaN(mail.date.getTime()) ? mail.date : null,
    headers,
    contentType,
    contentTypeParams: params,
    text: mail.text ?? null,
    html: typeof mail.html === "string" ? mail.html : null,
    attachments: mail.attachments.map((a, i) => ({
      filename: a.filename ?? null,
      content_type: a.contentType.toLowerCase(),
      size_bytes: a.size,
      content_id: a.contentId ?? null,
      disposition: a.contentDisposition ?? null,
      kind: sniff(mail.heads[i] ?? Buffer.alloc(0))
    }))
  }
}
