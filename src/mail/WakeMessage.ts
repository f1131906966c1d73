/**
 * The wake email: composed by the service when a wake fires, and read back on ingestion (from the
 * service, or from an allowed sender). The command is the message's `application/json` part:
 * `{type, payload?, function_id?, wake_id?, scheduled_for?, fired_at?, thread_id?}` (`thread_id`: a thread watch's thread);
 * `Mailroom-Wake-Signature: t=<unix>,v1=<hex>` is HMAC-SHA256 of `<t>.<that JSON text>` with the account's webhook
 * secret (the webhook scheme). A signed command is bound to its target (`function_id`) and used once (`wake_id` with
 * `scheduled_for`): SmtpServer refuses one replayed, retargeted or naming neither.
 */
import { createHmac, type KeyObject, timingSafeEqual } from "node:crypto"
import { simpleParser } from "mailparser"
import nodemailer from "nodemailer"

/** Builds MIME without sending it (nodemailer's composer behind a stream transport). */
const builder = nodemailer.createTransport({ streamTransport: true, buffer: true, newline: "crlf" })

export const WAKE_SIGNATURE_HEADER = "Mailroom-Wake-Signature"
export const WAKE_SENDER_LOCAL = "wake"

/** A signed command is accepted this long after it was signed (mail may take a while) and 5 minutes early. */
const SIGNATURE_MAX_AGE_S = 24 * 60 * 60
const SIGNATURE_MAX_SKEW_S = 5 * 60

export const wakeAddress = (functionId: string, domain: string) => `fn-${functionId}@${domain}`

/** Whether `sender` is on an allowlist of lowercased addresses and `@domain`s. */
export const mayCommand = (sender: string, allowlist: ReadonlyArray<string>) => {
  const address = sender.trim().toLowerCase()
  const at = address.lastIndexOf("@")
  if (at <= 0) return false
  return allowlist.includes(address) || allowlist.includes(address.slice(at))
}

export interface CommandPart {
  /** The part's JSON text, exactly as signed. */
  readonly json: string
  readonly type: string
  readonly payload: unknown
  /** The function the command was signed for. */
  readonly functionId: string | null
  readonly wakeId: string | null
  readonly scheduledFor: string | null
  readonly firedAt: string | null
  readonly threadId: string | null
  readonly signature: string | null
}

const TYPE = /^[a-z0-9_.-]{1,64}$/
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

export const signCommand = (secret: string, json: string, t: number) =>
  `t=${t},v1=${createHmac("sha256", Buffer.from(secret, "utf8")).update(`${t}.${json}`).digest("hex")}`

/** Whether the signature is one of `secrets` over the JSON text, signed within the accepted window. */
export const verifyCommand = (signature: string | null, json: string, secrets: ReadonlyArray<string>, nowMs: number) => {
  if (signature === null) return false
  const fields = signature.split(",").map((kv) => kv.trim().split("=") as [string, string | undefined])
  const t = Number(fields.find(([k]) => k === "t")?.[1])
  const now = nowMs / 1000
  if (!Number.isInteger(t) || now - t > SIGNATURE_MAX_AGE_S || t - now > SIGNATURE_MAX_SKEW_S) return false
  const given = fields.filter(([k]) => k === "v1").map(([, v]) => Buffer.from(v ?? "", "utf8"))
  return secrets.some((secret) => {
    const expected = Buffer.from(signCommand(secret, json, t).split("v1=")[1]!, "utf8")
    return given.some((g) => g.length === expected.length && timingSafeEqual(g, expected))
  })
}

/** What makes a signed command single-use: its wake id and the firing it is (`scheduled_for`). */
export const useKeyOf = (c: CommandPart) => (c.wakeId === null ? null : `${c.wakeId}|${c.scheduledFor ?? ""}`)

/** The command a message carries, or a reason it carries none. */
export const commandOf = async (raw: Buffer): Promise<CommandPart | { readonly problem: string }> => {
  const mail = await simpleParser(raw, { skipHtmlToText: true, skipTextToHtml: true, skipTextLinks: true })
  const part = mail.attachments.find((a) => a.contentType.toLowerCase() === "application/json")
  if (part === undefined) return { problem: "no application/json part holding the command" }
  const header = mail.headers.get(WAKE_SIGNATURE_HEADER.toLowerCase())
  return commandOfJson(part.content.toString("utf8"), typeof header === "string" ? header : null)
}

/** The command of a command part's JSON text and the message's signature header. */
const commandOfJson = (json: string, signature: string | null): CommandPart | { readonly problem: string } => {
  let value: unknown
  try {
    value = JSON.parse(json)
  } catch {
    return { problem: "the application/json part is not JSON" }
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) return { problem: "the command must be a JSON object" }
  const c = value as Record<string, unknown>
  if (typeof c["type"] !== "string" || !TYPE.test(c["type"])) {
    return { problem: "the command's type must be 1-64 characters of a-z, 0-9, _, . and -" }
  }
  const text = (v: unknown) => (typeof v === "string" ? v : null)
  return {
    json,
    type: c["type"],
    payload: c["payload"] ?? null,
    functionId: typeof c["function_id"] === "string" && UUID.test(c["function_id"]) ? c["function_id"] : null,
    wakeId: typeof c["wake_id"] === "string" && UUID.test(c["wake_id"]) ? c["wake_id"] : null,
    scheduledFor: text(c["scheduled_for"]),
    firedAt: text(c["fired_at"]),
    threadId: typeof c["thread_id"] === "string" && UUID.test(c["thread_id"]) ? c["thread_id"] : null,
    signature
  }
}

export interface ComposeInput {
  readonly domain: string
  readonly functionId: string
  readonly wakeId: string
  readonly type: string
  readonly payload: unknown
  readonly scheduledFor: Date
  readonly firedAt: Date
  readonly secret: string
  /** A thread watch's thread: the function learns which conversation went silent. */
  readonly threadId: string | null
  /** The managed inbox domain's DKIM key: wake emails are signed like all mail of the service. */
  readonly dkim?: { readonly domainName: string; readonly keySelector: string; readonly privateKey: KeyObject }
}

/**
 * The signed wake email as raw MIME, with a Message-ID derived from the wake and its due time
 * (answered as stored for received mail: `<…>`), and the command it carries: what `commandOf`
 * reads back from the raw message, without parsing the MIME just written.
 */
export const composeWake = (
  input: ComposeInput
): Promise<{ readonly raw: Buffer; readonly messageId: string; readonly command: CommandPart | { readonly problem: string } }> => {
  const json = JSON.stringify({
    type: input.type,
    payload: input.payload,
    function_id: input.functionId,
    wake_id: input.wakeId,
    scheduled_for: input.scheduledFor.toISOString(),
    fired_at: input.firedAt.toISOString(),
    ...(input.threadId !== null ? { thread_id: input.threadId } : {})
  })
  const messageId = `<wake.${input.wakeId}.${input.scheduledFor.getTime()}@${input.domain}>`
  const signature = signCommand(input.secret, json, Math.floor(input.firedAt.getTime() / 1000))
  return builder.sendMail({
    from: { name: "Mailroom wake", address: `${WAKE_SENDER_LOCAL}@${input.domain}` },
    to: wakeAddress(input.functionId, input.domain),
    subject: `Wake: ${input.type}`,
    messageId,
    date: input.firedAt,
    headers: {
      [WAKE_SIGNATURE_HEADER]: signature,
      "Auto-Submitted": "auto-generated"
    },
    text: `Wake command "${input.type}" for function ${input.functionId}, scheduled for ${input.scheduledFor.toISOString()}.\n`,
    attachments: [{ filename: "command.json", content: json, contentType: "application/json" }],
    ...(input.dkim !== undefined ? { dkim: { ...input.dkim } } : {})
  }).then((info) => ({ raw: info.message as unknown as Buffer, messageId, command: commandOfJson(json, signature) }))
}
