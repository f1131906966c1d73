/**
 * Sender patterns of filters (and of endpoint sender rules, which are plain addresses):
 * - `alice@acme.com`: exactly that address;
 * - `@acme.com`: every sender at exactly that domain;
 * - `*.acme.com`: every sender at a subdomain of acme.com (`mail.acme.com`, `a.b.acme.com`), not at
 *   acme.com itself (add `@acme.com` for that).
 * Patterns are trimmed and lowercased; addresses compare case-insensitively.
 */
export type SenderPattern =
  | { readonly kind: "address"; readonly address: string }
  | { readonly kind: "domain"; readonly domain: string }
  | { readonly kind: "subdomains"; readonly domain: string }

export const PATTERN_MAX_LENGTH = 500

const LABEL = "[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
const DOMAIN = `(?:${LABEL}\\.)+${LABEL}`
const DOMAIN_RE = new RegExp(`^${DOMAIN}$`)
const LOCAL_RE = /^[a-z0-9!#$%&'*+/=?^_`{|}~.-]{1,64}$/

export const normalizePattern = (raw: string) => raw.trim().toLowerCase()

export const isDomainName = (s: string) => s.length <= 253 && DOMAIN_RE.test(s)

export const isEmailAddress = (s: string) => {
  const at = s.lastIndexOf("@")
  if (at <= 0) return false
  return LOCAL_RE.test(s.slice(0, at).toLowerCase()) && isDomainName(s.slice(at + 1).toLowerCase())
}

/** Reads a normalized pattern; `undefined` when it is none of the three forms. */
export const parsePattern = (pattern: string): SenderPattern | undefined => {
  const p = normalizePattern(pattern)
  if (p.length === 0 || p.length > PATTERN_MAX_LENGTH) return undefined
  if (p.startsWith("@")) return isDomainName(p.slice(1)) ? { kind: "domain", domain: p.slice(1) } : undefined
  if (p.startsWith("*.")) return isDomainName(p.slice(2)) ? { kind: "subdomains", domain: p.slice(2) } : undefined
  // `*` is legal in a local part but here it would read as a wildcard that does nothing: refuse it.
  return isEmailAddress(p) && !p.includes("*") ? { kind: "address", address: p } : undefined
}

/** The domain part of an address, lowercased (`undefined` without an `@`). */
export const domainOf = (address: string) => {
  const at = address.lastIndexOf("@")
  return at < 0 ? undefined : address.slice(at + 1).toLowerCase().replace(/\.$/, "")
}

export const matchesSender = (pattern: SenderPattern | string, sender: string): boolean => {
  const p = typeof pattern === "string" ? parsePattern(pattern) : pattern
  if (p === undefined) return false
  const address = sender.trim().toLowerCase()
  const domain = domainOf(address)
  if (domain === undefined) return false
  switch (p.kind) {
    case "address":
      return address === p.address
    case "domain":
      return domain === p.domain
    case "subdomains":
      return domain.endsWith(`.${p.domain}`)
  }
}

/** True when any of the patterns matches the sender. */
export const matchesAny = (patterns: ReadonlyArray<SenderPattern | string>, sender: string) =>
  patterns.some((p) => matchesSender(p, sender))
