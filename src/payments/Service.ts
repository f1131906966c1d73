/**
 * The payment flows. One pipeline serves both rails:
 * - HTTP (`POST /payments/challenges/{id}/pay`): the payer's spend policy guards the payment, failures
 *   go to the payer's endpoints, a settlement to both organizations';
 * - email (`settleIncoming`, called by mail ingestion when a reply carries a signed payment): the
 *   payee's settle caps guard it, every event goes to the payee's endpoints.
 *
 * Order of checks: the challenge's expiry → the guard (policy or caps) → our verifier → settlement.
 * The guard is checked once before verification (so its refusal is what a caller sees first) and
 * again, atomically, in the transaction that claims the challenge and records the settling payment:
 * that row is the reservation caps count, and the claim (`payment_id` set only while null) is what
 * makes a challenge paid at most once. A failed settlement releases the claim; the challenge stays
 * pending. Every failure is recorded as a failed payment and emitted as `payment.failed` in the same
 * transaction; a settlement as `payment.settled`.
 *
 * Nonces: every bytes32 value is accepted (x402 payers pick their own). The claim also binds the
 * authorization's (network, asset, payer, nonce) to the challenge, so a signed payment can never be
 * presented for another one (`nonce_mismatch`); a challenge's suggested nonce is its own from creation.
 * A payment whose process stopped mid-settlement is ended later by the reconciler (`resolveSettling`).
 */
import { SqlClient } from "@effect/sql"
import type { PaymentPayload, PaymentRequirements } from "@x402/core/types"
import { Clock, Data, Effect, Fiber, Layer, Option, Schema } from "effect"
import { randomBytes } from "node:crypto"
import type { Address } from "viem"
import { NoPayoutAddress, NotFound, ValidationError } from "../contract/Errors.js"
import { OrgEvents } from "../events/OrgEvents.js"
import { AppConfig } from "../platform/Config.js"
import { allRows } from "../platform/Rows.js"
import { uniqueViolation } from "../platform/SqlErrors.js"
import { addressProblemText, parseEvmAddress } from "./Address.js"
import type { SqlError } from "@effect/sql/SqlError"
import { type CreateChallenge, DEFAULT_EXPIRES_IN, type Payment } from "./Api.js"
import { expired, type PaymentFailure, unsettled, unverified } from "./Failures.js"
import { Facilitator, type SettleOutcome } from "./Facilitator.js"
import { atomicOf, toAtomic } from "./Money.js"
import { networkInfo } from "./Networks.js"
import { makeRails, type Rail } from "./Rails.js"
import { type ChallengeRow, paymentEventData, paymentRequiredOf, type PaymentRow, PaymentsRepo, toPayment } from "./Repo.js"
import { CHALLENGE_COLUMNS, challengeRows, NonceHolderRow, NonceTakenRow, PAYMENT_COLUMNS, paymentRows } from "./Rows.js"
import { SettleCaps } from "./SettleCaps.js"
import { type Authorization, payloadNonce, payloadValue, verifyPayment } from "./Verifier.js"

/** How long a payer has, once it signed, to get the authorization settled (x402 `maxTimeoutSeconds`). */
export const MAX_TIMEOUT_SECONDS = 300

const invalid = (field: string, reason: string) =>
  new ValidationError({ message: `${field}: ${reason}`, details: { issues: [{ field, reason }] } })

/** Inside the claiming transaction: the authorization's nonce is bound to another challenge (rolls the claim back). */
class NonceTaken extends Data.TaggedError("NonceTaken") {}

export type PayResult =
  | { readonly _tag: "Settled"; readonly payment: PaymentRow }
  | { readonly _tag: "Failed"; readonly payment: PaymentRow; readonly failure: PaymentFailure }
  | { readonly _tag: "Conflict"; readonly message: string; readonly paymentId: string | null }

export class PaymentsService extends Effect.Service<PaymentsService>()("mailroom/payments/PaymentsService", {
  scoped: Effect.gen(function*() {
    // Settlements run in the service's scope, not the request's (see `claimAndSettle`).
    const scope = yield* Effect.scope
    const sql = yield* SqlClient.SqlClient
    const config = yield* AppConfig
    const repo = yield* PaymentsRepo
    const events = yield* OrgEvents
    const facilitator = yield* Facilitator
    const caps = yield* SettleCaps

    const challengeById = (id: string) =>
      sql.unsafe(`SELECT ${CHALLENGE_COLUMNS} FROM payment_challenges WHERE id = $1`, [id]).pipe(
        challengeRows,
        Effect.map((rows) => Option.fromNullable(rows[0])),
        Effect.orDie
      )

    const paymentById = (id: string) =>
      sql.unsafe(`SELECT ${PAYMENT_COLUMNS} FROM payments WHERE id = $1`, [id]).pipe(
        paymentRows,
        Effect.map((rows) => rows[0]!),
        Effect.orDie
      )

    // --- challenges ---------------------------------------------------------------------------

    const createChallenge = (orgId: string, body: CreateChallenge) =>
      Effect.gen(function*() {
        const network = body.network ?? config.x402Networks[0]!
        if (!config.x402Networks.includes(network)) {
          return yield* invalid("network", `payments are offered on ${config.x402Networks.join(", ")}`)
        }
        const info = networkInfo(network)!
        const amount = toAtomic(body.amount)!
        if (amount <= 0n) return yield* invalid("amount", "must be greater than 0")
        let payer: Address | null = null
        if (body.payer_address !== undefined) {
          const parsed = parseEvmAddress(body.payer_address)
          if (!parsed.ok) return yield* invalid("payer_address", addressProblemText(parsed.problem))
          payer = parsed.address
        }
        const payTo = yield* repo.payoutAddress(orgId, network)
        if (Option.isNone(payTo)) {
          return yield* new NoPayoutAddress({
            message: `no payout address for ${network}: set one with PUT /v1/payments/payout-addresses/${network}`,
            details: { network }
          })
        }
        const now = yield* Clock.currentTimeMillis
        const expiresAt = new Date(now + (body.expires_in ?? DEFAULT_EXPIRES_IN) * 1000)
        const nonce = `0x${randomBytes(32).toString("hex")}`
        const rows = yield* sql.unsafe(
          `INSERT INTO payment_challenges (org_id, amount, asset, network, pay_to, payer_address, description, nonce,
             max_timeout_seconds, expires_at, created_at)
           VALUES ($1, $2::numeric, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING ${CHALLENGE_COLUMNS}`,
          [orgId, amount.toString(), info.asset, network, payTo.value, payer, body.description ?? null, nonce,
            MAX_TIMEOUT_SECONDS, expiresAt, new Date(now)]
        ).pipe(challengeRows, Effect.orDie)
        return rows[0]!
      })

    // --- events -------------------------------------------------------------------------------

    const emitFailed = (p: PaymentRow, rail: Rail, failure: PaymentFailure, nowMs: number) =>
      Effect.forEach(rail.failedTo, (orgId) =>
        events.emit({
          orgId,
          eventType: "payment.failed",
          createdAt: new Date(nowMs),
          data: (() => {
            const d = paymentEventData(p, orgId === p.payer_org_id ? "out" : "in")
            return { payment: { ...d.payment, retryable: failure.retryAfter !== null } }
          })()
        }), { discard: true })

    const emitSettled = (p: PaymentRow, rail: Rail, nowMs: number) =>
      Effect.forEach(rail.settledTo, (to) =>
        events.emit({ orgId: to.orgId, eventType: "payment.settled", createdAt: new Date(nowMs), data: paymentEventData(p, to.direction) }), {
        discard: true
      })

    // --- the pipeline -------------------------------------------------------------------------

    interface Attempt {
      readonly challenge: ChallengeRow
      readonly rail: Rail
      readonly payerAddress: string | null
      readonly nonce: string | null
      readonly nowMs: number
    }

    /** A failure before any claim: recorded as a failed payment and emitted, in one transaction. */
    const recordFailure = (a: Attempt, failure: PaymentFailure) =>
      Effect.gen(function*() {
        const rows = yield* sql.unsafe(
          `INSERT INTO payments (challenge_id, rail, payer_org_id, payee_org_id, status, amount, asset, network,
             payer_address, pay_to, nonce, failure_code, failure_category, failure_reasons, failure_message, spent_at, created_at)
           VALUES ($1, $2, $3, $4, 'failed', $5::numeric, $6, $7, $8, $9, $10, $11, $12, $13::text[], $14, $15, $15)
           RETURNING ${PAYMENT_COLUMNS}`,
          [a.challenge.id, a.rail.rail, a.rail.payerOrgId, a.challenge.org_id, a.challenge.amount, a.challenge.asset,
            a.challenge.network, a.payerAddress, a.challenge.pay_to, a.nonce, failure.code, failure.category,
            pgArray(failure.reasons), failure.message, new Date(a.nowMs)]
        ).pipe(paymentRows)
        const payment = rows[0]!
        yield* emitFailed(payment, a.rail, failure, a.nowMs)
        return { _tag: "Failed", payment, failure } as const
      }).pipe(sql.withTransaction, Effect.orDie)

    type Claim =
      | { readonly _tag: "Claimed"; readonly payment: PaymentRow }
      | { readonly _tag: "Refused"; readonly failure: PaymentFailure }
      | { readonly _tag: "Conflict"; readonly message: string; readonly paymentId: string | null }

    /** Guard again under its lock, claim the challenge and record the settling payment: all or nothing. */
    const claim = (a: Attempt, auth: Authorization) =>
      Effect.gen(function*() {
        const refusal = yield* a.rail.guardLocked(auth.value, a.nowMs)
        if (refusal !== null) return { _tag: "Refused", failure: refusal } as Claim
        const paymentId = crypto.randomUUID()
        const claimed = yield* sql`
          UPDATE payment_challenges SET payment_id = ${paymentId}
          WHERE id = ${a.challenge.id} AND payment_id IS NULL AND paid_at IS NULL AND expires_at > ${new Date(a.nowMs)}
          RETURNING id`
        if (claimed.length === 0) {
          const now = yield* challengeById(a.challenge.id)
          const current = Option.getOrUndefined(now)
          return {
            _tag: "Conflict",
            message: current?.paid_at != null
              ? "the challenge is already paid"
              : "another payment of this challenge is being settled; retry after it ends",
            paymentId: current?.payment_id ?? null
          } as Claim
        }
        // The first pay of a challenge that gets this far binds the authorization's nonce to it; the
        // same (network, asset, payer, nonce) bound to another challenge undoes the claim.
        const bound = yield* sql`
          INSERT INTO payment_nonces (network, asset, payer_address, nonce, challenge_id, created_at)
          VALUES (${a.challenge.network}, ${a.challenge.asset.toLowerCase()}, ${auth.from.toLowerCase()}, ${auth.nonce},
            ${a.challenge.id}, ${new Date(a.nowMs)})
          ON CONFLICT (network, asset, payer_address, nonce) DO NOTHING RETURNING challenge_id`
        if (bound.length === 0) {
          const holder = yield* sql`
            SELECT challenge_id FROM payment_nonces WHERE network = ${a.challenge.network}
              AND asset = ${a.challenge.asset.toLowerCase()} AND payer_address = ${auth.from.toLowerCase()} AND nonce = ${auth.nonce}`
            .pipe(allRows(NonceHolderRow, "payment nonce holder"))
          if (holder[0]?.challenge_id !== a.challenge.id) return yield* new NonceTaken()
        }
        const rows = yield* sql.unsafe(
          `INSERT INTO payments (id, challenge_id, rail, payer_org_id, payee_org_id, status, amount, asset, network,
             payer_address, pay_to, nonce, spent_at, created_at, valid_before)
           VALUES ($1, $2, $3, $4, $5, 'settling', $6::numeric, $7, $8, $9, $10, $11, $12, $12, $13) RETURNING ${PAYMENT_COLUMNS}`,
          [paymentId, a.challenge.id, a.rail.rail, a.rail.payerOrgId, a.challenge.org_id, auth.value.toString(),
            a.challenge.asset, a.challenge.network, auth.from, a.challenge.pay_to, auth.nonce, new Date(a.nowMs),
            // Verified: at most a day ahead, so a Date holds it.
            new Date(Number(auth.validBefore) * 1000)]
        ).pipe(paymentRows)
        return { _tag: "Claimed", payment: rows[0]! } as Claim
      }).pipe(
        sql.withTransaction,
        Effect.catchAll((e) =>
          e instanceof NonceTaken
            ? Effect.succeed<Claim>({ _tag: "Refused", failure: unverified(["nonce_mismatch"]) })
            : (e as { _tag?: string })._tag === "SqlError" && uniqueViolation(e as SqlError) !== undefined
            ? Effect.succeed<Claim>({
              _tag: "Conflict",
              message: "this signed authorization is already being settled or was settled",
              paymentId: null
            })
            : Effect.die(e)
        )
      )

    /** The settlement's outcome ends a payment only while it is settling (the reconciler may have ended it). */
    const resolvedMeanwhile = (payment: PaymentRow): PayResult => ({
      _tag: "Conflict",
      message: "this payment was ended meanwhile from what the chain says; see GET /v1/payments/" + payment.id,
      paymentId: payment.id
    })

    const finishSettled = (a: Attempt, payment: PaymentRow, transaction: string | null) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const rows = yield* sql.unsafe(
          `UPDATE payments SET status = 'settled', transaction = $2, settled_at = $3, updated_at = $3
           WHERE id = $1 AND status = 'settling' RETURNING ${PAYMENT_COLUMNS}`,
          [payment.id, transaction, new Date(now)]
        ).pipe(paymentRows)
        const settled = rows[0]
        if (settled === undefined) return resolvedMeanwhile(payment)
        yield* sql`UPDATE payment_challenges SET paid_at = ${new Date(now)} WHERE id = ${a.challenge.id} AND payment_id = ${payment.id}`
        yield* emitSettled(settled, a.rail, now)
        return { _tag: "Settled", payment: settled } as PayResult
      }).pipe(sql.withTransaction, Effect.orDie)

    const finishFailed = (a: Attempt, payment: PaymentRow, failure: PaymentFailure) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const rows = yield* sql.unsafe(
          `UPDATE payments SET status = 'failed', failure_code = $2, failure_category = $3, failure_reasons = $4::text[],
             failure_message = $5, updated_at = $6 WHERE id = $1 AND status = 'settling' RETURNING ${PAYMENT_COLUMNS}`,
          [payment.id, failure.code, failure.category, pgArray(failure.reasons), failure.message, new Date(now)]
        ).pipe(paymentRows)
        const failed = rows[0]
        if (failed === undefined) return resolvedMeanwhile(payment)
        yield* sql`UPDATE payment_challenges SET payment_id = NULL WHERE id = ${a.challenge.id} AND payment_id = ${payment.id}`
        yield* emitFailed(failed, a.rail, failure, now)
        return { _tag: "Failed", payment: failed, failure } as PayResult
      }).pipe(sql.withTransaction, Effect.orDie)

    /**
     * Ends a payment a stopped process left `settling`, with the outcome the reconciler read on chain:
     * recorded, the challenge paid or released, and the events of the payment's rail emitted, as the
     * process would have done. Nothing happens to a payment no longer settling.
     */
    const resolveSettling = (
      paymentId: string,
      outcome: { readonly _tag: "Settled"; readonly transaction: string | null } | Extract<SettleOutcome, { _tag: "Failed" }>
    ) =>
      Effect.gen(function*() {
        const rows = yield* sql.unsafe(`SELECT ${PAYMENT_COLUMNS} FROM payments WHERE id = $1 AND status = 'settling'`, [paymentId])
          .pipe(paymentRows, Effect.orDie)
        const payment = rows[0]
        if (payment === undefined) return Option.none<PayResult>()
        const challenge = Option.getOrThrow(yield* challengeById(payment.challenge_id))
        const rail = payment.rail === "http" && payment.payer_org_id !== null ? httpRail(payment.payer_org_id, challenge) : emailRail(challenge)
        const nowMs = yield* Clock.currentTimeMillis
        const attempt: Attempt = { challenge, rail, nowMs, payerAddress: payment.payer_address, nonce: payment.nonce }
        return Option.some(
          outcome._tag === "Settled"
            ? yield* finishSettled(attempt, payment, outcome.transaction)
            : yield* finishFailed(attempt, payment, unsettled(outcome.reason, outcome.detail))
        )
      })

    /**
     * Whether the payload's (network, asset, payer, nonce) belongs to another challenge: bound there by
     * an earlier pay, or that challenge's own suggested nonce (`extra.nonce`, reserved for it from its
     * creation). The claim checks the binding again, atomically.
     */
    const boundElsewhere = (challenge: ChallengeRow, payload: unknown) =>
      Effect.gen(function*() {
        const n = payloadNonce(payload)
        if (n === null) return false
        const rows = yield* sql`
          SELECT EXISTS (
              SELECT 1 FROM payment_nonces WHERE network = ${challenge.network} AND asset = ${challenge.asset.toLowerCase()}
                AND payer_address = ${n.from.toLowerCase()} AND nonce = ${n.nonce} AND challenge_id <> ${challenge.id})
            OR EXISTS (SELECT 1 FROM payment_challenges WHERE nonce = ${n.nonce} AND id <> ${challenge.id}) AS taken`
          .pipe(allRows(NonceTakenRow, "payment nonce taken"))
        return rows[0]?.taken === true
      }).pipe(Effect.orDie)

    /** The whole pipeline for one signed payload against one challenge. */
    const process = (challenge: ChallengeRow, rail: Rail, payload: unknown): Effect.Effect<PayResult> =>
      Effect.gen(function*() {
        const nowMs = yield* Clock.currentTimeMillis
        if (challenge.paid_at !== null) {
          return { _tag: "Conflict", message: "the challenge is already paid", paymentId: challenge.payment_id } as const
        }
        const base = { challenge, rail, nowMs, payerAddress: null, nonce: null }
        if (challenge.expires_at.getTime() <= nowMs) return yield* recordFailure(base, expired(challenge.expires_at))

        // The guard judges what the signed authorization would move, when it can be read.
        const spend = payloadValue(payload) ?? atomicOf(challenge.amount)
        const refusal = yield* rail.guard(spend, nowMs)
        if (refusal !== null) return yield* recordFailure(base, refusal)

        const info = networkInfo(challenge.network)!
        const nonceBoundElsewhere = yield* boundElsewhere(challenge, payload)
        const verdict = yield* Effect.promise(() =>
          verifyPayment({
            network: challenge.network,
            chainId: info.chainId,
            asset: challenge.asset as Address,
            assetName: info.assetName,
            assetVersion: info.assetVersion,
            amount: atomicOf(challenge.amount),
            payTo: challenge.pay_to as Address,
            nonceBoundElsewhere,
            payerAddress: challenge.payer_address as Address | null
          }, payload, nowMs / 1000)
        )
        if (!verdict.ok) {
          return yield* recordFailure({ ...base, payerAddress: verdict.payerAddress, nonce: verdict.nonce }, unverified(verdict.reasons))
        }
        const attempt: Attempt = { ...base, payerAddress: verdict.authorization.from, nonce: verdict.authorization.nonce }
        const claimAndSettle = Effect.gen(function*() {
          const claimed = yield* Effect.orDie(claim(attempt, verdict.authorization))
          if (claimed._tag === "Conflict") return claimed
          if (claimed._tag === "Refused") return yield* recordFailure(attempt, claimed.failure)
          const requirements = paymentRequiredOf(challenge, config.publicBaseUrl).accepts[0]! as PaymentRequirements
          const outcome = yield* facilitator.settle(payload as PaymentPayload, requirements)
          if (outcome._tag === "Settled") return yield* finishSettled(attempt, claimed.payment, outcome.transaction)
          return yield* finishFailed(attempt, claimed.payment, unsettled(outcome.reason, outcome.detail))
        })
        // From the claim on, the outcome must be recorded whatever becomes of the request: a client
        // that hangs up interrupts the request, not the settlement (bounded by X402_SETTLE_TIMEOUT).
        // Only a process that stops leaves a payment settling; the reconciler ends it.
        return yield* Effect.flatMap(Effect.forkIn(claimAndSettle, scope), Fiber.join)
      })

    const { httpRail, emailRail } = makeRails({ sql, repo, caps })

    /** `POST /payments/challenges/{id}/pay`: the synthetic (HTTP) flow, as the caller's organization. */
    const pay = (payerOrgId: string, challengeId: string, payload: unknown) =>
      Effect.gen(function*() {
        const challenge = yield* Effect.flatMap(challengeById(challengeId), Option.match({
          onNone: () => Effect.fail(new NotFound({ message: `no payment challenge ${challengeId}` })),
          onSome: Effect.succeed
        }))
        return yield* process(challenge, httpRail(payerOrgId, challenge), payload)
      })

    /**
     * The email rail's payee side: a reply to the payee's challenge carried a signed payment. The
     * payee's settle caps guard it (category `cap`); events go to the payee's endpoints. The caller
     * (mail ingestion) answers the payer with a receipt or a reject naming `failure.reasons`.
     */
    const settleIncoming = (payeeOrgId: string, challengeId: string, payload: unknown) =>
      Effect.gen(function*() {
        const challenge = yield* challengeById(challengeId)
        if (Option.isNone(challenge) || challenge.value.org_id !== payeeOrgId) {
          return { _tag: "Conflict", message: `no payment challenge ${challengeId} of this organization`, paymentId: null } as PayResult
        }
        return yield* process(challenge.value, emailRail(challenge.value), payload)
      })

    const toApi = (p: PaymentRow, callerOrgId: string): Payment => toPayment(p, callerOrgId)

    return { createChallenge, challengeById, paymentById, pay, settleIncoming, resolveSettling, toApi } as const
  })
}) {}

/** A PostgreSQL array literal of plain words (reasons are snake_case identifiers). */
const pgArray = (items: ReadonlyArray<string>) => `{${items.map((s) => `"${s.replace(/["\\]/g, "")}"`).join(",")}}`

/** The area's services over AppConfig, the SqlClient and OrgEvents (handlers and, later, mail ingestion share them). */
export const PaymentsLive = PaymentsService.Default.pipe(
  Layer.provideMerge(Layer.mergeAll(Facilitator.Default, SettleCaps.Default, PaymentsRepo.Default))
)
