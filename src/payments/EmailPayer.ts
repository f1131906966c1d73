/**
 * The email rail's payer side: reading the challenge a received email carries, and answering it with
 * a signed payment (`POST /payments/emails/{id}/pay`).
 *
 * A received email is anyone's word. What it claims (a challenge id, a payee, an amount) decides
 * nothing; what the signed authorization does decides everything:
 * - the payee is the address the authorization pays, and the organizations that own it (whose payout
 *   address it is on the payload's network, and the organization of a challenge of this service that
 *   the mail names, when that challenge is paid to exactly this address);
 * - a challenge of this service named by the mail or the payload must be paid to its own `pay_to`
 *   (`payment_verification_failed`, `payto_mismatch` otherwise): a mail naming a real challenge with
 *   another wallet as `payTo` is a forgery;
 * - the payer's spend policy (paused, caps, allowlist) judges that address, those organizations and
 *   the authorization's value, in the order of the HTTP rail (policy, then verification);
 * - the authorization counts on the payer's daily cap from the moment it is mailed (whoever holds it
 *   can settle it until its validBefore): the policy check and the record of the spend are one
 *   transaction holding the payer's policy row, like the HTTP rail's claim, so two pays racing for the
 *   last of a cap cannot both pass. The same authorization mailed again counts once.
 * The signature itself is the payee's service's to verify.
 */
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Option, Schema } from "effect"
import { simpleParser } from "mailparser"
import { NotFound, PaymentDeclined, PaymentVerificationFailed } from "../contract/Errors.js"
import { allRows, Timestamp } from "../platform/Rows.js"
import { replyInput } from "../sending/Replies.js"
import type { Sender } from "../sending/Sender.js"
import type { PaymentRequired } from "./Api.js"
import { declined, unverified } from "./Failures.js"
import { atomicOf } from "./Money.js"
import { networkInfo } from "./Networks.js"
import { evaluatePolicy, utcDay } from "./Policy.js"
import { lockedPolicy } from "./Rails.js"
import { type PaymentsRepo, policyOf } from "./Repo.js"
import type { PaymentsService } from "./Service.js"
import { readAuthorization } from "./Verifier.js"

export const PAYMENT_REQUIRED_TYPE = "application/x402-payment-required+json"
export const PAYMENT_TYPE = "application/x402-payment+json"

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

/** The JSON text of the first part of `type` in a raw message, or null. */
export const partOf = async (raw: Uint8Array, type: string): Promise<string | null> => {
  const mail = await simpleParser(Buffer.from(raw), { skipHtmlToText: true, skipTextToHtml: true, skipTextLinks: true })
  const part = mail.attachments.find((a) => a.contentType.toLowerCase() === type)
  return part === undefined ? null : part.content.toString("utf8")
}

export const parseJson = (text: string): unknown => {
  try {
    return JSON.parse(text) as unknown
  } catch {
    return null
  }
}

export const json64 = (value: unknown) => Buffer.from(JSON.stringify(value, null, 2), "utf8").toString("base64")

/** Relay outcomes after which the mail may have left: the spend it carried stays counted. */
const MAYBE_SENT = new Set(["OutboundRelayTimeout", "OutboundResponseMalformed"])

/** Rows of "raw of payment email". */
const RawOfPaymentEmailRow = Schema.Struct({ raw: Schema.NullOr(Schema.Uint8ArrayFromSelf) })

/** Rows of "earlier email spend". */
const EarlierEmailSpendRow = Schema.Struct({ amount: Schema.String, spent_at: Timestamp })

/** Rows of "email spend insert". */
const EmailSpendInsertRow = Schema.Struct({ id: Schema.String })

export const makeEmailPayer = (deps: {
  readonly sql: SqlClient.SqlClient
  readonly payments: PaymentsService
  readonly repo: PaymentsRepo
  readonly sender: Sender
}) => {
  const { payments, repo, sender, sql } = deps
  const provideSql = Effect.provideService(SqlClient.SqlClient, sql)

  /** The PaymentRequired a received email of the organization carries. */
  const challengeOfEmail = (orgId: string, emailId: string) =>
    Effect.gen(function*() {
      const rows = yield* sql`
        SELECT c.raw FROM emails e JOIN email_contents c ON c.email_id = e.id
        WHERE e.id = ${emailId} AND e.org_id = ${orgId}`.pipe(
        allRows(RawOfPaymentEmailRow, "raw of payment email"),
        Effect.orDie
      )
      const raw = rows[0]?.raw
      if (raw === undefined || raw === null) return yield* new NotFound({ message: `no email ${emailId}` })
      const text = yield* Effect.promise(() => partOf(raw, PAYMENT_REQUIRED_TYPE).catch(() => null))
      const parsed = text === null ? null : parseJson(text)
      const required = parsed as PaymentRequired | null
      if (
        required === null || typeof required !== "object" || !Array.isArray(required.accepts) ||
        typeof required.accepts[0] !== "object" || required.accepts[0] === null
      ) {
        return yield* new NotFound({ message: `email ${emailId} carries no ${PAYMENT_REQUIRED_TYPE} part with a payment requirement` })
      }
      return required
    })

  const refusal = (kind: "declined" | "verification", reasons: ReadonlyArray<string>, challengeId: string | null) => {
    const failure = kind === "declined" ? declined(reasons) : unverified(reasons)
    const details = { failure_category: failure.category, reasons, retryable: false, payment_id: null, challenge_id: challengeId }
    return kind === "declined"
      ? new PaymentDeclined({ message: failure.message, details })
      : new PaymentVerificationFailed({ message: failure.message, details })
  }

  /**
   * The policy's verdict on what the payload pays and, when it passes, the spend recorded: one
   * transaction holding the payer's policy row. Answers the spend's id when this call recorded it.
   */
  const judgeAndReserve = (orgId: string, emailId: string, payload: unknown) =>
    Effect.gen(function*() {
      const required = yield* challengeOfEmail(orgId, emailId)
      const mailNamed = required.accepts[0]?.extra?.challengeId
      const auth = readAuthorization(payload)
      const shownId = auth.ok && auth.challengeId !== null ? auth.challengeId : typeof mailNamed === "string" ? mailNamed : null
      if (!auth.ok) return yield* refusal("verification", auth.reasons, shownId)

      // Challenges of this service the mail or the payload names (of any organization).
      const ids = [...new Set([mailNamed, auth.challengeId].filter((s): s is string => typeof s === "string" && UUID.test(s)))]
      const named = (yield* Effect.forEach(ids, (id) => payments.challengeById(id))).flatMap(Option.toArray)
      const paysNamed = named.filter((c) => c.pay_to.toLowerCase() === auth.to.toLowerCase())
      const owners = yield* repo.ownersOf(auth.network, auth.to)
      const payeeOrgIds = [...new Set([...paysNamed.map((c) => c.org_id), ...owners])]
      const asset = (auth.asset ?? networkInfo(auth.network)?.asset ?? "").toLowerCase()
      const payer = auth.from.toLowerCase()
      const challengeId = paysNamed[0]?.id ?? null

      return yield* Effect.gen(function*() {
        const nowMs = yield* Clock.currentTimeMillis
        const policy = yield* lockedPolicy(sql, orgId)
        const day = utcDay(nowMs)
        const earlier = yield* sql`
          SELECT amount::text AS amount, spent_at FROM payment_email_spends
          WHERE org_id = ${orgId} AND network = ${auth.network} AND asset = ${asset} AND payer_address = ${payer}
            AND nonce = ${auth.nonce}`.pipe(allRows(EarlierEmailSpendRow, "earlier email spend"))
        let spentToday = yield* repo.spentBy(orgId, day.start, day.end)
        // The same authorization mailed again commits nothing more.
        const again = earlier[0]
        if (again !== undefined && again.spent_at >= day.start && again.spent_at < day.end) spentToday -= atomicOf(again.amount)
        const reasons = evaluatePolicy(policyOf(policy), { amount: auth.value, spentToday, payeeOrgIds, payTo: auth.to })
        if (reasons.length > 0) return yield* refusal("declined", reasons, shownId)
        if (named.length > paysNamed.length) return yield* refusal("verification", ["payto_mismatch"], shownId)
        if (again !== undefined) return null
        const rows = yield* sql`
          INSERT INTO payment_email_spends (org_id, email_id, network, asset, payer_address, nonce, pay_to, challenge_id,
            amount, spent_at)
          VALUES (${orgId}, ${emailId}, ${auth.network}, ${asset}, ${payer}, ${auth.nonce}, ${auth.to}, ${challengeId},
            ${auth.value.toString()}::numeric, ${new Date(nowMs)})
          ON CONFLICT (org_id, network, asset, payer_address, nonce) DO NOTHING RETURNING id`.pipe(
          allRows(EmailSpendInsertRow, "email spend insert")
        )
        return rows[0]?.id ?? null
      }).pipe(
        sql.withTransaction,
        Effect.catchTag("SqlError", Effect.die)
      )
    })

  /** Replies to a received challenge with the signed payment as an `application/x402-payment+json` part. */
  const payByEmail = (orgId: string, emailId: string, payload: unknown) =>
    Effect.gen(function*() {
      const spendId = yield* judgeAndReserve(orgId, emailId, payload)
      const auth = readAuthorization(payload)
      const named = auth.ok ? auth.challengeId : null
      const sent = yield* Effect.gen(function*() {
        const base = yield* replyInput(orgId, emailId, {
          text: `Signed x402 payment attached (${PAYMENT_TYPE})${named !== null ? ` for challenge ${named}` : ""}.\n`
        }).pipe(provideSql)
        return yield* sender.submit(orgId, {
          ...base,
          attachments: [{ filename: "payment.json", content_type: PAYMENT_TYPE, content_base64: json64(payload) }]
        })
      }).pipe(
        // Nothing left: the authorization was not handed to anyone, so it is not spent.
        Effect.tapError((e) =>
          spendId === null || MAYBE_SENT.has(e._tag)
            ? Effect.void
            : sql`DELETE FROM payment_email_spends WHERE id = ${spendId}`.pipe(Effect.orDie)
        )
      )
      if (spendId !== null) yield* sql`UPDATE payment_email_spends SET sent_email_id = ${sent.id} WHERE id = ${spendId}`.pipe(Effect.orDie)
      return sent
    })

  return { challengeOfEmail, payByEmail } as const
}
