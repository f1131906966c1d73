/**
 * Our verifier of an x402 `PaymentPayload` (scheme `exact`, an EIP-3009 `TransferWithAuthorization`
 * signed with EIP-712) against the challenge it claims to pay. It reports every check that fails,
 * not only the first, so a payer fixes everything in one round. Pure: the signature is recovered
 * locally (ECDSA, externally owned accounts), no chain is read; what only the chain knows (balance,
 * nonce already used) is settlement's business.
 */
import { getAddress, isAddress, recoverTypedDataAddress, type Address, type Hex } from "viem"

export const VERIFICATION_REASONS = [
  "signature_unrecoverable",
  "signer_mismatch",
  "invalid_from_address",
  "invalid_to_address",
  "payer_mismatch",
  "payto_mismatch",
  "self_send",
  "amount_mismatch",
  "verify_non_positive_amount",
  "nonce_mismatch",
  "degenerate_window",
  "window_too_wide",
  "insufficient_headroom",
  "not_yet_valid",
  "malformed_payload",
  "unsupported_network"
] as const
export type VerificationReason = (typeof VERIFICATION_REASONS)[number]

/**
 * An authorization may stay settleable for at most this long: validBefore − max(validAfter, now). Counted
 * from now, not from validAfter, because standard payers sign `validAfter: 0` (valid since forever):
 * what is a liability for the payer is how long the signature can still be used.
 */
export const MAX_WINDOW_SECONDS = 86_400
/** Settlement needs this long before the authorization's validBefore. */
export const HEADROOM_SECONDS = 30

export const authorizationTypes = {
  TransferWithAuthorization: [
    { name: "from", type: "address" },
    { name: "to", type: "address" },
    { name: "value", type: "uint256" },
    { name: "validAfter", type: "uint256" },
    { name: "validBefore", type: "uint256" },
    { name: "nonce", type: "bytes32" }
  ]
} as const

/** What a payload is checked against: the recorded challenge. */
export interface ChallengeTerms {
  readonly network: string
  readonly chainId: number
  readonly asset: Address
  readonly assetName: string
  readonly assetVersion: string
  readonly amount: bigint
  readonly payTo: Address
  /**
   * Whether the authorization's (network, asset, payer, nonce) is bound to another challenge: presented
   * there first, or that challenge's own suggested nonce. Any other bytes32 nonce is accepted (x402
   * payers pick a random one); settlement learns whether the chain has used it.
   */
  readonly nonceBoundElsewhere: boolean
  /** When the challenge names the wallet that must pay. */
  readonly payerAddress: Address | null
}

export interface Authorization {
  readonly from: Address
  readonly to: Address
  readonly value: bigint
  readonly validAfter: bigint
  readonly validBefore: bigint
  readonly nonce: Hex
}

export type Verdict =
  | { readonly ok: true; readonly authorization: Authorization; readonly signature: Hex }
  | {
    readonly ok: false
    readonly reasons: ReadonlyArray<VerificationReason>
    /** The payload's `from`, when it is an address (for records and events). */
    readonly payerAddress: Address | null
    /** The authorization's value, when it is an integer. */
    readonly value: bigint | null
    readonly nonce: Hex | null
  }

const INTEGER = /^-?\d{1,78}$/
const BYTES32 = /^0x[0-9a-fA-F]{64}$/
const SIGNATURE = /^0x[0-9a-fA-F]{130}$/
const UINT256_MAX = 2n ** 256n - 1n
/** Half the order of secp256k1: an `s` above it is the malleable twin of a canonical signature. */
const SECP256K1_HALF_N = 0x7fffffffffffffffffffffffffffffff5d576e7357a4501ddfe92f46681b20a0n

/**
 * Every ECDSA signature has a twin (s → n − s, v flipped) recovering the same signer. EIP-2 made
 * Ethereum transactions refuse the high-s twin, and the token contracts that check EIP-3009
 * signatures with OpenZeppelin's ECDSA refuse it too: such a payload could never settle there, and
 * where it could, it is a second valid form of one authorization. Refused as unrecoverable.
 */
const highS = (signature: string) => BigInt(`0x${signature.slice(66, 130)}`) > SECP256K1_HALF_N
const ZERO = "0x0000000000000000000000000000000000000000"

const isRecord = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)

const address = (u: unknown): Address | null =>
  typeof u === "string" && isAddress(u, { strict: false }) && u.toLowerCase() !== ZERO ? getAddress(u) : null

const integer = (u: unknown): bigint | null => (typeof u === "string" && INTEGER.test(u) ? BigInt(u) : null)

const uint = (n: bigint | null) => n !== null && n >= 0n && n <= UINT256_MAX

const malformed = (partial: { payerAddress?: Address | null } = {}): Verdict => ({
  ok: false,
  reasons: ["malformed_payload"],
  payerAddress: partial.payerAddress ?? null,
  value: null,
  nonce: null
})

/** The `exact` EVM payload's parts, or undefined when its shape is not that of an x402 v2 payload. */
const parts = (payload: unknown) => {
  if (!isRecord(payload) || payload.x402Version !== 2) return undefined
  const accepted = payload.accepted
  const inner = payload.payload
  if (!isRecord(accepted) || !isRecord(inner) || accepted.scheme !== "exact") return undefined
  const auth = inner.authorization
  if (typeof inner.signature !== "string" || !isRecord(auth)) return undefined
  const fields = ["from", "to", "value", "validAfter", "validBefore", "nonce"] as const
  if (!fields.every((f) => typeof auth[f] === "string")) return undefined
  if (typeof accepted.network !== "string") return undefined
  return { accepted, signature: inner.signature, auth: auth as Record<(typeof fields)[number], string> }
}

export const verifyPayment = async (terms: ChallengeTerms, payload: unknown, nowSeconds: number): Promise<Verdict> => {
  const p = parts(payload)
  if (p === undefined) return malformed()
  const { accepted, auth, signature } = p
  const value = integer(auth.value)
  const validAfter = integer(auth.validAfter)
  const validBefore = integer(auth.validBefore)
  const from = address(auth.from)
  if (value === null || validAfter === null || validBefore === null || !BYTES32.test(auth.nonce)) {
    return malformed({ payerAddress: from })
  }
  const nonce = auth.nonce.toLowerCase() as Hex
  const to = address(auth.to)
  const reasons = new Set<VerificationReason>()
  const now = BigInt(Math.floor(nowSeconds))

  const acceptedAsset = typeof accepted.asset === "string" ? accepted.asset.toLowerCase() : null
  if (accepted.network !== terms.network || (acceptedAsset !== null && acceptedAsset !== terms.asset.toLowerCase())) {
    reasons.add("unsupported_network")
  }
  if (from === null) reasons.add("invalid_from_address")
  if (to === null) reasons.add("invalid_to_address")
  if (from !== null && terms.payerAddress !== null && from !== terms.payerAddress) reasons.add("payer_mismatch")
  const acceptedPayTo = typeof accepted.payTo === "string" ? address(accepted.payTo) : null
  if ((to !== null && to !== terms.payTo) || (typeof accepted.payTo === "string" && acceptedPayTo !== terms.payTo)) {
    reasons.add("payto_mismatch")
  }
  if (from !== null && to !== null && from === to) reasons.add("self_send")
  const acceptedAmount = typeof accepted.amount === "string" ? integer(accepted.amount) : null
  if (value !== terms.amount || (typeof accepted.amount === "string" && acceptedAmount !== terms.amount)) {
    reasons.add("amount_mismatch")
  }
  if (value <= 0n) reasons.add("verify_non_positive_amount")
  if (terms.nonceBoundElsewhere) reasons.add("nonce_mismatch")
  if (validBefore <= validAfter) reasons.add("degenerate_window")
  if (validBefore - (validAfter > now ? validAfter : now) > BigInt(MAX_WINDOW_SECONDS)) reasons.add("window_too_wide")
  if (validBefore - now < BigInt(HEADROOM_SECONDS)) reasons.add("insufficient_headroom")
  if (validAfter >= now) reasons.add("not_yet_valid")

  // The signature is judged only over a message that can be encoded: valid addresses and uint256s.
  if (from !== null && to !== null && uint(value) && uint(validAfter) && uint(validBefore)) {
    if (!SIGNATURE.test(signature) || highS(signature)) {
      reasons.add("signature_unrecoverable")
    } else {
      const signer = await recoverTypedDataAddress({
        domain: { name: terms.assetName, version: terms.assetVersion, chainId: terms.chainId, verifyingContract: terms.asset },
        types: authorizationTypes,
        primaryType: "TransferWithAuthorization",
        message: { from, to, value, validAfter, validBefore, nonce },
        signature: signature as Hex
      }).catch(() => null)
      if (signer === null) reasons.add("signature_unrecoverable")
      else if (getAddress(signer) !== from) reasons.add("signer_mismatch")
    }
  }

  if (reasons.size > 0) {
    return {
      ok: false,
      reasons: VERIFICATION_REASONS.filter((r) => reasons.has(r)),
      payerAddress: from,
      value,
      nonce
    }
  }
  return {
    ok: true,
    authorization: { from: from!, to: to!, value, validAfter, validBefore, nonce },
    signature: signature as Hex
  }
}

/** The authorization's `from` and `nonce` as written, when the payload has that shape (nonce bindings are looked up by them). */
export const payloadNonce = (payload: unknown): { readonly from: Address; readonly nonce: Hex } | null => {
  const p = parts(payload)
  if (p === undefined || !BYTES32.test(p.auth.nonce)) return null
  const from = address(p.auth.from)
  return from === null ? null : { from, nonce: p.auth.nonce.toLowerCase() as Hex }
}

/**
 * What a payload's authorization would do, read without judging the signature: who pays, whom, how
 * much, on which network (the payload's `accepted`), or the reasons it cannot be read.
 */
export const readAuthorization = (payload: unknown):
  | {
    readonly ok: true
    readonly from: Address
    readonly to: Address
    readonly value: bigint
    readonly nonce: Hex
    readonly network: string
    readonly asset: string | null
    readonly challengeId: string | null
  }
  | { readonly ok: false; readonly reasons: ReadonlyArray<VerificationReason> } => {
  const p = parts(payload)
  if (p === undefined) return { ok: false, reasons: ["malformed_payload"] }
  const value = integer(p.auth.value)
  if (value === null || !BYTES32.test(p.auth.nonce)) return { ok: false, reasons: ["malformed_payload"] }
  const from = address(p.auth.from)
  const to = address(p.auth.to)
  if (from === null || to === null) {
    return { ok: false, reasons: [...(from === null ? ["invalid_from_address" as const] : []), ...(to === null ? ["invalid_to_address" as const] : [])] }
  }
  const extra = p.accepted.extra
  const named = isRecord(extra) && typeof extra.challengeId === "string" ? extra.challengeId : null
  return {
    ok: true,
    from,
    to,
    value,
    nonce: p.auth.nonce.toLowerCase() as Hex,
    network: p.accepted.network as string,
    asset: typeof p.accepted.asset === "string" ? p.accepted.asset : null,
    challengeId: named
  }
}

/** The amount a payload would move, when it can be read (the spend policy judges it). */
export const payloadValue = (payload: unknown): bigint | null => {
  const p = parts(payload)
  return p === undefined ? null : integer(p.auth.value)
}
