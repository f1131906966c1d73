/**
 * Webhook signing, shared by test sends, deliveries and replays:
 * `Mailroom-Signature: t=<unix-seconds>,v1=<hex>` (and the same value in `Legacy-Signature`) where
 * `hex = HMAC-SHA256(secret as UTF-8, "<t>.<raw body>")` in lowercase hex. While a rotated-out
 * secret is still in its grace period the header carries one `v1` per secret, the current one
 * first (`t=…,v1=<new>,v1=<old>`): Stripe-style verifiers accept a header when any `v1` matches.
 */
import { createHmac, timingSafeEqual } from "node:crypto"

export const SIGNATURE_HEADER = "Mailroom-Signature"
export const LEGACY_SIGNATURE_HEADER = "Legacy-Signature"
export const TOLERANCE_SECONDS = 300

/** The hex HMAC of `<t>.<body>`; the secret is used as a UTF-8 string, never base64-decoded. */
export const signatureHex = (secret: string, body: string | Uint8Array, t: number): string =>
  createHmac("sha256", Buffer.from(secret, "utf8"))
    .update(`${t}.`)
    .update(typeof body === "string" ? Buffer.from(body, "utf8") : body)
    .digest("hex")

/** One secret, or the secrets that sign together (current first, then any still in grace). */
export type SigningSecrets = string | ReadonlyArray<string>

/** The header value for a body signed at `t` (Unix seconds): one `v1` per secret, in order. */
export const sign = (secrets: SigningSecrets, body: string | Uint8Array, t: number): string => {
  const list = typeof secrets === "string" ? [secrets] : secrets
  return [`t=${t}`, ...list.map((s) => `v1=${signatureHex(s, body, t)}`)].join(",")
}

/** Both signature headers with the same value. */
export const signatureHeaders = (secrets: SigningSecrets, body: string | Uint8Array, t: number): Record<string, string> => {
  const value = sign(secrets, body, t)
  return { [SIGNATURE_HEADER]: value, [LEGACY_SIGNATURE_HEADER]: value }
}

export type VerifyResult =
  | { readonly ok: true; readonly t: number }
  | { readonly ok: false; readonly reason: "malformed" | "timestamp_out_of_tolerance" | "signature_mismatch" }

/** Parses `t=…,v1=…` (several `v1` entries allowed, as during a secret rotation). */
export const parseHeader = (header: string): { t: number; v1: ReadonlyArray<string> } | undefined => {
  let t: number | undefined
  const v1: Array<string> = []
  for (const part of header.split(",")) {
    const eq = part.indexOf("=")
    if (eq < 0) continue
    const k = part.slice(0, eq).trim()
    const v = part.slice(eq + 1).trim()
    if (k === "t" && /^\d{1,12}$/.test(v)) t = Number(v)
    else if (k === "v1" && /^[0-9a-f]{64}$/i.test(v)) v1.push(v.toLowerCase())
  }
  return t === undefined || v1.length === 0 ? undefined : { t, v1 }
}

/**
 * Verifies a signature header against the raw body: `t` within `toleranceSeconds` of `nowSeconds`
 * (either direction) and a constant-time match of an expected `v1`.
 */
export const verify = (
  secret: string,
  body: string | Uint8Array,
  header: string,
  nowSeconds: number,
  toleranceSeconds = TOLERANCE_SECONDS
): VerifyResult => {
  const parsed = parseHeader(header)
  if (parsed === undefined) return { ok: false, reason: "malformed" }
  if (Math.abs(nowSeconds - parsed.t) > toleranceSeconds) return { ok: false, reason: "timestamp_out_of_tolerance" }
  const expected = Buffer.from(signatureHex(secret, body, parsed.t), "hex")
  let match = false
  for (const candidate of parsed.v1) {
    // Every candidate is compared in full so timing does not reveal which one matched.
    if (timingSafeEqual(expected, Buffer.from(candidate, "hex"))) match = true
  }
  return match ? { ok: true, t: parsed.t } : { ok: false, reason: "signature_mismatch" }
}
