/**
 * A transparent spam score on SpamAssassin's scale (0 = clean, ≥ 5 suspicious, 15 = certain), from
 * authentication results and structural signals. It is compared with the account's or domain's
 * `spam_threshold`; each rule that fired is recorded so a rejection can be explained.
 */
import type { AuthResults } from "./Authenticity.js"
import type { ParsedEmail } from "../mail/Parse.js"

export interface SpamVerdict {
  readonly score: number
  readonly rules: ReadonlyArray<string>
}

const PHRASES = /(viagra|cialis|lottery|you have won|wire transfer|bitcoin investment|act now|100% free|click here to claim)/i

export const scoreSpam = (p: ParsedEmail, auth: AuthResults): SpamVerdict => {
  const rules: Array<[string, number]> = []
  if (auth.spf === "fail") rules.push(["SPF_FAIL", 3])
  else if (auth.spf === "softfail") rules.push(["SPF_SOFTFAIL", 1])
  if (auth.dkim === "fail") rules.push(["DKIM_INVALID", 2])
  if (auth.dmarc === "fail") rules.push(["DMARC_FAIL", 3])
  if (p.messageId === null) rules.push(["MISSING_MID", 1])
  if (p.date === null) rules.push(["MISSING_DATE", 1])
  if (p.from === null) rules.push(["MISSING_FROM", 2])
  const subject = p.subject ?? ""
  if (subject.length >= 10 && subject === subject.toUpperCase() && /[A-Z]/.test(subject)) rules.push(["SUBJ_ALL_CAPS", 1.5])
  if (p.html !== null && p.text === null) rules.push(["HTML_ONLY", 0.5])
  if (PHRASES.test(`${subject}\n${p.text ?? ""}`)) rules.push(["SPAM_PHRASES", 2.5])
  const upstream = Number.parseFloat(p.headers["x-spam-score"] ?? "")
  if (Number.isFinite(upstream) && upstream > 0) rules.push(["UPSTREAM_SCORE", Math.min(upstream, 15)])
  const score = Math.min(15, Math.round(rules.reduce((s, [, w]) => s + w, 0) * 10) / 10)
  return { score, rules: rules.map(([name]) => name) }
}
