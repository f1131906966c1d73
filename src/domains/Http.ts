/**
 * Handlers of the Domains area. Verification (DNS checks, MX conflicts, the report) is
 * ./Verify.ts; a claim checks the MX records by the same rules (`confirmed: true` takes over a domain
 * whose mail another provider receives).
 */
import { Effect, Layer, Option } from "effect"
import { MailroomApi } from "../Api.js"
import { Policy } from "../policy/Policy.js"
import { Forbidden, NotFound, ValidationError, Conflict } from "../contract/Errors.js"
import { decodeCursor, DEFAULT_PAGE_SIZE, pageOf } from "../contract/Paging.js"
import { ENTITLEMENTS, upgradeHint } from "../contract/Plans.js"
import { CurrentPrincipal } from "../contract/Security.js"
import { Dns } from "../net/Dns.js"
import * as ApiGroup from "../platform/ApiGroup.js"
import { AppConfig } from "../platform/Config.js"
import { noStore } from "../platform/HttpHeaders.js"
import { RateLimiter } from "../platform/RateLimiter.js"
import { randomToken } from "../platform/Secrets.js"
import { DkimKeys } from "./Dkim.js"
import { toDomain } from "./Present.js"
import { DomainsRepo } from "./Repo.js"
import { DomainVerification } from "./Verify.js"

export const CLAIMS_PER_HOUR = { limit: 30, windowSeconds: 3600 } as const

export const DomainsHttpLive = ApiGroup.group(MailroomApi, "domains", (handlers) =>
  Effect.gen(function*() {
    const repo = yield* DomainsRepo
    const plans = yield* Policy
    const limiter = yield* RateLimiter
    const config = yield* AppConfig
    const managed = config.managedInboxDomain.toLowerCase()
    const dkim = yield* DkimKeys
    const verification = yield* DomainVerification
    const orgId = Effect.map(CurrentPrincipal, (p) => p.orgId)

    const owned = (org: string, id: string) =>
      Effect.flatMap(repo.find(org, id), Option.match({
        onNone: () => Effect.fail(new NotFound({ message: `no domain ${id}` })),
        onSome: Effect.succeed
      }))

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
          const mx = yield* verification.mxState(domain)
          const confirmed = payload.confirmed === true
          if (mx.state === "other" && !confirmed) return yield* verification.mxConflict(domain, mx.hosts)
          const row = yield* repo.insert({ orgId: org, domain, token: randomToken(32), mxOverride: confirmed && mx.state === "other" })
          return toDomain(row, managed, yield* dkim.recordForDomain(row.id, row.domain))
        }))
      .handle("verify", ({ path, payload }) =>
        Effect.gen(function*() {
          const org = yield* orgId
          // A live check: never replayed from a derived idempotency key (a retry right after
          // publishing the record must look again).
          yield* noStore
          return yield* verification.verify(org, path.id, payload?.confirmed === true)
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
  })).pipe(
    Layer.provide(DomainVerification.Default),
    Layer.provide([DomainsRepo.Default, Dns.Default, DkimKeys.Default])
  )
