/**
 * EVM addresses as the API takes them. EIP-55 mixes case only as a checksum, and many tools (block
 * explorers' copy buttons, other languages' libraries, people) write addresses all lowercase or all
 * uppercase: those carry no checksum and are accepted as they are. Mixed case is a checksum claim, and
 * one that does not hold is a typo to refuse, never to "fix". What is stored and shown is always the
 * EIP-55 form.
 */
import { type Address, getAddress } from "viem"

const HEX40 = /^0x[0-9a-fA-F]{40}$/
const ZERO = /^0x0{40}$/i

export type AddressProblem = "not_an_address" | "bad_checksum" | "zero_address"

/** The EIP-55 form of `value`, or why it is not an address the API takes. */
export const parseEvmAddress = (value: string): { readonly ok: true; readonly address: Address } | {
  readonly ok: false
  readonly problem: AddressProblem
} => {
  if (!HEX40.test(value)) return { ok: false, problem: "not_an_address" }
  const digits = value.slice(2)
  const claimsChecksum = digits !== digits.toLowerCase() && digits !== digits.toUpperCase()
  const address = getAddress(value.toLowerCase())
  if (claimsChecksum && address !== value) return { ok: false, problem: "bad_checksum" }
  if (ZERO.test(value)) return { ok: false, problem: "zero_address" }
  return { ok: true, address }
}

/** The EIP-55 form, or undefined (not an address, a wrong mixed-case checksum, or the zero address). */
export const evmAddress = (value: string): Address | undefined => {
  const r = parseEvmAddress(value)
  return r.ok ? r.address : undefined
}

/** What a refusal says, naming the way to fix it. */
export const addressProblemText = (problem: AddressProblem): string => {
  switch (problem) {
    case "not_an_address":
      return "must be an EVM address: 0x followed by 40 hex digits"
    case "bad_checksum":
      return "mixed case must be a valid EIP-55 checksum (it is not: a typo?); write it all lowercase or check it"
    case "zero_address":
      return "the zero address cannot be paid"
  }
}

/** The EIP-55 form of an address already stored (older rows may be lowercase); other text as it is. */
export const displayAddress = (value: string): string => (HEX40.test(value) ? getAddress(value.toLowerCase()) : value)
