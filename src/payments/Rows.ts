/**
 * The rows of payment challenges and payments, decoded (amounts as text, so no numeric reaches
 * JavaScript as a float), and the column lists that give them, for the repository and the flows.
 */
import { Schema } from "effect"
import { allRows, NullableTimestamp, TextArray, Timestamp } from "../platform/Rows.js"

/** A payment challenge as the columns of `CHALLENGE_COLUMNS` (or `*`) give it; the amount as text. */
export const ChallengeRow = Schema.Struct({
  id: Schema.String,
  org_id: Schema.String,
  amount: Schema.String,
  asset: Schema.String,
  network: Schema.String,
  pay_to: Schema.String,
  payer_address: Schema.NullOr(Schema.String),
  description: Schema.NullOr(Schema.String),
  nonce: Schema.String,
  max_timeout_seconds: Schema.Number,
  expires_at: Timestamp,
  payment_id: Schema.NullOr(Schema.String),
  paid_at: NullableTimestamp,
  created_at: Timestamp,
  /** The email rail: where the challenge was mailed, and the sent email. */
  deliver_to: Schema.NullOr(Schema.String),
  sent_email_id: Schema.NullOr(Schema.String)
})
export type ChallengeRow = typeof ChallengeRow.Type

export const PaymentRow = Schema.Struct({
  id: Schema.String,
  challenge_id: Schema.String,
  rail: Schema.Literal("http", "email"),
  payer_org_id: Schema.NullOr(Schema.String),
  payee_org_id: Schema.String,
  status: Schema.Literal("settling", "settled", "failed"),
  amount: Schema.String,
  asset: Schema.String,
  network: Schema.String,
  payer_address: Schema.NullOr(Schema.String),
  pay_to: Schema.String,
  nonce: Schema.NullOr(Schema.String),
  transaction: Schema.NullOr(Schema.String),
  failure_code: Schema.NullOr(Schema.String),
  failure_category: Schema.NullOr(Schema.Literal("declined", "cap", "verification", "settlement")),
  failure_reasons: Schema.NullOr(TextArray),
  failure_message: Schema.NullOr(Schema.String),
  spent_at: Timestamp,
  settled_at: NullableTimestamp,
  created_at: Timestamp
})
export type PaymentRow = typeof PaymentRow.Type

/** Columns of a challenge over the bare table (`RETURNING` of the flows' own statements). */
export const CHALLENGE_COLUMNS = `id, org_id, amount::text AS amount, asset, network, pay_to, payer_address, description, nonce,
  max_timeout_seconds, expires_at, payment_id, paid_at, created_at, deliver_to, sent_email_id`
/** Columns of a payment over the bare table. */
export const PAYMENT_COLUMNS = `id, challenge_id, rail, payer_org_id, payee_org_id, status, amount::text AS amount, asset, network,
  payer_address, pay_to, nonce, transaction, failure_code, failure_category, failure_reasons, failure_message, spent_at,
  settled_at, created_at`

/** Decodes a statement's challenge rows; a row that does not match dies naming it. */
export const challengeRows = allRows(ChallengeRow, "payment challenge")
/** Decodes a statement's payment rows. */
export const paymentRows = allRows(PaymentRow, "payment")

/** Which challenge holds a payer's nonce, and whether a nonce is taken by another challenge. */
export const NonceHolderRow = Schema.Struct({ challenge_id: Schema.String })
export const NonceTakenRow = Schema.Struct({ taken: Schema.Boolean })
