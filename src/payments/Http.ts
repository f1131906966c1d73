/** Handlers of the Payments area: HTTP to PaymentsService, PaymentsRepo and the email rail (no SQL here). */
import { Clock, Effect, Option } from "effect"
import { MailroomApi } from "../Api.js"
import { Conflict, NotFound, ValidationError } from "../contract/Errors.js"
import { decodeCursor, DEFAULT_PAGE_SIZE, pageOf } from "../contract/Paging.js"
import { CurrentPrincipal } from "../contract/Security.js"
import * as ApiGroup from "../platform/ApiGroup.js"
import { AppConfig } from "../platform/Config.js"
import { setHeader } from "../platform/HttpHeaders.js"
import { Policy as AccessPolicy } from "../policy/Policy.js"
import type { Policy } from "./Api.js"
import { toSentEmail } from "../sending/SentRows.js"
import { EmailRail } from "./EmailRail.js"
import { apiErrorOf } from "./Failures.js"
import { atomicOf, fromAtomic, toAtomic } from "./Money.js"
import { utcDay } from "./Policy.js"
import { PaymentsRepo, toChallenge, toPayment } from "./Repo.js"
import { PaymentsService } from "./Service.js"
import { addressProblemText, displayAddress, parseEvmAddress } from "./Address.js"

const invalid = (field: string, reason: string) =>
  new ValidationError({ message: `${field}: ${reason}`, details: { issues: [{ field, reason }] } })

export const PaymentsHttpLive = ApiGroup.group(MailroomApi, "payments", (handlers) =>
  Effect.gen(function*() {
    const config = yield* AppConfig
    const policy = yield* AccessPolicy
    const service = yield* PaymentsService
    const repo = yield* PaymentsRepo
    const rail = yield* EmailRail

    /** The caller's organization, entitled to payments. */
    const entitled = Effect.gen(function*() {
      const { orgId } = yield* CurrentPrincipal
      yield* policy.require(orgId, "payments.use")
      return orgId
    })

    const policyOf = (orgId: string) =>
      Effect.gen(function*() {
        const row = yield* repo.policyRow(orgId)
        const now = yield* Clock.currentTimeMillis
        const day = utcDay(now)
        const spent = yield* repo.spentBy(orgId, day.start, day.end)
        const dec = (v: string | null | undefined) => (v == null ? null : fromAtomic(atomicOf(v)))
        return {
          paused: row?.paused ?? false,
          per_payment_cap: dec(row?.per_payment_cap),
          daily_cap: dec(row?.daily_cap),
          payee_allowlist: row?.payee_allowlist == null ? null : row.payee_allowlist.map(displayAddress),
          spent_today: fromAtomic(spent),
          day_resets_at: day.end,
          updated_at: row?.updated_at ?? null
        } satisfies Policy
      })

    return handlers
      .handle("listPayoutAddresses", () =>
        Effect.gen(function*() {
          const orgId = yield* entitled
          const rows = yield* repo.payoutAddresses(orgId)
          return { items: rows, meta: { total: rows.length, limit: Math.max(rows.length, 1), cursor: null } }
        }))
      .handle("setPayoutAddress", ({ path, payload }) =>
        Effect.gen(function*() {
          const orgId = yield* entitled
          if (!config.x402Networks.includes(path.network)) {
            return yield* invalid("network", `payments are offered on ${config.x402Networks.join(", ")}`)
          }
          const parsed = parseEvmAddress(payload.address)
          if (!parsed.ok) return yield* invalid("address", addressProblemText(parsed.problem))
          return yield* repo.setPayoutAddress(orgId, path.network, parsed.address)
        }))
      .handle("getPolicy", () => Effect.flatMap(entitled, policyOf))
      .handle("updatePolicy", ({ payload }) =>
        Effect.gen(function*() {
          const orgId = yield* entitled
          const has = (k: keyof typeof payload) => Object.prototype.hasOwnProperty.call(payload, k)
          const cap = (v: string | null | undefined) => (v == null ? null : toAtomic(v)!.toString())
          // Organization ids lowercase, addresses in EIP-55 form (the schema refused a wrong checksum).
          const allowlist = payload.payee_allowlist == null
            ? null
            : [...new Set(payload.payee_allowlist.map((e) => e.startsWith("0x") ? displayAddress(e) : e.toLowerCase()))]
          yield* repo.upsertPolicy(orgId, {
            paused: payload.paused,
            perPaymentCap: cap(payload.per_payment_cap),
            dailyCap: cap(payload.daily_cap),
            payeeAllowlist: allowlist,
            has
          })
          return yield* policyOf(orgId)
        }))
      .handle("createChallenge", ({ payload }) =>
        Effect.gen(function*() {
          const orgId = yield* entitled
          const created = yield* service.createChallenge(orgId, payload)
          let row = created
          if (payload.deliver_to !== undefined) {
            // Email rail: mailed now; a challenge that could not be mailed is not kept.
            yield* rail.mailChallenge(orgId, created, payload.deliver_to).pipe(
              Effect.tapError(() => repo.deleteChallenge(created.id))
            )
            row = Option.getOrElse(yield* service.challengeById(created.id), () => created)
          }
          return toChallenge(row, orgId, yield* Clock.currentTimeMillis, config.publicBaseUrl)
        }))
      .handle("listChallenges", ({ urlParams: q }) =>
        Effect.gen(function*() {
          const orgId = yield* entitled
          const limit = q.limit ?? DEFAULT_PAGE_SIZE
          const after = yield* decodeCursor(q.cursor)
          const now = new Date(yield* Clock.currentTimeMillis)
          const { rows, total } = yield* repo.challengePage(orgId, q.status, now, limit, after)
          return pageOf(rows, limit, total, (r) => toChallenge(r, orgId, now.getTime(), config.publicBaseUrl))
        }))
      .handle("getChallenge", ({ path }) =>
        Effect.gen(function*() {
          const orgId = yield* entitled
          const row = yield* Effect.flatten(service.challengeById(path.id)).pipe(
            Effect.mapError(() => new NotFound({ message: `no payment challenge ${path.id}` }))
          )
          return toChallenge(row, orgId, yield* Clock.currentTimeMillis, config.publicBaseUrl)
        }))
      .handle("pay", ({ path, payload }) =>
        Effect.gen(function*() {
          const orgId = yield* entitled
          const result = yield* service.pay(orgId, path.id, payload.payment_payload)
          switch (result._tag) {
            case "Settled":
              return toPayment(result.payment, orgId)
            case "Conflict":
              return yield* new Conflict({
                message: result.message,
                details: { challenge_id: path.id, ...(result.paymentId !== null ? { payment_id: result.paymentId } : {}) }
              })
            case "Failed": {
              const retryAfter = result.failure.retryAfter
              if (retryAfter !== null) yield* setHeader("retry-after", String(retryAfter))
              return yield* apiErrorOf(result.failure, { paymentId: result.payment.id, challengeId: path.id })
            }
          }
        }))
      .handle("getEmailChallenge", ({ path }) =>
        Effect.gen(function*() {
          const orgId = yield* entitled
          const required = yield* rail.challengeOfEmail(orgId, path.id)
          const named = required.accepts[0]?.extra?.challengeId
          return { email_id: path.id, challenge_id: typeof named === "string" ? named : null, payment_required: required }
        }))
      .handle("payByEmail", ({ path, payload }) =>
        Effect.gen(function*() {
          const orgId = yield* entitled
          return toSentEmail(yield* rail.payByEmail(orgId, path.id, payload.payment_payload))
        }))
      .handle("listPayments", ({ urlParams: q }) =>
        Effect.gen(function*() {
          const orgId = yield* entitled
          const limit = q.limit ?? DEFAULT_PAGE_SIZE
          const after = yield* decodeCursor(q.cursor)
          const { rows, total } = yield* repo.paymentPage(orgId, q.direction, q.status, limit, after)
          return pageOf(rows, limit, total, (r) => toPayment(r, orgId))
        }))
      .handle("getPayment", ({ path }) =>
        Effect.gen(function*() {
          const orgId = yield* entitled
          const row = yield* repo.findPayment(orgId, path.id)
          if (Option.isNone(row)) return yield* new NotFound({ message: `no payment ${path.id}` })
          return toPayment(row.value, orgId)
        }))
  }))
