/**
 * Amounts: decimal strings on the wire ("1.5"), atomic units (bigint) everywhere else. Conversion is
 * string arithmetic on digits, so no floating point ever touches money.
 */

/** USDC, the one asset the service settles, has 6 decimals. */
export const USDC_DECIMALS = 6

/** A non-negative decimal with at most 6 fraction digits and 18 integer digits. */
export const DECIMAL_PATTERN = /^(0|[1-9]\d{0,17})(\.\d{1,6})?$/

/** "1.5" → 1_500_000n (6 decimals); undefined when the text is not such a decimal. */
export const toAtomic = (text: string, decimals = USDC_DECIMALS): bigint | undefined => {
  if (!DECIMAL_PATTERN.test(text)) return undefined
  const [whole, fraction = ""] = text.split(".") as [string, string?]
  if (fraction.length > decimals) return undefined
  return BigInt(whole) * 10n ** BigInt(decimals) + BigInt(fraction.padEnd(decimals, "0") || "0")
}

/** 1_500_000n → "1.5": the shortest decimal that states the amount exactly. */
export const fromAtomic = (atomic: bigint, decimals = USDC_DECIMALS): string => {
  const negative = atomic < 0n
  const abs = negative ? -atomic : atomic
  const unit = 10n ** BigInt(decimals)
  const whole = abs / unit
  const fraction = (abs % unit).toString().padStart(decimals, "0").replace(/0+$/, "")
  return `${negative ? "-" : ""}${whole}${fraction === "" ? "" : `.${fraction}`}`
}

/** An atomic amount from a database numeric (read as text). */
export const atomicOf = (numeric: string | number | bigint): bigint => BigInt(String(numeric).replace(/\.0+$/, ""))
