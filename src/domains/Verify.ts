/**
 * Verifying a claimed domain. The TXT record `_mailroom.<domain>` must hold
 * `mailroom-verification=<token>`. The domain's MX records are "ours" when they point at the managed
 * inbox domain (MANAGED_INBOX_DOMAIN) or a host under it; MX records that all point elsewhere mean
 * another mailbox provider receives the domain's mail, which is `mx_conflict` until the caller
 * confirms (`confirmed: true`, or once at claim time). A domain without MX records, or whose MX
 * lookup fails, is no conflict. A domain verified already is answered as it is, without a lookup or
 * a rate-limit charge; one verified by another organization meanwhile is a conflict.
 */
import { Effect, Either, Option } from "effect"
import { Conflict, MxConflict, NotFound } from "../contract/Errors.js"
import { Dns } from "../net/Dns.js"
import { AppConfig } from "../platform/Config.js"
import { RateLimiter } from "../platform/RateLimiter.js"
import { DkimKeys } from "./Dkim.js"
import { isOurExchange, toDomain, TXT_PREFIX, txtName } from "./Present.js"
import { DomainsRepo } from "./Repo.js"

export const VERIFIES_PER_MINUTE = { limit: 20, windowSeconds: 60 } as const

export class DomainVerification extends Effect.Service<DomainVerification>()("mailroom/DomainVerification", {
  effect: Effect.gen(function*() {
    const repo = yield* DomainsRepo
    const dns = yield* Dns
    const limiter = yield* RateLimiter
    const config = yield* AppConfig
    const managed = config.managedInboxDomain.toLowerCase()
    const dkim = yield* DkimKeys

    /** What the MX records say: ours, none, someone else's (with their hosts) or unknown. */
    const mxState = (domain: string) =>
      Effect.map(Effect.either(dns.mx(domain)), (r) => {
        if (Either.isLeft(r)) return { state: "lookup_failed" as const, hosts: [] as ReadonlyArray<string> }
        const hosts = r.right.map((m) => m.exchange)
        if (hosts.length === 0) return { state: "missing" as const, hosts }
        if (hosts.some((h) => isOurExchange(h, managed))) return { state: "ok" as const, hosts }
        return { state: "other" as const, hosts }
      })

    const mxConflict = (domain: string, hosts: ReadonlyArray<string>) =>
      new MxConflict({
        message: `${domain} receives mail at another provider (MX ${hosts.join(", ")}); ` +
          `send confirmed: true to take its mail over, after pointing MX at ${managed}`,
        details: { mx_hosts: hosts, expected_mx: managed }
      })

    /** Checks the organization's domain `id` now, records the check, and shows the domain with its report. */
    const verify = (org: string, id: string, confirmed: boolean) =>
      Effect.gen(function*() {
        const row = yield* Effect.flatMap(repo.find(org, id), Option.match({
          onNone: () => Effect.fail(new NotFound({ message: `no domain ${id}` })),
          onSome: Effect.succeed
        }))
        const key = yield* dkim.recordForDomain(row.id, row.domain)
        if (row.verified_at !== null) return toDomain(row, managed, key)
        yield* limiter.enforce(`domains:verify:org:${org}`, VERIFIES_PER_MINUTE, "domain verification")
        const mx = yield* mxState(row.domain)
        if (mx.state === "other" && !row.mx_override && !confirmed) return yield* mxConflict(row.domain, mx.hosts)
        const txt = yield* Effect.either(dns.txt(txtName(row.domain)))
        const expected = `${TXT_PREFIX}${row.verification_token}`
        const txtState = Either.isLeft(txt)
          ? "lookup_failed" as const
          : txt.right.some((v) => v.trim() === expected) ? "ok" as const : "missing" as const
        const mxReport = mx.state === "other" ? "other_provider_confirmed" as const : mx.state
        const overrideNow = mx.state === "other" && confirmed
        if (txtState !== "ok") {
          const updated = yield* repo.checked(row.id, overrideNow)
          return toDomain(updated, managed, key, {
            txt: txtState,
            mx: mxReport,
            message: txtState === "missing"
              ? `publish TXT ${txtName(row.domain)} "${expected}" and verify again (DNS changes can take a while)`
              : `the TXT lookup for ${txtName(row.domain)} failed; try again later`
          })
        }
        if (yield* repo.verifiedElsewhere(org, row.domain)) {
          return yield* new Conflict({ message: `${row.domain} is already verified by another organization` })
        }
        const verified = yield* repo.markVerified(row.id, row.domain, overrideNow)
        return toDomain(verified, managed, key, {
          txt: "ok",
          mx: mxReport,
          message: mx.state === "ok" ? "verified; mail for this domain is accepted" :
            `verified; point MX for ${row.domain} at ${managed} to receive its mail`
        })
      })

    return { verify, mxState, mxConflict } as const
  })
}) {}
