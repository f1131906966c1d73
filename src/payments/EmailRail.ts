/**
 * The email rail of x402: payments asked for and made by mail.
 *
 * - A challenge created with `deliver_to` is mailed from the payee's managed inbox through the send
 *   path (same checks, quotas, relay, DKIM): its MIME carries an `application/x402-payment-required+json`
 *   part holding the x402 PaymentRequired. The sent email's Message-ID is recorded on the challenge.
 * - A payer answers with a reply carrying an `application/x402-payment+json` part (the signed x402
 *   PaymentPayload). Ingestion stores a job row in the very statement that stores the email, so an
 *   accepted reply is never lost; workers (every process, leased, SKIP LOCKED) match it to its
 *   challenge (In-Reply-To/References against the challenge's Message-ID, else the payload's
 *   `accepted.extra.challengeId`, always within the receiving organization) and hand it to
 *   `PaymentsService.settleIncoming` (settle caps, verification, settlement, events).
 * - The payee's service then answers the payer by reply: a receipt (settled, transaction hash) or a
 *   reject naming the code and reasons, both with an `application/x402-payment-response+json` part
 *   (the x402 SettleResponse plus our fields). The answer is recorded before it is mailed, so a
 *   crash between the two re-mails the answer and never settles twice.
 */
import { SqlClient } from "@effect/sql"
import { Clock, Duration, Effect, Layer, Option, Schema } from "effect"
import { ValidationError } from "../contract/Errors.js"
import type { EmailStoredHook } from "../inbound/Store.js"
import { AppConfig } from "../platform/Config.js"
import { allRows, Enum, JsonColumn, TextArray } from "../platform/Rows.js"
import { runJobs } from "../platform/JobRunner.js"
import { backoff, retryAt } from "../platform/RetryPolicy.js"
import { randomToken } from "../platform/Secrets.js"
import { sendableAddresses } from "../registries/Senders.js"
import { replyInput } from "../sending/Replies.js"
import { Sender, type SendInput } from "../sending/Sender.js"
import { json64, makeEmailPayer, parseJson, partOf, PAYMENT_REQUIRED_TYPE, PAYMENT_TYPE } from "./EmailPayer.js"
import { fromAtomic, atomicOf } from "./Money.js"
import { type ChallengeRow, paymentRequiredOf, type PaymentRow, PaymentsRepo } from "./Repo.js"
import { type PayResult, PaymentsService } from "./Service.js"

export { PAYMENT_REQUIRED_TYPE, PAYMENT_TYPE, partOf }
export const PAYMENT_RESPONSE_TYPE = "application/x402-payment-response+json"
/** Names the challenge a mailed PaymentRequired is for, and the status of a receipt or reject. */
export const CHALLENGE_HEADER = "X-Mailroom-Payment-Challenge"
export const STATUS_HEADER = "X-Mailroom-Payment-Status"

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

const hasPart = (types: ReadonlyArray<string>, type: string) => types.some((t) => t.toLowerCase() === type)

/** What the payee's service mails back: the x402 SettleResponse and our fields. */
export const Answer = Schema.Struct({
  x402Version: Schema.Literal(2),
  success: Schema.Boolean,
  transaction: Schema.NullOr(Schema.String),
  network: Schema.NullOr(Schema.String),
  payer: Schema.NullOr(Schema.String),
  errorReason: Schema.NullOr(Schema.String),
  challenge_id: Schema.NullOr(Schema.String),
  payment_id: Schema.NullOr(Schema.String),
  status: Enum("settled", "failed", "conflict"),
  amount: Schema.NullOr(Schema.String),
  code: Schema.NullOr(Schema.String),
  failure_category: Schema.NullOr(Schema.String),
  reasons: TextArray,
  retryable: Schema.Boolean,
  message: Schema.String
})
export type Answer = typeof Answer.Type

const answerOf = (r: PayResult, challenge: ChallengeRow): Answer => {
  const base = {
    x402Version: 2 as const,
    network: challenge.network,
    challenge_id: challenge.id,
    amount: fromAtomic(atomicOf(challenge.amount))
  }
  switch (r._tag) {
    case "Settled":
      return {
        ...base,
        success: true,
        transaction: r.payment.transaction,
        payer: r.payment.payer_address,
        errorReason: null,
        payment_id: r.payment.id,
        status: "settled",
        code: null,
        failure_category: null,
        reasons: [],
        retryable: false,
        message: `settled: ${base.amount} USDC on ${challenge.network}, transaction ${r.payment.transaction}`
      }
    case "Failed":
      return {
        ...base,
        success: false,
        transaction: null,
        payer: r.payment.payer_address,
        errorReason: r.failure.reasons[0] ?? r.failure.code,
        payment_id: r.payment.id,
        status: "failed",
        code: r.failure.code,
        failure_category: r.failure.category,
        reasons: r.failure.reasons,
        retryable: r.failure.retryAfter !== null,
        message: r.failure.message
      }
    case "Conflict":
      return {
        ...base,
        success: false,
        transaction: null,
        payer: null,
        errorReason: "conflict",
        payment_id: r.paymentId,
        status: "conflict",
        code: "conflict",
        failure_category: null,
        reasons: [],
        retryable: false,
        message: r.message
      }
  }
}

const answerText = (a: Answer) =>
  a.success
    ? `Payment received.\n\nAmount: ${a.amount} USDC\nNetwork: ${a.network}\nTransaction: ${a.transaction}\n` +
      `Challenge: ${a.challenge_id}\nPayment: ${a.payment_id}\n`
    : `Payment not accepted: ${a.code}${a.reasons.length > 0 ? ` (${a.reasons.join(", ")})` : ""}.\n\n${a.message}\n\n` +
      `Challenge: ${a.challenge_id}\n${a.payment_id !== null ? `Payment: ${a.payment_id}\n` : ""}` +
      (a.retryable ? "The same signed payment may be sent again.\n" : "")

const Id = Schema.Struct({ id: Schema.String })

/** What a job reads of its email; `references` is `jsonb`. */
const PaymentEmail = Schema.Struct({
  raw: Schema.NullOr(Schema.Uint8ArrayFromSelf),
  in_reply_to: Schema.NullOr(Schema.String),
  references: JsonColumn(TextArray),
  payments: Schema.Boolean
})

/** A leased job; `answer` (`jsonb`) is kept once worked out, so a retry mails the same one. */
const JobRow = Schema.Struct({
  email_id: Schema.String,
  org_id: Schema.String,
  attempts: Schema.Number,
  challenge_id: Schema.NullOr(Schema.String),
  outcome: Schema.NullOr(Schema.String),
  answer: JsonColumn(Schema.NullOr(Answer))
})
type JobRow = typeof JobRow.Type

export interface EmailRailWorkerOptions {
  /** Longest sleep between looks for jobs (default 200 ms). */
  readonly pollMs?: number
  /** Jobs in flight at once per process (default 8). */
  readonly concurrency?: number
}

/**
 * Attempts of a job before it stops retrying: an answer that cannot be mailed, a challenge being
 * settled by another payment, or a transient settlement failure.
 */
const MAX_ATTEMPTS = 6
/** About 2 s, 4 s, 8 s … apart, at most a minute (the attempts are capped by MAX_ATTEMPTS where they are judged). */
const RETRY = backoff({ base: "2 seconds", max: "1 minute" })

export class EmailRail extends Effect.Service<EmailRail>()("mailroom/payments/EmailRail", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const config = yield* AppConfig
    const payments = yield* PaymentsService
    const sender = yield* Sender
    const repo = yield* PaymentsRepo
    const provideSql = Effect.provideService(SqlClient.SqlClient, sql)

    /** Mails a new challenge to `deliverTo` from the payee's managed inbox; records its Message-ID. */
    const mailChallenge = (orgId: string, challenge: ChallengeRow, deliverTo: string) =>
      Effect.gen(function*() {
        const own = yield* sendableAddresses(orgId).pipe(provideSql)
        if (own.managed === null) {
          return yield* new ValidationError({
            message: "deliver_to: this organization has no managed inbox to mail the challenge from",
            details: { issues: [{ field: "deliver_to", reason: "no managed inbox to send from" }] }
          })
        }
        const required = paymentRequiredOf(challenge, config.publicBaseUrl)
        const amount = fromAtomic(atomicOf(challenge.amount))
        const input: SendInput = {
          kind: "send",
          sourceEmailId: null,
          from: own.managed,
          to: [deliverTo],
          cc: [],
          bcc: [],
          replyTo: null,
          subject: `Payment request: ${amount} USDC${challenge.description !== null ? ` (${challenge.description.slice(0, 120)})` : ""}`
            .replace(/[\r\n]+/g, " "),
          text: `A payment of ${amount} USDC on ${challenge.network} to ${challenge.pay_to} is requested` +
            `${challenge.description !== null ? `: ${challenge.description}` : ""}.\n\n` +
            `The x402 PaymentRequired is attached (${PAYMENT_REQUIRED_TYPE}). To pay, reply to this message with ` +
            `the signed x402 PaymentPayload as an ${PAYMENT_TYPE} part (mailroom payments pay --email <id> does it).\n` +
            `It expires at ${challenge.expires_at.toISOString()}.\n\nChallenge: ${challenge.id}\n`,
          html: null,
          headers: { [CHALLENGE_HEADER]: challenge.id },
          attachments: [{ filename: "payment-required.json", content_type: PAYMENT_REQUIRED_TYPE, content_base64: json64(required) }],
          sendAt: null,
          discardContent: false,
          inReplyTo: null,
          references: []
        }
        const sent = yield* sender.submit(orgId, input)
        yield* sql`
          UPDATE payment_challenges SET deliver_to = ${deliverTo}, sent_email_id = ${sent.id}, message_id = ${sent.message_id}
          WHERE id = ${challenge.id}`.pipe(Effect.orDie)
        return sent
      })

    // The payer side (reading a mailed challenge, paying it by reply) judges what is paid, not what the mail says.
    const { challengeOfEmail, payByEmail } = makeEmailPayer({ sql, payments, repo, sender })

    // --- ingestion -----------------------------------------------------------------------------

    /** The job row of an accepted email carrying a signed payment, stored with the email. */
    const hook: EmailStoredHook = (email, message) =>
      Effect.sync(() =>
        email.recipient.wake === null && hasPart(message.parsed.attachments.map((a) => a.content_type), PAYMENT_TYPE)
          ? Option.some(sql`INSERT INTO payment_email_jobs (email_id, org_id) VALUES (${email.id}, ${email.orgId})`)
          : Option.none()
      )

    // --- the worker ----------------------------------------------------------------------------

    const finish = (emailId: string, token: string, fields: { outcome: string; answer: Answer | null; challengeId: string | null; paymentId: string | null; replyId: string | null; error: string | null }) =>
      sql`UPDATE payment_email_jobs SET status = 'done', outcome = ${fields.outcome},
            answer = ${fields.answer === null ? null : JSON.stringify(fields.answer)}::jsonb,
            challenge_id = coalesce(${fields.challengeId}::uuid, challenge_id), payment_id = coalesce(${fields.paymentId}::uuid, payment_id),
            reply_email_id = ${fields.replyId}, last_error = ${fields.error}, lease_token = NULL, lease_until = NULL, updated_at = now()
          WHERE email_id = ${emailId} AND lease_token = ${token}`.pipe(Effect.orDie)

    const later = (job: JobRow, token: string, error: string, nowMs: number) =>
      Effect.flatMap(retryAt(RETRY, job.attempts, nowMs), (at) =>
        sql`UPDATE payment_email_jobs SET due_at = ${Option.getOrElse(at, () => new Date(nowMs))}, last_error = ${error},
              lease_token = NULL, lease_until = NULL, updated_at = now()
            WHERE email_id = ${job.email_id} AND lease_token = ${token}`).pipe(Effect.orDie)

    const matchChallenge = (orgId: string, ids: ReadonlyArray<string>, payload: unknown) =>
      Effect.gen(function*() {
        if (ids.length > 0) {
          const rows = yield* sql`
            SELECT id FROM payment_challenges WHERE org_id = ${orgId} AND message_id IN ${sql.in(ids)}
            ORDER BY created_at DESC LIMIT 1`.pipe(allRows(Id, "challenge of thread"))
          if (rows[0] !== undefined) return Option.some(rows[0].id)
        }
        const named = (payload as { accepted?: { extra?: { challengeId?: unknown } } } | null)?.accepted?.extra?.challengeId
        if (typeof named === "string" && UUID.test(named)) {
          const rows = yield* sql`SELECT id FROM payment_challenges WHERE org_id = ${orgId} AND id = ${named}`.pipe(
            allRows(Id, "named challenge")
          )
          if (rows[0] !== undefined) return Option.some(rows[0].id)
        }
        return Option.none<string>()
      }).pipe(Effect.orDie)

    /** A duplicate of a payment already settled with the same signed authorization: answer its receipt again. */
    const alreadySettled = (r: PayResult, payload: unknown): Effect.Effect<PayResult> =>
      Effect.gen(function*() {
        if (r._tag !== "Conflict" || r.paymentId === null) return r
        const nonce = (payload as { payload?: { authorization?: { nonce?: unknown } } } | null)?.payload?.authorization?.nonce
        const p = yield* payments.paymentById(r.paymentId)
        return p.status === "settled" && typeof nonce === "string" && p.nonce?.toLowerCase() === nonce.toLowerCase()
          ? { _tag: "Settled", payment: p as PaymentRow }
          : r
      })

    const mailAnswer = (orgId: string, emailId: string, answer: Answer) =>
      Effect.gen(function*() {
        const base = yield* replyInput(orgId, emailId, { text: answerText(answer) }).pipe(provideSql)
        return yield* sender.submit(orgId, {
          ...base,
          headers: {
            [STATUS_HEADER]: answer.status,
            ...(answer.challenge_id !== null ? { [CHALLENGE_HEADER]: answer.challenge_id } : {})
          },
          attachments: [{ filename: "payment-response.json", content_type: PAYMENT_RESPONSE_TYPE, content_base64: json64(answer) }]
        })
      })

    const runJob = (job: JobRow, token: string) =>
      Effect.gen(function*() {
        const nowMs = yield* Clock.currentTimeMillis
        let answer = job.answer
        let challengeId = job.challenge_id
        if (answer === null) {
          const rows = yield* sql`
            SELECT c.raw, e.in_reply_to, e."references",
              EXISTS (SELECT 1 FROM organization_entitlements g WHERE g.org_id = e.org_id AND g.entitlement = 'payments') AS payments
            FROM emails e JOIN email_contents c ON c.email_id = e.id WHERE e.id = ${job.email_id}`.pipe(
            allRows(PaymentEmail, "payment email"),
            Effect.orDie
          )
          const email = rows[0]
          if (email === undefined || email.raw === null || !email.payments) {
            return yield* finish(job.email_id, token, {
              outcome: "ignored", answer: null, challengeId: null, paymentId: null, replyId: null,
              error: email === undefined || email.raw === null ? "the email's content is gone" : "payments are not enabled"
            })
          }
          const text = yield* Effect.promise(() => partOf(email.raw!, PAYMENT_TYPE).catch(() => null))
          // An unreadable part is still a payment attempt: the verifier names it `malformed_payload`.
          const payload = text === null ? null : parseJson(text) ?? text
          const ids = [email.in_reply_to, ...[...email.references].reverse()].filter((s): s is string => typeof s === "string" && s !== "")
          const matched = yield* matchChallenge(job.org_id, ids, payload)
          if (Option.isNone(matched)) {
            return yield* finish(job.email_id, token, {
              outcome: "unmatched", answer: null, challengeId: null, paymentId: null, replyId: null,
              error: "no challenge of this organization is named by In-Reply-To, References or the payload"
            })
          }
          challengeId = matched.value
          const result = yield* Effect.flatMap(payments.settleIncoming(job.org_id, challengeId, payload), (r) => alreadySettled(r, payload))
          if (result._tag === "Conflict" && /being settled/.test(result.message) && job.attempts < MAX_ATTEMPTS) {
            return yield* later(job, token, result.message, nowMs)
          }
          // A transient settlement failure (facilitator unavailable, a generic failure) is the service's to
          // retry: the payer already did its part, and the same signed payload can settle later.
          if (result._tag === "Failed" && result.failure.retryAfter !== null && job.attempts < MAX_ATTEMPTS) {
            return yield* later(job, token, result.failure.message, nowMs)
          }
          const challenge = Option.getOrThrow(yield* payments.challengeById(challengeId))
          answer = answerOf(result, challenge)
          // Decided: recorded before it is mailed, so a retry only mails it.
          yield* sql`UPDATE payment_email_jobs SET challenge_id = ${challengeId}, payment_id = ${answer.payment_id},
                       outcome = ${answer.status}, answer = ${JSON.stringify(answer)}::jsonb, updated_at = now()
                     WHERE email_id = ${job.email_id} AND lease_token = ${token}`.pipe(Effect.orDie)
        }
        const decided = answer
        const sent = yield* Effect.either(mailAnswer(job.org_id, job.email_id, decided))
        if (sent._tag === "Left") {
          const e = sent.left
          // Relay trouble and a full send quota pass; a refusal of the send itself does not.
          const transient = e._tag.startsWith("Outbound") || e._tag === "RateLimited"
          if (transient && job.attempts < MAX_ATTEMPTS) return yield* later(job, token, e.message, nowMs)
          return yield* finish(job.email_id, token, {
            outcome: decided.status, answer: decided, challengeId, paymentId: decided.payment_id, replyId: null,
            error: `the answer could not be mailed: ${e.message}`
          })
        }
        yield* finish(job.email_id, token, {
          outcome: decided.status, answer: decided, challengeId, paymentId: decided.payment_id, replyId: sent.right.id, error: null
        })
      })

    const leaseMs = Duration.toMillis(config.x402SettleTimeout) + Duration.toMillis(config.outboundTimeout) + 60_000

    /** Claims due jobs for this process (lease, SKIP LOCKED), each with the token it is fenced by. */
    const claim = (limit: number) =>
      Effect.gen(function*() {
        const token = randomToken(16)
        const nowMs = yield* Clock.currentTimeMillis
        const now = new Date(nowMs)
        const jobs = yield* sql`
          UPDATE payment_email_jobs SET lease_token = ${token}, lease_until = ${new Date(nowMs + leaseMs)},
            attempts = attempts + 1, updated_at = now()
          WHERE email_id IN (
            SELECT email_id FROM payment_email_jobs
            WHERE status = 'pending' AND due_at <= ${now} AND (lease_until IS NULL OR lease_until < ${now})
            ORDER BY due_at LIMIT ${limit} FOR UPDATE SKIP LOCKED)
          RETURNING email_id, org_id, attempts, challenge_id, outcome, answer`.pipe(allRows(JobRow, "payment email jobs"), Effect.orDie)
        return jobs.map((job) => ({ job, token }))
      })

    /** A job that failed with a defect is tried again by the retry policy. */
    const failed = ({ job, token }: { readonly job: JobRow; readonly token: string }) =>
      Effect.flatMap(Clock.currentTimeMillis, (nowMs) => later(job, token, "internal error", nowMs))

    return { mailChallenge, challengeOfEmail, payByEmail, hook, claim, runJob, failed } as const
  })
}) {}

/** The workers that settle payment replies and answer them, in every process: declared on the job runner. */
export const EmailRailWorkerLive = (options: EmailRailWorkerOptions = {}) =>
  Layer.scopedDiscard(Effect.gen(function*() {
    const rail = yield* EmailRail
    yield* runJobs({
      name: "payment email",
      concurrency: options.concurrency ?? 8,
      pollMs: options.pollMs ?? 200,
      claim: rail.claim,
      run: ({ job, token }) => rail.runJob(job, token),
      onDefect: rail.failed
    })
  }))
