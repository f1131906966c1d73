/**
 * The networks the service settles on (CAIP-2 ids) and their USDC contract: the EIP-712 domain a
 * payer signs under is `{name, version, chainId, verifyingContract: asset}`.
 */
import type { Address } from "viem"
import { USDC_DECIMALS } from "./Money.js"

export interface NetworkInfo {
  readonly network: string
  readonly chainId: number
  readonly asset: Address
  readonly assetName: string
  readonly assetVersion: string
  readonly decimals: number
}

export const NETWORKS: Readonly<Record<string, NetworkInfo>> = {
  "eip155:84532": {
    network: "eip155:84532",
    chainId: 84532,
    asset: "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
    assetName: "USDC",
    assetVersion: "2",
    decimals: USDC_DECIMALS
  },
  "eip155:8453": {
    network: "eip155:8453",
    chainId: 8453,
    asset: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
    assetName: "USD Coin",
    assetVersion: "2",
    decimals: USDC_DECIMALS
  }
}

export const DEFAULT_NETWORK = "eip155:84532"

export const networkInfo = (network: string): NetworkInfo | undefined =>
  Object.prototype.hasOwnProperty.call(NETWORKS, network) ? NETWORKS[network] : undefined
