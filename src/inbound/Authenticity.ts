/**
 * SPF, DKIM and DMARC with mailauth. Every DNS lookup on the inbound path has a short
 * timeout and a failure gives `temperror`/`none`; it never delays or blocks acceptance or delivery
 * beyond that budget, so the whole check is also bounded.
 */
import { authenticate } from "mailauth"
import { getAlignment } from "mailauth/lib/tools.js"
import { Resolver } from "node:dns/promises"

export type AuthResult = "pass" | "fail" | "softfail" | "neutral" | "none" | "temperror" | "permerror" | "policy"

export interface AuthResults {
  readonly spf: AuthResult
  readonly dkim: AuthResult
  readonly dmarc: AuthResult
}

export const NO_AUTH: AuthResults = { spf: "none", dkim: "none", dmarc: "none" }
const TEMP: AuthResults = { spf: "temperror", dkim: "temperror", dmarc: "temperror" }

export interface AuthCheck {
  readonly results: AuthResults
  /**
   * The From header's one address (lowercased) when the message proves it: DMARC passes, or a DKIM
   * signature passes whose domain is aligned (relaxed, as DMARC aligns) with the From domain; else
   * null. A message with several From addresses proves none.
   */
  readonly authenticatedFrom: string | null
  /**
   * The From header's one address (lowercased) when it may become a known sender (the first-send
   * gate): DMARC passes or, where the From domain publishes no DMARC record, a passing DKIM signature
   * or SPF check aligned (relaxed) with the From domain. DMARC failing, or not decidable, makes none.
   */
  readonly knownFrom: string | null
}

export const NO_AUTH_CHECK: AuthCheck = { results: NO_AUTH, authenticatedFrom: null, knownFrom: null }
const TEMP_CHECK: AuthCheck = { results: TEMP, authenticatedFrom: null, knownFrom: null }

const normalize = (r: string | undefined): AuthResult => {
  switch (r) {
    case "pass":
    case "fail":
    case "softfail":
    case "neutral":
    case "none":
    case "permerror":
    case "policy":
      return r
    case "temperror":
    case "temperr":
      return "temperror"
    default:
      return "none"
  }
}

export interface AuthCheckOptions {
  readonly ip: string
  readonly helo: string | null
  readonly sender: string | null
  readonly dnsServer: string | null
  readonly timeoutMs?: number
}

type ResolveFn = (domain: string, rrtype: string) => Promise<Array<Array<string>> | Array<string>>

/** How long an answer (or a "no such name / no such record") is reused. */
const ANSWER_TTL_MS = 10_000
/** How long a failed lookup (timeout, refused) is reused: a dead server does not cost every message its timeout. */
const FAILURE_TTL_MS = 2_000
const CACHE_ENTRIES = 10_000
const ABSENT = new Set(["ENOTFOUND", "ENODATA"])

/**
 * A resolver honouring DNS_SERVER ("host:port") with a 1 s per-query timeout and one try, one per
 * server for the process. Answers are reused for a few seconds (node's resolver does not report TXT
 * TTLs, so the period is fixed and short): mail from one sender domain usually comes in bursts, and
 * every message would otherwise ask for the same SPF and DMARC records. Concurrent identical
 * queries share one lookup.
 */
const makeCachedResolver = (dnsServer: string | null): ResolveFn => {
  const resolver = new Resolver({ timeout: 1000, tries: 1 })
  if (dnsServer !== null) resolver.setServers([dnsServer])
  const cache = new Map<string, { readonly until: number; readonly answer: ReturnType<ResolveFn> }>()
  return (domain, rrtype) => {
    const key = `${rrtype} ${domain.toLowerCase()}`
    const now = Date.now()
    const hit = cache.get(key)
    if (hit !== undefined && hit.until > now) return hit.answer
    if (hit !== undefined) cache.delete(key)
    if (cache.size >= CACHE_ENTRIES) cache.delete(cache.keys().next().value!)
    const answer = resolver.resolve(domain, rrtype) as unknown as ReturnType<ResolveFn>
    // Until it settles, the lookup is shared; then it stays for the TTL its outcome earns.
    cache.set(key, { until: now + 1000, answer })
    answer.then(
      () => cache.set(key, { until: Date.now() + ANSWER_TTL_MS, answer }),
      (e: unknown) => {
        const code = typeof e === "object" && e !== null && "code" in e ? String(e.code) : ""
        cache.set(key, { until: Date.now() + (ABSENT.has(code) ? ANSWER_TTL_MS : FAILURE_TTL_MS), answer })
      }
    )
    return answer
  }
}

const resolvers = new Map<string | null, ResolveFn>()
export const makeResolver = (dnsServer: string | null): ResolveFn => {
  let r = resolvers.get(dnsServer)
  if (r === undefined) {
    r = makeCachedResolver(dnsServer)
    resolvers.set(dnsServer, r)
  }
  return r
}

const DKIM_SIGNATURE = /^dkim-signature[ \t]*:/im

/**
 * What the checks need to read: without a DKIM signature the body decides nothing (SPF looks at the
 * envelope, DMARC at the From header), so only the header block is handed over instead of the whole
 * message being streamed through the DKIM verifier.
 */
export const authenticityInput = (raw: Buffer): Buffer => {
  const crlf = raw.indexOf("\r\n\r\n")
  const lf = raw.indexOf("\n\n")
  const end = crlf >= 0 && (lf < 0 || crlf < lf) ? crlf + 4 : lf >= 0 ? lf + 2 : -1
  if (end < 0) return raw
  const head = raw.subarray(0, end)
  return DKIM_SIGNATURE.test(head.toString("latin1")) ? raw : head
}

export const checkAuthenticity = async (raw: Buffer, options: AuthCheckOptions): Promise<AuthCheck> => {
  const budget = options.timeoutMs ?? 2000
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<AuthCheck>((resolve) => {
    timer = setTimeout(() => resolve(TEMP_CHECK), budget)
  })
  const check = authenticate(authenticityInput(raw), {
    ip: options.ip,
    ...(options.helo !== null ? { helo: options.helo } : {}),
    ...(options.sender !== null ? { sender: options.sender } : {}),
    mta: "mailroom",
    resolver: makeResolver(options.dnsServer),
    disableArc: true,
    disableBimi: true
  }).then((res): AuthCheck => {
    const dkimResults = res.dkim?.results ?? []
    const dkim: AuthResult = dkimResults.some((d) => d.status?.result === "pass")
      ? "pass"
      : dkimResults.length === 0
      ? "none"
      : normalize(dkimResults[0]?.status?.result)
    const results: AuthResults = {
      spf: res.spf ? normalize(res.spf.status?.result) : "none",
      dkim,
      dmarc: res.dmarc ? normalize(res.dmarc.status?.result) : "none"
    }
    // mailauth marks a signature `aligned` (with the organizational domain) against the first From address.
    const from = res.dkim?.headerFrom ?? []
    const alignedDkim = dkimResults.some((d) => d.status?.result === "pass" && Boolean(d.status?.aligned))
    const one = from.length === 1 ? from[0]!.trim().toLowerCase() : null
    const proven = one !== null && (results.dmarc === "pass" || alignedDkim)
    const spfDomain = results.spf === "pass" && res.spf && typeof res.spf.domain === "string" ? res.spf.domain : null
    const alignedSpf = one !== null && spfDomain !== null && getAlignment(one.slice(one.lastIndexOf("@") + 1), [spfDomain]) !== false
    const known = one !== null && (results.dmarc === "pass" || (results.dmarc === "none" && (alignedDkim || alignedSpf)))
    return { results, authenticatedFrom: proven ? one : null, knownFrom: known ? one : null }
  }).catch(() => TEMP_CHECK)
  try {
    return await Promise.race([check, timeout])
  } finally {
    clearTimeout(timer)
  }
}
