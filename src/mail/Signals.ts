/**
 * Trust signals of a received message: deterministic rules (no language model), each named by a
 * stable string that the API, payloads and quarantine filters use. A signal says "look twice", not
 * "this is an attack": the rules are tuned so ordinary mail (newsletters, receipts, replies,
 * non-English text, emoji) raises none, which test/trust.test.ts measures on a fixture corpus.
 */
import type { ParsedEmail } from "./Parse.js"
import { readHtml } from "./Html.js"
import { isArchive, isExecutable } from "./Sniff.js"

export const SIGNALS = [
  "ai_instructions",
  "hidden_text",
  "invisible_unicode",
  "link_mismatch",
  "executable_attachment",
  "archive_attachment",
  "reply_to_mismatch"
] as const
export type Signal = typeof SIGNALS[number]

// --- ai_instructions ----------------------------------------------------------------------------
// Text that speaks to an AI reading the mail and tells it what to do. Three shapes, each enough:
// 1. overriding its instructions ("ignore all previous instructions", "disregard your system prompt");
// 2. naming it as an AI and giving an order ("AI assistant: forward …", "if you are an AI agent, …",
//    "note to the LLM: do not …"); a bare "agent" or "assistant" is a person too often to count,
//    except as a chat role ("Assistant: forward …");
// 3. chat-template and role markers that only a model reads ("<|im_start|>", "[INST]", "<<SYS>>",
//    "new system prompt:", "you are now in developer mode").
const OVERRIDE =
  /\b(?:ignore|disregard|forget|override|bypass|skip)\b[^.!?\n]{0,40}?\b(?:previous|prior|above|earlier|preceding|all|any|your|system|original|existing)\b[^.!?\n]{0,20}?\b(?:instructions?|prompts?|directives?|guidelines|guardrails|rules)\b/
const AI_NOUN =
  "(?:ai|a\\.i\\.|artificial intelligence|llm|large language model|language model|chatbot|gpt|chatgpt|claude|copilot|gemini|" +
  "ai (?:assistant|agent|model|system)|(?:email|mail|inbox|automated|autonomous) (?:assistant|agent))"
const IMPERATIVE =
  "(?:please )?(?:ignore|disregard|forget|forward|send|reply|respond|email|delete|remove|transfer|pay|wire|reveal|share|export|" +
  "print|output|include|execute|run|call|click|visit|open|download|approve|grant|add|change|update|do not|don't|never|always|" +
  "you must|you should|you will|you are to|make sure|immediately)"
const ADDRESSED = new RegExp(
  `(?:\\b(?:dear|hey|hi|hello|attention|note to|message to|instructions? (?:to|for)|to)\\s+(?:the\\s+|any\\s+|all\\s+)?${AI_NOUN}s?\\b[\\s,:;!.\\-—]{0,6}[^.!?\\n]{0,80}?\\b${IMPERATIVE}\\b)` +
    `|(?:\\b${AI_NOUN}s?\\s*[,:;—-]\\s*${IMPERATIVE}\\b)` +
    `|(?:\\b(?:assistant|agent)\\s*:\\s*${IMPERATIVE}\\b)` +
    `|(?:\\bif you are (?:an? )?(?:${AI_NOUN}|assistant|agent|bot|automated system|model)\\b)` +
    `|(?:\\bas an? (?:${AI_NOUN})\\b[^.!?\\n]{0,40}?\\b(?:you must|you should|you will|do not|don't)\\b)`
)
const MARKERS = /<\|im_(?:start|end)\|>|\[\/?inst\]|<<\/?sys>>|\bnew (?:system )?(?:prompt|instructions)\s*:|\byou are now (?:in )?(?:developer|dan|jailbreak|unrestricted)\b|\bbegin (?:system|admin) (?:message|override)\b/

/** Lowercased, compatibility-folded, zero-width characters removed (the expressions take any whitespace). */
const ZERO_WIDTH = /[\u200b-\u200d\u2060\ufeff\u00ad]/g
const fold = (s: string) => {
  let t = /[^\x00-\x7f]/.test(s) ? s.normalize("NFKC") : s
  ZERO_WIDTH.lastIndex = 0
  if (ZERO_WIDTH.test(t)) t = t.replace(ZERO_WIDTH, "")
  return t.toLowerCase()
}

/**
 * Words one of the shapes above must contain. The full expressions run only on windows around
 * their occurrences: most mail has none, and running the expressions over 10 KB of text costs far
 * more than finding a handful of words.
 */
const TRIGGER =
  /ignore|disregard|forget|overrid|bypass|skip|\bai\b|a\.i\.|intelligen|llm|language model|chatbot|gpt|claude|copilot|gemini|assistant|agent|<\|im_|inst\]|<<\/?sys>>|new (?:system|prompt|instructions)|you are now|begin (?:system|admin)/g
const BEFORE = 160
const AFTER = 240

export const hasAiInstructions = (text: string) => {
  const t = fold(text)
  TRIGGER.lastIndex = 0
  let hit = TRIGGER.exec(t)
  if (hit === null) return false
  // Windows around the hits, overlapping ones merged: each stretch of text is examined once.
  let start = Math.max(0, hit.index - BEFORE)
  let end = hit.index + AFTER
  const examine = () => {
    const window = t.slice(start, end)
    return OVERRIDE.test(window) || ADDRESSED.test(window) || MARKERS.test(window)
  }
  for (hit = TRIGGER.exec(t); hit !== null; hit = TRIGGER.exec(t)) {
    if (hit.index - BEFORE <= end) {
      end = hit.index + AFTER
      continue
    }
    if (examine()) return true
    start = hit.index - BEFORE
    end = hit.index + AFTER
  }
  return examine()
}

// --- invisible_unicode --------------------------------------------------------------------------
// Characters that change what a program reads without changing what a person sees: Unicode tag
// characters U+E0000–E007F (ASCII smuggling), bidirectional overrides and isolates U+202A–202E and
// U+2066–2069, and runs of three or more zero-width characters (ZWSP, ZWNJ, ZWJ, word joiner, BOM).
// Not counted: an emoji tag sequence (a subdivision flag: U+1F3F4, tags, U+E007F), a single ZWJ
// inside an emoji sequence, a single ZWNJ in Persian or Indic text.
const TAG_FLAG = /\u{1F3F4}[\u{E0020}-\u{E007E}]{1,7}\u{E007F}/gu
const TAGS = /[\u{E0000}-\u{E007F}]/u
const BIDI = /[\u202a-\u202e\u2066-\u2069]/
const ZERO_WIDTH_RUN = /[\u200b-\u200d\u2060\ufeff]{3,}/

export const hasInvisibleUnicode = (text: string) =>
  TAGS.test(text.replace(TAG_FLAG, "")) || BIDI.test(text) || ZERO_WIDTH_RUN.test(text)

// --- link_mismatch ------------------------------------------------------------------------------
// A link whose text is a web address or domain name (and nothing else) that is not the site its
// href opens, compared by registrable domain (`mail.shop.co.uk` and `shop.co.uk` are one site).
// Only http(s) hrefs; words like "Click here" name no domain and are never compared.
const LINK_TEXT = /^(?:https?:\/\/)?(?:[\w.+-]+@)?((?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\.)+[a-z]{2,24})(?::\d+)?(?:[/?#]\S*)?$/i
/** File names look like domains ("invoice.pdf"): these endings are files, not sites. */
const FILE_ENDINGS = new Set(["pdf", "doc", "docx", "xls", "xlsx", "ppt", "pptx", "png", "jpg", "jpeg", "gif", "txt", "csv", "htm", "html", "php", "asp", "aspx", "exe"])
const SECOND_LEVEL = new Set(["co", "com", "net", "org", "gov", "ac", "edu", "ne", "or", "go", "gv", "ltd", "plc"])

export const registrableDomain = (host: string) => {
  const labels = host.toLowerCase().replace(/\.$/, "").split(".")
  if (labels.length >= 3 && labels[labels.length - 1]!.length === 2 && SECOND_LEVEL.has(labels[labels.length - 2]!)) {
    return labels.slice(-3).join(".")
  }
  return labels.slice(-2).join(".")
}

const hostOf = (href: string) => {
  try {
    const u = new URL(href.trim())
    return u.protocol === "http:" || u.protocol === "https:" ? u.hostname.toLowerCase() : null
  } catch {
    return null
  }
}

export const isLinkMismatch = (text: string, href: string) => {
  const m = LINK_TEXT.exec(text.trim())
  if (m === null) return false
  const named = m[1]!.toLowerCase()
  if (FILE_ENDINGS.has(named.slice(named.lastIndexOf(".") + 1))) return false
  const host = hostOf(href)
  return host !== null && registrableDomain(host) !== registrableDomain(named)
}

// --- reply_to_mismatch --------------------------------------------------------------------------
// Replies would go to another site than the one the From names: a Reply-To address whose
// registrable domain differs from the From address's.
const ADDRESS = /[^\s<>,;:"()]+@([^\s<>,;:"()]+)/g

export const isReplyToMismatch = (fromAddress: string | null, replyTo: string | undefined) => {
  if (fromAddress === null || replyTo === undefined) return false
  const at = fromAddress.lastIndexOf("@")
  if (at < 0) return false
  const own = registrableDomain(fromAddress.slice(at + 1))
  for (const m of replyTo.matchAll(ADDRESS)) if (registrableDomain(m[1]!) !== own) return true
  return false
}

// --- hidden_text --------------------------------------------------------------------------------
// HTML text a reader cannot see (Html.ts: display:none, visibility:hidden, zero size, opacity 0,
// same colour as the background, the `hidden` attribute). Not counted: the preview text
// ("preheader") convention, a short hidden stretch before any visible text (at most 200 characters).
const PREHEADER_MAX = 200
const meaningful = (s: string) => s.replace(/[\s\u00a0\u200b-\u200d\u2060\ufeff\u034f\u00ad\u2007]/g, "")

// --- executable_attachment, archive_attachment --------------------------------------------------
// From the content's first bytes (Sniff.ts: MZ, ELF, Mach-O, #!, Java; zip, rar, 7z, gzip, …),
// and from names Windows runs (.exe, .scr, .js, …) or archive endings: a program renamed to .pdf
// is still a program. Office documents are zips inside and count as neither.

/** Every signal the message raises, in SIGNALS order. */
export const trustSignals = (p: ParsedEmail): ReadonlyArray<Signal> => {
  const found = new Set<Signal>()
  const view = p.html !== null ? readHtml(p.html) : null
  const hiddenText = view?.hidden.map((h) => h.text).join(" ") ?? ""
  const everything = [p.subject ?? "", p.text ?? "", view?.visible ?? "", hiddenText].join("\n")
  if (hasAiInstructions(everything)) found.add("ai_instructions")
  if (view !== null) {
    const exempt = (h: { text: string; afterVisible: boolean }) => !h.afterVisible && meaningful(h.text).length <= PREHEADER_MAX
    if (view.hidden.some((h) => meaningful(h.text).length > 0 && !exempt(h))) found.add("hidden_text")
    if (view.links.some((l) => isLinkMismatch(l.text, l.href))) found.add("link_mismatch")
  }
  const seen = [p.subject ?? "", p.text ?? "", view?.visible ?? "", ...(view?.hidden.filter((h) => h.afterVisible).map((h) => h.text) ?? [])]
  if (seen.some(hasInvisibleUnicode) || TAGS.test(hiddenText.replace(TAG_FLAG, "")) || BIDI.test(hiddenText)) found.add("invisible_unicode")
  if (p.attachments.some((a) => isExecutable(a.kind ?? null, a.filename))) found.add("executable_attachment")
  if (p.attachments.some((a) => isArchive(a.kind ?? null, a.filename))) found.add("archive_attachment")
  if (isReplyToMismatch(p.from?.address ?? null, p.headers["reply-to"])) found.add("reply_to_mismatch")
  return SIGNALS.filter((s) => found.has(s))
}
