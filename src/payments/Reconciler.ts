/**
 * Ends payments that a stopped process left `settling`. A live settlement is bounded by
 * X402_SETTLE_TIMEOUT, so a payment still settling a minute past it (service clock, from when the
 * payment was claimed) was abandoned mid-way: its transaction may or may not have been broadcast.
 * Only the chain can tell, so the chain decides:
 * - the authorization is used (`authorizationState(payer, nonce)` of the asset) → settled, with the
 *   transaction of its `AuthorizationUsed` event when the RPC finds it in recent blocks (else none);
 * - unused, and the chain's latest block is at or past the authorization's validBefore → it can never
 *   be used: failed (`settlement_failed`), the challenge released for a new payment;
 * - unused and still valid → looked at again on a later pass (a broadcast transaction may yet land).
 * The outcome is recorded and announced as the stopped process would have (`resolveSettling`), once:
 * it applies only while the payment is still settling. It needs a chain to read: the built-in
 * facilitator's X402_RPC_URL. With an HTTP facilitator the service cannot tell what happened, and
 * such a payment stays `settling` (logged) until an operator decides.
 */
import { SqlClient } from "@effect/sql"
import { Clock, Duration, Effect, Layer, Option, Schedule, Schema } from "effect"
import { type Address, createPublicClient, type Hex, http, parseAbi, parseAbiItem } from "viem"
import { AppConfig } from "../platform/Config.js"
import { allRows, NullableTimestamp, Timestamp } from "../platform/Rows.js"
import { networkInfo } from "./Networks.js"
import { PaymentsService } from "./Service.js"

const tokenAbi = parseAbi(["function authorizationState(address authorizer, bytes32 nonce) view returns (bool)"])
const authorizationUsed = parseAbiItem("event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)")

/** How far back the transaction of a used authorization is looked for (RPCs bound `eth_getLogs` ranges). */
const LOG_LOOKBACK_BLOCKS = 5_000n
/** A payment whose validBefore was not recorded (claimed before it was) is taken as valid for the longest window. */
const LONGEST_WINDOW_MS = 86_400_000

/** A payment left settling: the claim always recorded its payer and nonce. */
const Stuck = Schema.Struct({
  id: Schema.String,
  network: Schema.String,
  asset: Schema.String,
  payer_address: Schema.String,
  nonce: Schema.String,
  valid_before: NullableTimestamp,
  spent_at: Timestamp
})
type Stuck = typeof Stuck.Type

type ChainVerdict =
  | { readonly kind: "used"; readonly transaction: string | null }
  | { readonly kind: "expired" }
  | { readonly kind: "undecided" }

export interface ReconcilerOptions {
  /** Time between passes (default 30 s). */
  readonly pollMs?: number
}

export class SettlementReconciler extends Effect.Service<SettlementReconciler>()("mailroom/payments/SettlementReconciler", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const config = yield* AppConfig
    const payments = yield* PaymentsService
    const timeoutMs = Duration.toMillis(config.x402SettleTimeout)
    const abandonedAfterMs = timeoutMs + 60_000
    const client = Option.map(config.x402RpcUrl, (url) => createPublicClient({ transport: http(url, { timeout: timeoutMs, retryCount: 0 }) }))

    const verdictOf = (rpc: Option.Option.Value<typeof client>, p: Stuck) =>
      Effect.tryPromise(async (): Promise<ChainVerdict> => {
        const info = networkInfo(p.network)
        if (info === undefined || (await rpc.getChainId()) !== info.chainId) return { kind: "undecided" }
        const payer = p.payer_address as Address
        const nonce = p.nonce as Hex
        const used = await rpc.readContract({ address: p.asset as Address, abi: tokenAbi, functionName: "authorizationState", args: [payer, nonce] })
        if (used) {
          const latest = await rpc.getBlockNumber()
          const logs = await rpc.getLogs({
            address: p.asset as Address,
            event: authorizationUsed,
            args: { authorizer: payer, nonce },
            fromBlock: latest > LOG_LOOKBACK_BLOCKS ? latest - LOG_LOOKBACK_BLOCKS : 0n,
            toBlock: latest
          }).catch(() => [])
          return { kind: "used", transaction: logs.at(-1)?.transactionHash ?? null }
        }
        const block = await rpc.getBlock({ blockTag: "latest" })
        const validBefore = p.valid_before?.getTime() ?? p.spent_at.getTime() + LONGEST_WINDOW_MS
        return block.timestamp * 1000n >= BigInt(validBefore) ? { kind: "expired" } : { kind: "undecided" }
      })

    /** One pass over the abandoned settling payments; answers how many it ended. */
    const pass = Effect.gen(function*() {
      const nowMs = yield* Clock.currentTimeMillis
      const stuck = yield* sql`
        SELECT id, network, asset, payer_address, nonce, valid_before, spent_at FROM payments
        WHERE status = 'settling' AND spent_at < ${new Date(nowMs - abandonedAfterMs)}
        ORDER BY spent_at LIMIT 100`.pipe(allRows(Stuck, "settling payments"), Effect.orDie)
      if (stuck.length === 0) return 0
      if (Option.isNone(client)) {
        yield* Effect.logWarning(
          `${stuck.length} payment(s) left settling by a stopped process; without X402_RPC_URL the chain cannot be read to end them`
        )
        return 0
      }
      let ended = 0
      for (const p of stuck) {
        const verdict = yield* Effect.either(verdictOf(client.value, p))
        if (verdict._tag === "Left" || verdict.right.kind === "undecided") continue
        const outcome = verdict.right.kind === "used"
          ? { _tag: "Settled" as const, transaction: verdict.right.transaction }
          : {
            _tag: "Failed" as const,
            reason: "settlement_failed" as const,
            detail: "the service stopped while settling and the authorization expired unused on chain; sign a new payment"
          }
        const done = yield* payments.resolveSettling(p.id, outcome)
        if (Option.isSome(done)) ended++
      }
      return ended
    })

    return { pass } as const
  })
}) {}

/** The reconciler's sweep, every `pollMs` in every process (ending a payment is conditional, so processes may overlap). */
export const SettlementReconcilerLive = (options: ReconcilerOptions = {}) =>
  Layer.scopedDiscard(Effect.gen(function*() {
    const reconciler = yield* SettlementReconciler
    yield* reconciler.pass.pipe(
      Effect.catchAllCause((cause) => Effect.logError("payments: a reconciliation pass failed", cause)),
      Effect.repeat(Schedule.spaced(Duration.millis(options.pollMs ?? 30_000))),
      Effect.forkScoped
    )
  })).pipe(Layer.provide(SettlementReconciler.Default))
