/**
 * SPF, DKIM and DMARC with mailauth. CONTRACT.md: every DNS lookup on the inbound path has a short
 * timeout and a failure gives `temperror`/`none`; it never delays or blocks acceptance or delivery
 * beyond that budget, so the whole check is also bounded.
 */
import { authenticate } from "mailauth"
import { Resolver } from "node:dns/promises"

export type AuthResult = "pass" | "fail" | "softfail" | "neutral" | "none" | "temperror" | "permerror" | "policy"

export interface AuthResults {
  readonly spf: AuthResult
  readonly dkim: AuthResult
  readonly dmarc: AuthResult
}

export const NO_AUTH: AuthResults = { spf: "none", dkim: "none", dmarc: "none" }
const TEMP: AuthResults = { spf: "temperror", dkim: "temperror", dmarc: "temperror" }

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

/** A resolver honouring DNS_SERVER ("host:port") with a 1 s per-query timeout and one try. */
export const makeResolver = (dnsServer: string | null) => {
  const resolver = new Resolver({ timeout: 1000, tries: 1 })
  if (dnsServer !== null) resolver.setServers([dnsServer])
  return (domain: string, rrtype: string) =>
    resolver.resolve(domain, rrtype) as unknown as Promise<Array<Array<string>> | Array<string>>
}

export const checkAuthenticity = async (raw: Buffer, options: AuthCheckOptions): Promise<AuthResults> => {
  const budget = options.timeoutMs ?? 2000
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<AuthResults>((resolve) => {
    timer = setTimeout(() => resolve(TEMP), budget)
  })
  const check = authenticate(raw, {
    ip: options.ip,
    ...(options.helo !== null ? { helo: options.helo } : {}),
    ...(options.sender !== null ? { sender: options.sender } : {}),
    mta: "mailroom",
    resolver: makeResolver(options.dnsServer),
    disableArc: true,
    disableBimi: true
  }).then((res): AuthResults => {
    const dkimResults = res.dkim?.results ?? []
    const dkim: AuthResult = dkimResults.some((d) => d.status?.result === "pass")
      ? "pass"
      : dkimResults.length === 0
      ? "none"
      : normalize(dkimResults[0]?.status?.result)
    return {
      spf: res.spf ? normalize(res.spf.status?.result) : "none",
      dkim,
      dmarc: res.dmarc ? normalize(res.dmarc.status?.result) : "none"
    }
  }).catch(() => TEMP)
  try {
    return await Promise.race([check, timeout])
  } finally {
    clearTimeout(timer)
  }
}
