/**
 * DNS lookups for domain verification, endpoint URL checks and the inbound path, through one
 * resolver whose server is `DNS_SERVER` (`host:port`) when set, else the system's configured
 * servers. Lookups are short (2 s, one try) so a dead server never stalls a request for long.
 * "No such name" and "no records" are empty answers, not failures.
 */
import { Data, Effect, Option } from "effect"
import { promises as dnsPromises } from "node:dns"
import { AppConfig } from "../platform/Config.js"

export const DNS_TIMEOUT_MS = 2000

export class DnsError extends Data.TaggedError("DnsError")<{ readonly name: string; readonly code: string }> {}

export interface MxRecord {
  readonly exchange: string
  readonly priority: number
}

const EMPTY = new Set(["ENODATA", "ENOTFOUND", "NXDOMAIN", "ENONAME"])

/** `host:port` (IPv4 or a name), `[v6]:port` or a bare address, as node's resolver accepts it. */
export const resolverServer = (raw: string): string => raw.trim()

export class Dns extends Effect.Service<Dns>()("mailroom/Dns", {
  effect: Effect.gen(function*() {
    const config = yield* AppConfig
    const resolver = new dnsPromises.Resolver({ timeout: DNS_TIMEOUT_MS, tries: 1 })
    if (Option.isSome(config.dnsServer)) resolver.setServers([resolverServer(config.dnsServer.value)])

    const lookup = <A>(name: string, run: () => Promise<ReadonlyArray<A>>): Effect.Effect<ReadonlyArray<A>, DnsError> =>
      Effect.tryPromise({
        try: run,
        catch: (e) => new DnsError({ name, code: (e as { code?: string }).code ?? "EUNKNOWN" })
      }).pipe(
        Effect.catchIf((e) => EMPTY.has(e.code), () => Effect.succeed<ReadonlyArray<A>>([])),
        Effect.timeoutFail({
          duration: DNS_TIMEOUT_MS + 500,
          onTimeout: () => new DnsError({ name, code: "ETIMEOUT" })
        })
      )

    /** TXT records, each one's strings joined. */
    const txt = (name: string) =>
      Effect.map(lookup(name, () => resolver.resolveTxt(name)), (records) => records.map((chunks) => chunks.join("")))

    const mx = (name: string): Effect.Effect<ReadonlyArray<MxRecord>, DnsError> =>
      Effect.map(
        lookup(name, () => resolver.resolveMx(name)),
        (records) => records.map((r) => ({ exchange: r.exchange.toLowerCase().replace(/\.$/, ""), priority: r.priority }))
      )

    /** A and AAAA addresses of a host name. */
    const addresses = (host: string) =>
      Effect.all([
        lookup(host, () => resolver.resolve4(host)),
        lookup(host, () => resolver.resolve6(host))
      ], { concurrency: 2 }).pipe(Effect.map(([v4, v6]) => [...v4, ...v6]))

    return { txt, mx, addresses } as const
  })
}) {}
