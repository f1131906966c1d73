/**
 * The client address of an HTTP request, which names the per-address rate-limit windows and scopes
 * anonymous idempotency keys. By default it is the socket's peer. Behind a reverse proxy every
 * client arrives from the proxy's address, so the peers listed in `TRUSTED_PROXIES` are believed
 * about the address they forwarded for (`Forwarded: for=…`, else `X-Forwarded-For`); any other peer's
 * forwarding headers are ignored, since a client can write them itself.
 */
import { BlockList, isIP } from "node:net"

/** `::ffff:10.0.0.1` (an IPv4 peer on a dual-stack socket) is `10.0.0.1`. */
export const normalizeAddress = (raw: string): string => {
  const a = raw.trim()
  const m = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(a)
  return m ? m[1]! : a.toLowerCase()
}

/** Parses `TRUSTED_PROXIES` (comma-separated addresses or CIDRs); the error names the bad entry. */
export const parseTrustedProxies = (raw: string): { readonly ok: BlockList; readonly entries: ReadonlyArray<string> } | { readonly error: string } => {
  const list = new BlockList()
  const entries = raw.split(",").map((s) => s.trim()).filter((s) => s.length > 0)
  for (const entry of entries) {
    const [addr = "", bits, extra] = entry.split("/")
    const address = normalizeAddress(addr)
    const family = isIP(address)
    if (family === 0 || extra !== undefined) return { error: `"${entry}" is not an IP address or CIDR (e.g. 10.0.0.0/8, ::1)` }
    const type = family === 4 ? "ipv4" : "ipv6"
    if (bits === undefined) {
      list.addAddress(address, type)
      continue
    }
    const prefix = Number(bits)
    if (!/^\d{1,3}$/.test(bits) || prefix > (family === 4 ? 32 : 128)) {
      return { error: `"${entry}": the prefix length must be 0-${family === 4 ? 32 : 128}` }
    }
    list.addSubnet(address, prefix, type)
  }
  return { ok: list, entries }
}

const isTrusted = (trusted: BlockList, address: string) => {
  const family = isIP(address)
  return family !== 0 && trusted.check(address, family === 4 ? "ipv4" : "ipv6")
}

/** The `for=` values of a `Forwarded` header (RFC 7239), nearest hop last. */
const forwardedFor = (header: string): Array<string> =>
  header.split(",").flatMap((element) => {
    const pair = element.split(";").map((p) => p.trim()).find((p) => p.toLowerCase().startsWith("for="))
    if (pair === undefined) return []
    let v = pair.slice(4).trim().replace(/^"|"$/g, "")
    // `[2001:db8::1]:4711`, `192.0.2.1:4711`
    const bracketed = /^\[([^\]]+)\](?::\d+)?$/.exec(v)
    if (bracketed) v = bracketed[1]!
    else if (/^\d+\.\d+\.\d+\.\d+:\d+$/.test(v)) v = v.slice(0, v.lastIndexOf(":"))
    return [v]
  })

/**
 * The client's address: the socket peer, unless that peer is a trusted proxy; then the hops it
 * reports are walked from the nearest one back, skipping trusted proxies, and the first address not
 * trusted is the client (so a value the client prepended itself is never taken). A trusted peer
 * that forwards nothing usable is itself the client.
 */
export const clientAddress = (
  peer: string | undefined,
  headers: Readonly<Record<string, string | undefined>>,
  trusted: BlockList | undefined
): string => {
  if (peer === undefined) return "unknown"
  const socket = normalizeAddress(peer)
  if (trusted === undefined || !isTrusted(trusted, socket)) return socket
  const forwarded = headers["forwarded"]
  const xff = headers["x-forwarded-for"]
  const hops = forwarded !== undefined
    ? forwardedFor(forwarded)
    : xff !== undefined
    ? xff.split(",").map((s) => s.trim()).filter((s) => s.length > 0)
    : []
  for (let i = hops.length - 1; i >= 0; i--) {
    const hop = normalizeAddress(hops[i]!)
    // An obfuscated or unknown hop (`for=unknown`, `_hidden`) ends what can be believed.
    if (isIP(hop) === 0) return socket
    if (!isTrusted(trusted, hop)) return hop
  }
  return hops.length > 0 ? normalizeAddress(hops[0]!) : socket
}
