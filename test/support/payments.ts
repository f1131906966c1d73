/**
 * Payment test helpers: a payer's local signing (viem, as the CLI does it), a loopback x402
 * facilitator stub whose answers a test chooses, and one more service instance over the current
 * test database with its own payment configuration (another facilitator, another key).
 */
import { SqlClient } from "@effect/sql"
import { Effect, Layer, Option, Redacted } from "effect"
import { createServer } from "node:http"
import { randomBytes } from "node:crypto"
import { type Address, getAddress, type Hex } from "viem"
import { privateKeyToAccount } from "viem/accounts"
import { DispatcherLive } from "../../src/deliveries/Dispatcher.js"
import { SmtpServerLive } from "../../src/inbound/SmtpServer.js"
import { AppConfig, type AppConfigShape } from "../../src/platform/Config.js"
import { DatabaseLive } from "../../src/platform/Database.js"
import { DeliveryServicesLive, HttpLive, loggerLayer, PlatformServicesLive } from "../../src/Server.js"
import { freePort, retryOnPortConflict } from "./harness.js"

export interface Requirements {
  readonly scheme: string
  readonly network: string
  readonly asset: string
  readonly amount: string
  readonly payTo: string
  readonly maxTimeoutSeconds: number
  readonly extra: { readonly name: string; readonly version: string; readonly chainId: number; readonly nonce: string }
}

export interface SignOverrides {
  readonly from?: string
  readonly to?: string
  readonly value?: string
  readonly validAfter?: string
  readonly validBefore?: string
  readonly nonce?: string
  /** Sign with another key than the one named by `from`. */
  readonly signerKey?: Hex
  readonly signature?: string
  readonly network?: string
}

const types = {
  TransferWithAuthorization: [
    { name: "from", type: "address" },
    { name: "to", type: "address" },
    { name: "value", type: "uint256" },
    { name: "validAfter", type: "uint256" },
    { name: "validBefore", type: "uint256" },
    { name: "nonce", type: "bytes32" }
  ]
} as const

/** An x402 v2 `exact` PaymentPayload for `req`, signed with `key` at `nowSeconds` (the service's clock). */
export const signPayment = async (key: Hex, req: Requirements, nowSeconds: number, o: SignOverrides = {}) => {
  const account = privateKeyToAccount(key)
  const authorization = {
    from: o.from ?? account.address,
    to: o.to ?? req.payTo,
    value: o.value ?? req.amount,
    validAfter: o.validAfter ?? String(Math.floor(nowSeconds) - 600),
    validBefore: o.validBefore ?? String(Math.floor(nowSeconds) + req.maxTimeoutSeconds),
    nonce: o.nonce ?? req.extra.nonce
  }
  const signer = o.signerKey === undefined ? account : privateKeyToAccount(o.signerKey)
  let signature = o.signature
  if (signature === undefined) {
    signature = await signer.signTypedData({
      domain: { name: req.extra.name, version: req.extra.version, chainId: req.extra.chainId, verifyingContract: getAddress(req.asset) },
      types,
      primaryType: "TransferWithAuthorization",
      message: {
        from: getAddress(authorization.from),
        to: getAddress(authorization.to),
        value: BigInt(authorization.value),
        validAfter: BigInt(authorization.validAfter),
        validBefore: BigInt(authorization.validBefore),
        nonce: authorization.nonce as Hex
      }
    })
  }
  return {
    x402Version: 2,
    accepted: { ...req, network: o.network ?? req.network },
    payload: { authorization, signature }
  }
}

export const randomNonce = (): Hex => `0x${randomBytes(32).toString("hex")}`
export const addressOf = (key: Hex): Address => privateKeyToAccount(key).address

/** Grants the `payments` entitlement, as `npm run admin -- grant <org> payments` does. */
export const grantPayments = (orgId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql`INSERT INTO organization_entitlements (org_id, entitlement) VALUES (${orgId}, 'payments') ON CONFLICT DO NOTHING`)

export type StubMode =
  | { readonly kind: "ok" }
  | { readonly kind: "status"; readonly status: number; readonly body: string }
  | { readonly kind: "refuse" }
  | { readonly kind: "hold" }

export interface FacilitatorStub {
  readonly url: string
  mode: StubMode
  readonly settles: Array<{ paymentPayload: unknown; paymentRequirements: unknown }>
  /** Answers every held request with `mode` (as it is then). */
  readonly release: () => void
  readonly close: () => void
}

/** A loopback x402 facilitator: `POST /settle` answers as `mode` says (connection refused when `refuse`). */
export const startFacilitatorStub = async (): Promise<FacilitatorStub> => {
  const held: Array<() => void> = []
  const state: FacilitatorStub = {
    url: "",
    mode: { kind: "ok" },
    settles: [],
    release: () => held.splice(0).forEach((f) => f()),
    close: () => server.close()
  }
  const server = createServer((req, res) => {
    const chunks: Array<Buffer> = []
    req.on("data", (c: Buffer) => chunks.push(c))
    req.on("end", () => {
      const body = JSON.parse(Buffer.concat(chunks).toString("utf8") || "{}") as {
        paymentPayload: { payload?: { authorization?: { from?: string } } }
        paymentRequirements: { network?: string }
      }
      if (state.mode.kind !== "refuse") state.settles.push(body)
      const answer = () => {
        const mode = state.mode
        if (mode.kind === "refuse") {
          req.socket.destroy()
          return
        }
        if (mode.kind === "status") {
          res.writeHead(mode.status, { "content-type": "application/json" })
          res.end(mode.body)
          return
        }
        res.writeHead(200, { "content-type": "application/json" })
        res.end(JSON.stringify({
          success: true,
          transaction: `0x${randomBytes(32).toString("hex")}`,
          network: body.paymentRequirements.network,
          payer: body.paymentPayload.payload?.authorization?.from
        }))
      }
      if (state.mode.kind === "hold") held.push(answer)
      else answer()
    })
  })
  const port = await new Promise<number>((resolve) =>
    server.listen(0, "127.0.0.1", () => {
      const a = server.address()
      resolve(typeof a === "object" && a !== null ? a.port : 0)
    })
  )
  ;(state as { url: string }).url = `http://127.0.0.1:${port}`
  return state
}

/**
 * One more HTTP service (scoped) over the current test database, its configuration changed by
 * `change` (another facilitator or key). PGlite has one connection, so there the services share it.
 */
export const serviceWith = (change: (c: AppConfigShape) => AppConfigShape) =>
  Effect.gen(function*() {
    const base = yield* AppConfig
    const port = yield* Effect.promise(freePort)
    const smtpPort = yield* Effect.promise(freePort)
    const baseUrl = `http://127.0.0.1:${port}`
    const config = change({ ...base, port, smtpPort, publicBaseUrl: baseUrl })
    const services = PlatformServicesLive.pipe(Layer.provideMerge(loggerLayer))
    const server = Layer.mergeAll(HttpLive, SmtpServerLive, DispatcherLive({ concurrency: 8, pollMs: 50 })).pipe(
      Layer.provide(DeliveryServicesLive),
      Layer.provide(services)
    )
    const withDb = Option.isSome(base.databaseUrl) ? server.pipe(Layer.provide(DatabaseLive)) : server
    const sql = yield* SqlClient.SqlClient
    yield* Layer.build(
      withDb.pipe(Layer.provide(Layer.succeed(AppConfig, config)), Layer.provide(Layer.succeed(SqlClient.SqlClient, sql)))
    )
    return { baseUrl }
  }).pipe(Effect.retry(retryOnPortConflict))

export const withHttpFacilitator = (url: string) => (c: AppConfigShape): AppConfigShape => ({
  ...c,
  x402FacilitatorUrl: Option.some(url),
  x402RpcUrl: Option.none(),
  x402FacilitatorPrivateKey: Option.none()
})

export const withBuiltIn = (rpcUrl: string, key: Hex) => (c: AppConfigShape): AppConfigShape => ({
  ...c,
  x402FacilitatorUrl: Option.none(),
  x402RpcUrl: Option.some(rpcUrl),
  x402FacilitatorPrivateKey: Option.some(Redacted.make(key))
})
