/**
 * The payer's side of x402 `exact` on EVM, as the CLI runs it locally: an EIP-3009
 * `TransferWithAuthorization` for exactly what a challenge asks (its amount, payee and nonce), valid
 * from 10 minutes ago until `maxTimeoutSeconds` from now, signed with EIP-712 under the asset's
 * domain. The private key is used here and never sent anywhere.
 */
import { getAddress, type Hex } from "viem"
import { privateKeyToAccount } from "viem/accounts"
import { authorizationTypes } from "./Verifier.js"

export interface SignableRequirements {
  readonly network: string
  readonly asset: string
  readonly amount: string
  readonly payTo: string
  readonly maxTimeoutSeconds: number
  readonly extra: { readonly name: string; readonly version: string; readonly chainId: number; readonly nonce: string }
}

export const PRIVATE_KEY = /^0x[0-9a-fA-F]{64}$/

export const signChallenge = async (key: Hex, req: SignableRequirements, nowSeconds: number) => {
  const account = privateKeyToAccount(key)
  const now = Math.floor(nowSeconds)
  const authorization = {
    from: account.address,
    to: getAddress(req.payTo),
    value: req.amount,
    validAfter: String(now - 600),
    validBefore: String(now + req.maxTimeoutSeconds),
    nonce: req.extra.nonce
  }
  const signature = await account.signTypedData({
    domain: { name: req.extra.name, version: req.extra.version, chainId: req.extra.chainId, verifyingContract: getAddress(req.asset) },
    types: authorizationTypes,
    primaryType: "TransferWithAuthorization",
    message: {
      from: authorization.from,
      to: authorization.to,
      value: BigInt(authorization.value),
      validAfter: BigInt(authorization.validAfter),
      validBefore: BigInt(authorization.validBefore),
      nonce: authorization.nonce as Hex
    }
  })
  return { x402Version: 2 as const, accepted: { scheme: "exact" as const, ...req }, payload: { authorization, signature } }
}
