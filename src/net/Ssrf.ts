/**
 * Server-side request forgery guard for webhook URLs (an endpoint's `url`, checked at create,
 * update and every delivery): only public unicast addresses may be contacted. Every address a host
 * name resolves to is checked, and the checked addresses are returned so the sender connects to
 * exactly those (no second resolution that could answer differently).
 *
 * IPv4 literals are read the way URL parsers and `inet_aton` read them (decimal `2130706433`, hex
 * `0x7f000001`, octal `0177.0.0.1`, short `127.1`), and IPv6 addresses that embed an IPv4 address
 * (mapped `::ffff:a.b.c.d`, SIIT-translated `::ffff:0:a.b.c.d`, compatible `::a.b.c.d`, NAT64
 * `64:ff9b::/96`, 6to4 `2002::/16`) are judged by the embedded address; the local-use NAT64 prefix
 * `64:ff9b:1::/48` is never public. Every other range of the IANA IPv4 and IPv6 Special-Purpose
 * Address Registries is refused whole, whatever the registry says of its global reachability (anycast
 * service addresses and identifier ranges such as ORCHIDv2 are no webhook receivers). Port 0 is
 * refused (no service listens there; stacks treat it as "any port").
 */
import { Data, Effect } from "effect"
import { Dns } from "./Dns.js"

export type Family = 4 | 6

export interface CheckedAddress {
  readonly address: string
  readonly family: Family
}

export type Classification =
  | { readonly public: true }
  | { readonly public: false; readonly range: string }

// --- IPv4 ---------------------------------------------------------------------------------------

const parsePart = (s: string): number | undefined => {
  if (s === "") return undefined
  if (/^0x[0-9a-f]*$/i.test(s)) return s.length === 2 ? 0 : parseInt(s.slice(2), 16)
  if (/^0[0-7]+$/.test(s)) return parseInt(s.slice(1), 8)
  if (/^(0|[1-9][0-9]*)$/.test(s)) return Number(s)
  return undefined
}

/** An IPv4 literal in any form `inet_aton` accepts, as a 32-bit number. */
export const parseIPv4 = (input: string): number | undefined => {
  const parts = input.split(".")
  if (parts.length > 1 && parts[parts.length - 1] === "") parts.pop()
  if (parts.length === 0 || parts.length > 4) return undefined
  const nums: Array<number> = []
  for (const p of parts) {
    const n = parsePart(p)
    if (n === undefined || !Number.isFinite(n)) return undefined
    nums.push(n)
  }
  const last = nums[nums.length - 1]!
  if (nums.slice(0, -1).some((n) => n > 255)) return undefined
  if (last >= 256 ** (5 - nums.length)) return undefined
  let value = last
  for (let i = 0; i < nums.length - 1; i++) value += nums[i]! * 256 ** (3 - i)
  return value
}

export const formatIPv4 = (n: number) => [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join(".")

const v4 = (a: number, b: number, c: number, d: number) => ((a << 24) >>> 0) + (b << 16) + (c << 8) + d

const V4_BLOCKED: ReadonlyArray<readonly [number, number, string]> = [
  [v4(0, 0, 0, 0), 8, "this-network"],
  [v4(10, 0, 0, 0), 8, "private"],
  [v4(100, 64, 0, 0), 10, "carrier-grade-nat"],
  [v4(127, 0, 0, 0), 8, "loopback"],
  [v4(169, 254, 0, 0), 16, "link-local"], // includes the 169.254.169.254 metadata service
  [v4(172, 16, 0, 0), 12, "private"],
  [v4(192, 0, 0, 0), 24, "ietf-protocol-assignments"],
  [v4(192, 0, 2, 0), 24, "documentation"],
  [v4(192, 31, 196, 0), 24, "as112"],
  [v4(192, 52, 193, 0), 24, "amt"],
  [v4(192, 88, 99, 0), 24, "6to4-relay"],
  [v4(192, 168, 0, 0), 16, "private"],
  [v4(192, 175, 48, 0), 24, "as112"],
  [v4(198, 18, 0, 0), 15, "benchmarking"],
  [v4(198, 51, 100, 0), 24, "documentation"],
  [v4(203, 0, 113, 0), 24, "documentation"],
  [v4(224, 0, 0, 0), 4, "multicast"],
  [v4(240, 0, 0, 0), 4, "reserved"] // includes 255.255.255.255
]

const inV4 = (ip: number, base: number, bits: number) =>
  bits === 0 || (ip >>> (32 - bits)) === (base >>> (32 - bits))

export const classifyIPv4 = (ip: number): Classification => {
  if (ip === v4(169, 254, 169, 254) || ip === v4(100, 100, 100, 200)) return { public: false, range: "metadata" }
  for (const [base, bits, range] of V4_BLOCKED) if (inV4(ip, base, bits)) return { public: false, range }
  return { public: true }
}

// --- IPv6 ---------------------------------------------------------------------------------------

/** An IPv6 literal (brackets and zone id allowed) as 8 16-bit groups. */
export const parseIPv6 = (input: string): ReadonlyArray<number> | undefined => {
  let s = input.startsWith("[") && input.endsWith("]") ? input.slice(1, -1) : input
  const zone = s.indexOf("%")
  if (zone >= 0) s = s.slice(0, zone)
  if (!s.includes(":")) return undefined
  const halves = s.split("::")
  if (halves.length > 2) return undefined
  const groups = (part: string): Array<number> | undefined => {
    if (part === "") return []
    const out: Array<number> = []
    const items = part.split(":")
    for (let i = 0; i < items.length; i++) {
      const item = items[i]!
      if (i === items.length - 1 && item.includes(".")) {
        if (!/^\d{1,3}(\.\d{1,3}){3}$/.test(item)) return undefined
        const octets = item.split(".").map(Number)
        if (octets.some((o) => o > 255)) return undefined
        out.push((octets[0]! << 8) + octets[1]!, (octets[2]! << 8) + octets[3]!)
      } else {
        if (!/^[0-9a-f]{1,4}$/i.test(item)) return undefined
        out.push(parseInt(item, 16))
      }
    }
    return out
  }
  const head = groups(halves[0]!)
  const tail = halves.length === 2 ? groups(halves[1]!) : []
  if (head === undefined || tail === undefined) return undefined
  if (halves.length === 1) return head.length === 8 ? head : undefined
  const fill = 8 - head.length - tail.length
  if (fill < 1) return undefined
  return [...head, ...Array<number>(fill).fill(0), ...tail]
}

const embeddedV4 = (g: ReadonlyArray<number>, at: number) => ((g[at]! << 16) >>> 0) + g[at + 1]!

export const classifyIPv6 = (g: ReadonlyArray<number>): Classification => {
  const zeros = (n: number) => g.slice(0, n).every((x) => x === 0)
  if (zeros(8)) return { public: false, range: "unspecified" }
  if (zeros(7) && g[7] === 1) return { public: false, range: "loopback" }
  // IPv4-mapped ::ffff:0:0/96, IPv4-translated (SIIT) ::ffff:0:0:0/96 and IPv4-compatible ::/96:
  // judged by the IPv4 address. A stack that translates the SIIT form reaches that address.
  if (zeros(5) && g[5] === 0xffff) return classifyIPv4(embeddedV4(g, 6))
  if (zeros(4) && g[4] === 0xffff && g[5] === 0) return classifyIPv4(embeddedV4(g, 6))
  if (zeros(6)) return classifyIPv4(embeddedV4(g, 6))
  if (g[0] === 0x64 && g[1] === 0xff9b) {
    // The well-known NAT64 prefix 64:ff9b::/96 carries the IPv4 address in its last 32 bits.
    if (g[2] === 0 && g[3] === 0 && g[4] === 0 && g[5] === 0) return classifyIPv4(embeddedV4(g, 6))
    // 64:ff9b:1::/48 is for local translators, whose prefix length (and so where the IPv4 address
    // sits) is the operator's choice: not globally reachable, whatever follows. The rest of
    // 64:ff9b::/32 is unassigned.
    return { public: false, range: "nat64-local" }
  }
  // 6to4 2002::/16 carries an IPv4 address in bits 16-47.
  if (g[0] === 0x2002) return classifyIPv4(embeddedV4(g, 1))
  const first = g[0]!
  if ((first & 0xfe00) === 0xfc00) return { public: false, range: "unique-local" } // includes fd00:ec2::254
  if ((first & 0xffc0) === 0xfe80) return { public: false, range: "link-local" }
  if ((first & 0xffc0) === 0xfec0) return { public: false, range: "site-local" }
  if ((first & 0xff00) === 0xff00) return { public: false, range: "multicast" }
  if (first === 0x2001 && g[1] === 0x0db8) return { public: false, range: "documentation" }
  if (first === 0x2001 && g[1] === 0) return { public: false, range: "teredo" } // obfuscated IPv4 inside
  // 2001::/23, IETF protocol assignments: benchmarking 2001:2::/48, AMT 2001:3::/32, AS112 2001:4:112::/48,
  // ORCHID 2001:10::/28, ORCHIDv2 2001:20::/28, drone DETs 2001:30::/28, the PCP/TURN/SRP anycast addresses.
  if (first === 0x2001 && g[1]! < 0x0200) return { public: false, range: "ietf-protocol-assignments" }
  // 100::/64 discard-only and 100:0:0:1::/64 dummy prefix.
  if (first === 0x0100 && g[1] === 0 && g[2] === 0 && g[3]! <= 1) return { public: false, range: "discard" }
  if (first === 0x2620 && g[1] === 0x004f && g[2] === 0x8000) return { public: false, range: "as112" }
  if (first === 0x3fff && (g[1]! & 0xf000) === 0) return { public: false, range: "documentation" } // 3fff::/20
  if (first === 0x5f00) return { public: false, range: "segment-routing" } // 5f00::/16, SRv6 SIDs
  // Outside 2000::/3 nothing is assigned as global unicast.
  if ((first & 0xe000) !== 0x2000) return { public: false, range: "reserved" }
  return { public: true }
}

export const formatIPv6 = (g: ReadonlyArray<number>) => g.map((x) => x.toString(16)).join(":")

/** Reads an IP literal in any accepted form; `undefined` when `host` is a name. */
export const parseIp = (host: string): CheckedAddress | undefined => {
  const six = parseIPv6(host)
  if (six !== undefined) return { address: formatIPv6(six), family: 6 }
  // A name such as "1.example" is not an IPv4 literal: every label must be numeric.
  const n = parseIPv4(host)
  return n === undefined ? undefined : { address: formatIPv4(n), family: 4 }
}

export const classifyAddress = (address: string): Classification => {
  const six = parseIPv6(address)
  if (six !== undefined) return classifyIPv6(six)
  const n = parseIPv4(address)
  return n === undefined ? { public: false, range: "not-an-ip-address" } : classifyIPv4(n)
}

export const isPublicAddress = (address: string) => classifyAddress(address).public

// --- URLs ---------------------------------------------------------------------------------------

export class UrlRejected extends Data.TaggedError("UrlRejected")<{
  readonly reason: string
  /** Refused only because private URLs are off: `http:` or a non-public address (a local receiver). */
  readonly wouldAllowPrivate?: boolean
}> {}

/** What a developer with a receiver on their own machine or network needs to know. */
export const PRIVATE_URLS_HINT =
  "webhook URLs must be public https by default; for a receiver on your own machine or network " +
  "(development, tests), start the service with WEBHOOK_ALLOW_PRIVATE_URLS=true"

export interface CheckedUrl {
  readonly url: URL
  /** Host name without brackets, for the Host header and TLS server name. */
  readonly hostname: string
  readonly port: number
  /** The addresses that passed the check; connect only to these. */
  readonly addresses: ReadonlyArray<CheckedAddress>
}

export interface CheckOptions {
  /** `WEBHOOK_ALLOW_PRIVATE_URLS`: accept `http:` and non-public addresses (development and tests). */
  readonly allowPrivate: boolean
}

const isLocalhostName = (h: string) => h === "localhost" || h.endsWith(".localhost")

/**
 * Parses, resolves and checks a webhook URL: `https` only (and `http` when private URLs are
 * allowed), no credentials, a host that resolves, and every resolved address public.
 */
export const checkUrl = (raw: string, options: CheckOptions): Effect.Effect<CheckedUrl, UrlRejected, Dns> =>
  Effect.gen(function*() {
    let url: URL
    try {
      url = new URL(raw)
    } catch {
      return yield* new UrlRejected({ reason: "is not a valid absolute URL" })
    }
    const allowed = options.allowPrivate ? ["https:", "http:"] : ["https:"]
    if (!allowed.includes(url.protocol)) {
      return yield* new UrlRejected({
        reason: `must use https (got ${url.protocol.replace(/:$/, "")})`,
        wouldAllowPrivate: url.protocol === "http:"
      })
    }
    if (url.username !== "" || url.password !== "") {
      return yield* new UrlRejected({ reason: "must not contain credentials" })
    }
    const hostname = url.hostname.replace(/^\[|\]$/g, "").toLowerCase()
    const port = url.port !== "" ? Number(url.port) : url.protocol === "https:" ? 443 : 80
    if (port === 0) return yield* new UrlRejected({ reason: "must not use port 0" })
    const literal = parseIp(hostname)
    let addresses: ReadonlyArray<CheckedAddress>
    if (literal !== undefined) addresses = [literal]
    else if (isLocalhostName(hostname)) addresses = [{ address: "127.0.0.1", family: 4 }, { address: "::1", family: 6 }]
    else {
      const dns = yield* Dns
      const found = yield* dns.addresses(hostname).pipe(
        Effect.mapError((e) => new UrlRejected({ reason: `host ${hostname} could not be resolved (${e.code})` }))
      )
      addresses = found.map((a) => parseIp(a)).filter((a): a is CheckedAddress => a !== undefined)
      if (addresses.length === 0) return yield* new UrlRejected({ reason: `host ${hostname} does not resolve` })
    }
    if (!options.allowPrivate) {
      for (const a of addresses) {
        const c = classifyAddress(a.address)
        if (!c.public) {
          return yield* new UrlRejected({
            reason: literal !== undefined
              ? `must be publicly reachable (${hostname} is a ${c.range} address)`
              : `must be publicly reachable (${hostname} resolves to a ${c.range} address)`,
            wouldAllowPrivate: true
          })
        }
      }
    }
    return { url, hostname, port, addresses }
  })
