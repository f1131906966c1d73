/**
 * Handlers of the Domains area. Verification: the TXT record `_mailroom.<domain>` must hold
 * `mailroom-verification=<token>`. The domain's MX records are "ours" when they point at the managed
 * inbox domain (MANAGED_INBOX_DOMAIN) or a host under it; MX records that all point elsewhere mean
 * another mailbox provider receives the domain's mail, which is `mx_conflict` until the caller
 * confirms (`confirmed: true`). A domain without MX records, or whose MX lookup fails, is no conflict.
 */
import { HttpApiBuilder } from "@effect/platform"
import { Effect, Either, Layer, Option } from "effect"
import { MailroomApi } from "../Api.js"
import { Policy } from "../policy/Policy.js"
import { Forbidden, MxConflict, NotFound, ValidationError, Conflict } from "../contract/Errors.js"
import { decodeCursor, DEFAULT_PAGE_SIZE, pageOf } from "../contract/Paging.js"
import { ENTITLEMENTS, upgradeHint } from "../contract/Plans.js"
import { CurrentPrincipal } from "../contract/Security.js"
import { Dns } from "../net/Dns.js"
import { AppConfig } from "../platform/Config.js"
import { noStore } from "../platform/HttpHeaders.js"
import { RateLimiter } from "../platform/RateLimiter.js"
import { randomToken } from "../platform/Secrets.js"
import { type DkimRecord, DkimKeys } from "./Dkim.js"
import type { Domain } from "./Api.js"
import { isOurExchange, toDomain, TXT_PREFIX, txtName } from "./Present.js"
import { DomainsRepo } from "./Repo.js"

export const CLAIMS_PER_HOUR = { limit: 30, windowSeconds: 3600 } as const
export const VERIFIES_PER_MINUTE = { limit: 20, windowSeconds: 60 } as const

export const DomainsHttpLive = HttpApiBuilder.group(MailroomApi, "domains", (handlers) =>
  Effect.gen(function*() {
    const repo = yield* DomainsRepo
    const dns = yield* Dns
    const plans = yield* Policy
    const limiter = yield* RateLimiter
    const config = yield* AppConfig
    const managed = config.managedInboxDomain.toLowerCase()
    const dkim = yield* DkimKeys
    const orgId = Effect.map(CurrentPrincipal, (p) => p.orgId)

    const owned = (org: string, id: string) =>
      Effect.flatMap(repo.find(org, id), Option.match({
        onNone: () => Effect.fail(new NotFound({ message: `no domain ${id}` })),
        onSome: Effect.succeed
      }))

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

    return handlers
      .handle("claim", ({ payload }) =>
        Effect.gen(function*() {
          const org = yield* orgId
          const plan = yield* plans.planOf(org)
          if (!ENTITLEMENTS[plan].includes("custom_domains")) {
            return yield* new Forbidden({
              message: `custom domains need the developer plan or higher; this organization is on ${plan}`,
              details: { required_plan: "developer", current_plan: plan, feature: "custom_domains", hint: upgradeHint(plan, "developer") }
            })
          }
          const domain = payload.domain.trim().toLowerCase().replace(/\.$/, "")
          if (domain === managed || domain.endsWith(`.${managed}`) || managed.endsWith(`.${domain}`)) {
            return yield* new ValidationError({
              message: `domain: ${domain} is the managed inbox domain (or contains it) and cannot be claimed`,
              details: { issues: [{ field: "domain", reason: "the managed inbox domain cannot be claimed" }] }
            })
          }
          yield* limiter.enforce(`domains:claim:org:${org}`, CLAIMS_PER_HOUR, "domain claims")
          if (yield* repo.verifiedElsewhere(org, domain)) {
            return yield* new Conflict({ message: `${domain} is already verified by another organization` })
          }
          const mx = yield* mxState(domain)
          const confirmed = payload.confirmed === true
          if (mx.state === "other" && !confirmed) return yield* mxConflict(domain, mx.hosts)
          const row = yield* repo.insert({ orgId: org, domain, token: randomToken(32), mxOverride: confirmed && mx.state === "other" })
          return toDomain(row, managed, yield* dkim.recordForDomain(row.id, row.domain))
        }))
      .handle("verify", ({ path, payload }) =>
        Effect.gen(function*() {
          const org = yield* orgId
          // A live check: never replayed from a derived idempotency key (a retry right after
          // publishing the record must look again).
          yield* noStore
          const row = yield* owned(org, path.id)
          const key = yield* dkim.recordForDomain(row.id, row.domain)
          if (row.verified_at !== null) return toDomain(row, managed, key)
          yield* limiter.enforce(`domains:verify:org:${org}`, VERIFIES_PER_MINUTE, "domain verification")
          const confirmed = payload?.confirmed === true
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
        }))
      .handle("list", ({ urlParams }) =>
        Effect.gen(function*() {
          const org = yield* orgId
          const after = yield* decodeCursor(urlParams.cursor)
          const limit = urlParams.limit ?? DEFAULT_PAGE_SIZE
          const { rows, total } = yield* repo.list(org, limit, after)
          const keys = yield* Effect.forEach(rows, (r) => dkim.recordForDomain(r.id, r.domain))
          return pageOf(rows.map((r, i) => ({ ...r, key: keys[i] })), limit, total, (r) => toDomain(r, managed, r.key))
        }))
      .handle("get", ({ path }) =>
        Effect.gen(function*() {
          const row = yield* owned(yield* orgId, path.id)
          return toDomain(row, managed, yield* dkim.recordForDomain(row.id, row.domain))
        }))
      .handle("update", ({ path, payload }) =>
        Effect.gen(function*() {
          const org = yield* orgId
          const row = yield* owned(org, path.id)
          if (payload.spam_threshold !== undefined) {
            yield* plans.require(org, "domains.spamThresholds")
          }
          if (row.verified_at === null) {
            return yield* new Conflict({ message: `${row.domain} is not verified yet; verify it before changing its settings` })
          }
          return toDomain(yield* repo.update(row.id, payload), managed, yield* dkim.recordForDomain(row.id, row.domain))
        }))
      .handle("remove", ({ path }) =>
        Effect.gen(function*() {
          const org = yield* orgId
          const removed = yield* repo.remove(org, path.id)
          return yield* Option.match(removed, {
            onNone: () => Effect.fail(new NotFound({ message: `no domain ${path.id}` })),
            // The key went with the domain.
            onSome: (r) => Effect.succeed(toDomain(r, managed, undefined))
          })
        }))
  })).pipe(Layer.provide([DomainsRepo.Default, Dns.Default, DkimKeys.Default]))
