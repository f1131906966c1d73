/** Handlers of the Payments area. */
import { HttpApiBuilder } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Option } from "effect"
import { MailroomApi } from "../Api.js"
import { Conflict, NotFound, ValidationError } from "../contract/Errors.js"
import { decodeCursor, DEFAULT_PAGE_SIZE, pageOf } from "../contract/Paging.js"
import { CurrentPrincipal } from "../contract/Security.js"
import { AppConfig } from "../platform/Config.js"
import { setHeader } from "../platform/HttpHeaders.js"
import { Policy as AccessPolicy } from "../policy/Policy.js"
import type { Policy, PayoutAddress } from "./Api.js"
import { toSentEmail } from "../sending/Repo.js"
import { EmailRail } from "./EmailRail.js"
import { apiErrorOf } from "./Failures.js"
import { atomicOf, fromAtomic, toAtomic } from "./Money.js"
import { utcDay } from "./Policy.js"
import { type ChallengeRow, type PaymentRow, PaymentsRepo, toChallenge, toPayment, visibleTo } from "./Repo.js"
import { PaymentsService } from "./Service.js"
import { addressProblemText, displayAddress, parseEvmAddress } from "./Address.js"

const invalid = (field: string, reason: string) =>
  new ValidationError({ message: `${field}: ${reason}`, details: { issues: [{ field, reason }] } })

const CHALLENGE_COLUMNS = `p.id, p.org_id, p.amount::text AS amount, p.asset, p.network, p.pay_to, p.payer_address,
  p.description, p.nonce, p.max_timeout_seconds, p.expires_at, p.payment_id, p.paid_at, p.created_at,
  p.deliver_to, p.sent_email_id`
const PAYMENT_COLUMNS = `p.id, p.challenge_id, p.rail, p.payer_org_id, p.payee_org_id, p.status, p.amount::text AS amount,
  p.asset, p.network, p.payer_address, p.pay_to, p.nonce, p.transaction, p.failure_code, p.failure_category,
  p.failure_reasons, p.failure_message, p.spent_at, p.settled_at, p.created_at`

export const PaymentsHttpLive = HttpApiBuilder.group(MailroomApi, "payments", (handlers) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
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
          const rows = yield* sql<PayoutAddress>`
            SELECT network, address, created_at, updated_at FROM payout_addresses WHERE org_id = ${orgId}
            ORDER BY network`.pipe(Effect.orDie)
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
          const address = parsed.address
          const rows = yield* sql<PayoutAddress>`
            INSERT INTO payout_addresses (org_id, network, address) VALUES (${orgId}, ${path.network}, ${address})
            ON CONFLICT (org_id, network) DO UPDATE SET address = EXCLUDED.address, updated_at = now()
            RETURNING network, address, created_at, updated_at`.pipe(Effect.orDie)
          return rows[0]!
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
          yield* sql`
            INSERT INTO payment_policies (org_id, paused, per_payment_cap, daily_cap, payee_allowlist, updated_at)
            VALUES (${orgId}, ${payload.paused ?? false}, ${cap(payload.per_payment_cap)}::numeric,
              ${cap(payload.daily_cap)}::numeric, ${allowlist === null ? null : pgArray(allowlist)}::text[], now())
            ON CONFLICT (org_id) DO UPDATE SET
              paused = CASE WHEN ${has("paused")} THEN EXCLUDED.paused ELSE payment_policies.paused END,
              per_payment_cap = CASE WHEN ${has("per_payment_cap")} THEN EXCLUDED.per_payment_cap ELSE payment_policies.per_payment_cap END,
              daily_cap = CASE WHEN ${has("daily_cap")} THEN EXCLUDED.daily_cap ELSE payment_policies.daily_cap END,
              payee_allowlist = CASE WHEN ${has("payee_allowlist")} THEN EXCLUDED.payee_allowlist ELSE payment_policies.payee_allowlist END,
              updated_at = now()`.pipe(Effect.orDie)
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
              Effect.tapError(() => sql`DELETE FROM payment_challenges WHERE id = ${created.id}`.pipe(Effect.orDie))
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
          const conds = [sql`p.org_id = ${orgId}`]
          if (q.status === "paid") conds.push(sql`p.paid_at IS NOT NULL`)
          if (q.status === "pending") conds.push(sql`p.paid_at IS NULL AND p.expires_at > ${now}`)
          if (q.status === "expired") conds.push(sql`p.paid_at IS NULL AND p.expires_at <= ${now}`)
          const page = after === undefined ? conds : [...conds, sql`(p.created_at, p.id) < (${after.createdAt}, ${after.id})`]
          const [rows, total] = yield* Effect.all([
            sql<ChallengeRow>`SELECT ${sql.literal(CHALLENGE_COLUMNS)} FROM payment_challenges p WHERE ${sql.and(page)}
                              ORDER BY p.created_at DESC, p.id DESC LIMIT ${limit + 1}`,
            sql<{ n: number }>`SELECT count(*)::int AS n FROM payment_challenges p WHERE ${sql.and(conds)}`
          ]).pipe(Effect.orDie)
          return pageOf(rows, limit, total[0]?.n ?? 0, (r) => toChallenge(r, orgId, now.getTime(), config.publicBaseUrl))
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
          const conds = [visibleTo(sql, orgId, q.direction)]
          if (q.status !== undefined) conds.push(sql`p.status = ${q.status}`)
          const page = after === undefined ? conds : [...conds, sql`(p.created_at, p.id) < (${after.createdAt}, ${after.id})`]
          const [rows, total] = yield* Effect.all([
            sql<PaymentRow>`SELECT ${sql.literal(PAYMENT_COLUMNS)} FROM payments p WHERE ${sql.and(page)}
                            ORDER BY p.created_at DESC, p.id DESC LIMIT ${limit + 1}`,
            sql<{ n: number }>`SELECT count(*)::int AS n FROM payments p WHERE ${sql.and(conds)}`
          ]).pipe(Effect.orDie)
          return pageOf(rows, limit, total[0]?.n ?? 0, (r) => toPayment(r, orgId))
        }))
      .handle("getPayment", ({ path }) =>
        Effect.gen(function*() {
          const orgId = yield* entitled
          const rows = yield* sql<PaymentRow>`SELECT ${sql.literal(PAYMENT_COLUMNS)} FROM payments p
                                              WHERE p.id = ${path.id} AND ${visibleTo(sql, orgId, undefined)}`.pipe(Effect.orDie)
          const row = rows[0]
          if (row === undefined) return yield* new NotFound({ message: `no payment ${path.id}` })
          return toPayment(row, orgId)
        }))
  }))

/** A PostgreSQL array literal of plain tokens (ids and addresses). */
const pgArray = (items: ReadonlyArray<string>) => `{${items.map((s) => `"${s.replace(/["\\]/g, "")}"`).join(",")}}`
