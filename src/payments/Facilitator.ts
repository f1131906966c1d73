/**
 * Settlement through an x402 facilitator, with every outcome classified into the contract's four
 * settlement reasons:
 * - built-in (`X402_RPC_URL` + `X402_FACILITATOR_PRIVATE_KEY`): @x402/evm's `exact` scheme, which
 *   broadcasts `transferWithAuthorization` from the facilitator's account and waits for the receipt;
 * - HTTP (`X402_FACILITATOR_URL`): @x402/core's `HTTPFacilitatorClient` (`POST /settle`);
 * - neither: every settlement is `settlement_misconfigured`.
 *
 * Classification: the payer's token balance too low → `insufficient_funds`; the chain or the
 * facilitator not reached, answering 429/5xx gateway errors, or too slow → `facilitator_unavailable`;
 * the operator's side broken (no gas on the facilitator key, RPC on another chain, no token at the
 * asset address, the facilitator refusing our credentials) → `settlement_misconfigured`; anything
 * else → `settlement_failed`.
 */
import { HTTPFacilitatorClient } from "@x402/core/http"
import type { PaymentPayload, PaymentRequirements, SettleResponse } from "@x402/core/types"
import { toFacilitatorEvmSigner, type FacilitatorEvmSigner } from "@x402/evm"
import { ExactEvmScheme } from "@x402/evm/exact/facilitator"
import { Duration, Effect, Option, Redacted } from "effect"
import {
  BaseError,
  createWalletClient,
  defineChain,
  HttpRequestError,
  InsufficientFundsError,
  http,
  nonceManager,
  publicActions,
  TimeoutError,
  verifyTypedData
} from "viem"
import { privateKeyToAccount } from "viem/accounts"
import { AppConfig } from "../platform/Config.js"
import type { SettlementReason } from "./Failures.js"
import { networkInfo } from "./Networks.js"

export type SettleOutcome =
  | { readonly _tag: "Settled"; readonly transaction: string }
  | { readonly _tag: "Failed"; readonly reason: SettlementReason; readonly detail: string }

const failed = (reason: SettlementReason, detail: string): SettleOutcome => ({ _tag: "Failed", reason, detail })

const TX_HASH = /^0x[0-9a-fA-F]{64}$/

/** Facilitator error reasons (x402 `errorReason`) that mean the operator's setup is wrong. */
const MISCONFIGURED = new Set([
  "asset_not_deployed_contract",
  "invalid_exact_evm_eip3009_not_supported",
  "invalid_exact_evm_token_name_mismatch",
  "invalid_exact_evm_token_version_mismatch",
  "invalid_exact_evm_missing_eip712_domain",
  "invalid_exact_evm_network_mismatch",
  "unsupported_scheme",
  "invalid_network"
])

const byReason = (errorReason: string | undefined, detail: string): SettleOutcome => {
  const r = errorReason ?? ""
  if (/insufficient_(balance|funds)/.test(r)) return failed("insufficient_funds", detail)
  if (MISCONFIGURED.has(r)) return failed("settlement_misconfigured", detail)
  // The receipt did not arrive in time: the chain or the facilitator is slow.
  if (r === "settlement_pending") return failed("facilitator_unavailable", detail)
  return failed("settlement_failed", detail)
}

const describe = (r: SettleResponse) => [r.errorReason, r.errorMessage?.split("\n")[0]].filter((s) => s !== undefined && s !== "").join(": ")

/** What went wrong inside one built-in settlement, learnt from the errors its chain calls threw. */
interface Trace {
  transport: boolean
  gas: boolean
}

const isTransport = (e: unknown) =>
  e instanceof BaseError
    ? e.walk((x) => x instanceof HttpRequestError || x instanceof TimeoutError) !== null
    : /fetch failed|ECONNREFUSED|ECONNRESET|socket hang up/i.test(String(e))

const isOutOfGas = (e: unknown) => e instanceof BaseError && e.walk((x) => x instanceof InsufficientFundsError) !== null

/** Every chain call of the signer, recording transport failures and a facilitator account without gas. */
const traced = (base: FacilitatorEvmSigner, trace: Trace): FacilitatorEvmSigner => {
  const wrap = <A extends Array<unknown>, R>(f: (...a: A) => Promise<R>) => async (...a: A): Promise<R> => {
    try {
      return await f(...a)
    } catch (e) {
      if (isTransport(e)) trace.transport = true
      if (isOutOfGas(e)) trace.gas = true
      throw e
    }
  }
  return {
    getAddresses: () => base.getAddresses(),
    readContract: wrap((args) => base.readContract(args)),
    // Our verifier already recovered an externally owned account's signature: recover it again
    // locally rather than spend a chain call on it.
    verifyTypedData: wrap((args) =>
      verifyTypedData(args as unknown as Parameters<typeof verifyTypedData>[0])
    ),
    writeContract: wrap((args) => base.writeContract(args)),
    sendTransaction: wrap((args) => base.sendTransaction(args)),
    waitForTransactionReceipt: wrap((args) => base.waitForTransactionReceipt(args)),
    getCode: wrap((args) => base.getCode(args))
  }
}

export class Facilitator extends Effect.Service<Facilitator>()("mailroom/payments/Facilitator", {
  effect: Effect.gen(function*() {
    const config = yield* AppConfig
    const timeoutMs = Duration.toMillis(config.x402SettleTimeout)

    const withTimeout = (settle: Effect.Effect<SettleOutcome>) =>
      settle.pipe(
        Effect.timeoutTo({
          duration: config.x402SettleTimeout,
          onSuccess: (o) => o,
          onTimeout: () => failed("facilitator_unavailable", `no settlement answer within ${timeoutMs} ms`)
        })
      )

    const builtIn = (rpcUrl: string, key: Redacted.Redacted<string>) => {
      // Settlements run concurrently from one account: the nonce manager hands each broadcast its
      // own transaction nonce (without it, two at once reuse the pending count and one is refused).
      // Two processes sharing one key can still collide: give each its own key, or use an HTTP facilitator.
      const account = privateKeyToAccount(Redacted.value(key) as `0x${string}`, { nonceManager })
      let chainId: number | undefined
      const clientFor = (id: number) =>
        createWalletClient({
          account,
          chain: defineChain({
            id,
            name: `eip155:${id}`,
            nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
            rpcUrls: { default: { http: [rpcUrl] } }
          }),
          transport: http(rpcUrl, { timeout: timeoutMs, retryCount: 0 }),
          // viem polls receipts every 4 s by default; a settlement waits for its receipt.
          pollingInterval: 250
        }).extend(publicActions)
      const clients = new Map<number, ReturnType<typeof clientFor>>()

      return (payload: PaymentPayload, requirements: PaymentRequirements) =>
        Effect.gen(function*() {
          const info = networkInfo(requirements.network)
          if (info === undefined) return failed("settlement_misconfigured", `no chain is known for ${requirements.network}`)
          if (chainId === undefined) {
            const probe = yield* Effect.either(Effect.tryPromise(() => clientFor(info.chainId).getChainId()))
            if (probe._tag === "Left") return failed("facilitator_unavailable", `the chain's RPC endpoint did not answer: ${String(probe.left.error).split("\n")[0]}`)
            chainId = probe.right
          }
          if (chainId !== info.chainId) {
            return failed(
              "settlement_misconfigured",
              `X402_RPC_URL serves chain ${chainId}, not ${requirements.network}`
            )
          }
          let client = clients.get(chainId)
          if (client === undefined) {
            client = clientFor(chainId)
            clients.set(chainId, client)
          }
          const trace: Trace = { transport: false, gas: false }
          const signer = traced(
            toFacilitatorEvmSigner({ ...client, address: account.address } as Parameters<typeof toFacilitatorEvmSigner>[0], {
              confirmationTimeoutMs: timeoutMs
            }),
            trace
          )
          const scheme = new ExactEvmScheme(signer)
          const result = yield* Effect.either(Effect.tryPromise(() => scheme.settle(payload, requirements)))
          if (result._tag === "Right" && result.right.success && TX_HASH.test(result.right.transaction)) {
            return { _tag: "Settled", transaction: result.right.transaction } as const
          }
          const detail = result._tag === "Left" ? String(result.left.error).split("\n")[0]! : describe(result.right)
          if (trace.gas) {
            return failed("settlement_misconfigured", `the facilitator account ${account.address} cannot pay for gas`)
          }
          if (trace.transport) return failed("facilitator_unavailable", `the chain's RPC endpoint did not answer: ${detail}`)
          if (result._tag === "Left") return failed("settlement_failed", detail)
          return byReason(result.right.errorReason, detail)
        })
    }

    const overHttp = (url: string) => {
      const client = new HTTPFacilitatorClient({ url, timeoutMs })
      return (payload: PaymentPayload, requirements: PaymentRequirements) =>
        Effect.tryPromise(() => client.settle(payload, requirements)).pipe(
          Effect.map((r): SettleOutcome =>
            r.success && TX_HASH.test(r.transaction)
              ? { _tag: "Settled", transaction: r.transaction }
              : byReason(r.errorReason, describe(r))
          ),
          Effect.catchAll(({ error }) => Effect.succeed(classifyHttpError(error)))
        )
    }

    const settleWith = Option.match(config.x402FacilitatorUrl, {
      onSome: overHttp,
      onNone: () =>
        Option.isSome(config.x402RpcUrl) && Option.isSome(config.x402FacilitatorPrivateKey)
          ? builtIn(config.x402RpcUrl.value, config.x402FacilitatorPrivateKey.value)
          : () =>
            Effect.succeed(
              failed(
                "settlement_misconfigured",
                "no facilitator is configured (X402_FACILITATOR_URL, or X402_RPC_URL with X402_FACILITATOR_PRIVATE_KEY)"
              )
            )
    })

    const settle = (payload: PaymentPayload, requirements: PaymentRequirements): Effect.Effect<SettleOutcome> =>
      withTimeout(settleWith(payload, requirements)).pipe(
        Effect.catchAllDefect((d) => Effect.succeed(failed("settlement_failed", String(d).split("\n")[0]!))),
        Effect.withSpan("Facilitator.settle")
      )

    return {
      settle,
      kind: Option.isSome(config.x402FacilitatorUrl) ? "http" as const : Option.isSome(config.x402RpcUrl) ? "built-in" as const : "none" as const
    } as const
  })
}) {}

const STATUS = /\((\d{3})\)/

/** An HTTP facilitator's failure, from what HTTPFacilitatorClient threw. */
const classifyHttpError = (e: unknown): SettleOutcome => {
  const message = String(e instanceof Error ? e.message : e).split("\n")[0]!
  const named = e as { name?: string; statusCode?: number; errorReason?: string }
  if (named.name === "FacilitatorTimeoutError") return failed("facilitator_unavailable", message)
  const status = typeof named.statusCode === "number" ? named.statusCode : Number(STATUS.exec(message)?.[1] ?? NaN)
  if (status === 401 || status === 403) return failed("settlement_misconfigured", `the facilitator refused our request: ${message}`)
  if (named.errorReason !== undefined && /insufficient_(balance|funds)/.test(named.errorReason)) {
    return failed("insufficient_funds", message)
  }
  if (status === 429 || status === 502 || status === 503 || status === 504) return failed("facilitator_unavailable", message)
  if (Number.isNaN(status) && named.name !== "FacilitatorResponseError" && isTransport(e instanceof TypeError ? e : message)) {
    return failed("facilitator_unavailable", message)
  }
  if (Number.isNaN(status) && e instanceof TypeError) return failed("facilitator_unavailable", message)
  return named.errorReason !== undefined ? byReason(named.errorReason, message) : failed("settlement_failed", message)
}
