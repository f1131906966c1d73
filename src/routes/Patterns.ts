/**
 * Recipient address patterns of routes: `support@acme.com` (exact), `*@acme.com`, `*+tag@acme.com`,
 * `sales-*@acme.com`: `*` stands for any run of characters in the local part only.
 */
import { isDomainName } from "../mail/SenderPatterns.js"

const LOCAL_RE = /^[a-z0-9!#$%&'*+/=?^_`{|}~.-]{1,64}$/

export interface RoutePattern {
  readonly pattern: string
  readonly local: string
  readonly domain: string
  readonly wildcard: boolean
}

export const parseRoutePattern = (raw: string): RoutePattern | undefined => {
  const pattern = raw.trim().toLowerCase()
  const at = pattern.lastIndexOf("@")
  if (at <= 0) return undefined
  const local = pattern.slice(0, at)
  const domain = pattern.slice(at + 1)
  if (!LOCAL_RE.test(local) || !isDomainName(domain)) return undefined
  return { pattern, local, domain, wildcard: local.includes("*") }
}

const escape = (s: string) => s.replace(/[.+?^${}()|[\]\\/]/g, "\\$&")

export const matchesRoute = (p: RoutePattern, address: string): boolean => {
  const a = address.trim().toLowerCase()
  const at = a.lastIndexOf("@")
  if (at <= 0 || a.slice(at + 1) !== p.domain) return false
  const local = a.slice(0, at)
  if (!p.wildcard) return local === p.local
  return new RegExp(`^${p.local.split("*").map(escape).join(".*")}$`).test(local)
}

/**
 * Precedence among matching routes: exact before wildcard; among wildcards, more literal
 * characters first (`*+tag@` before `*@`), then fewer wildcards; ties by age (oldest first).
 */
export const compareSpecificity = (a: RoutePattern, b: RoutePattern): number => {
  if (a.wildcard !== b.wildcard) return a.wildcard ? 1 : -1
  const literal = (p: RoutePattern) => p.local.replace(/\*/g, "").length
  if (literal(a) !== literal(b)) return literal(b) - literal(a)
  const stars = (p: RoutePattern) => p.local.split("*").length - 1
  return stars(a) - stars(b)
}
