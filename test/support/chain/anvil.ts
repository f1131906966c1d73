/**
 * A real local chain for payment tests and benchmarks: anvil from the npm `@foundry-rs/anvil`
 * package (its platform binary), started with Base Sepolia's chain id, with the EIP-3009 test token
 * (`TestUsdc.sol`, bytecode in `TestUsdc.json`) placed at Base Sepolia's USDC address.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { readFileSync } from "node:fs"
import { createRequire } from "node:module"
import { dirname, join } from "node:path"
import { createServer } from "node:net"
import {
  type Address,
  createPublicClient,
  createWalletClient,
  type Hex,
  http,
  parseAbi,
  publicActions
} from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { baseSepolia } from "viem/chains"

export const USDC = "0x036CbD53842c5426634e7929541eC2318f3dCF7e" as const
export const CHAIN_ID = 84532

const TOKEN = JSON.parse(readFileSync(new URL("./TestUsdc.json", import.meta.url), "utf8")) as { runtimeBytecode: Hex }

export const tokenAbi = parseAbi([
  "function balanceOf(address) view returns (uint256)",
  "function mint(address to, uint256 value)",
  "function authorizationState(address, bytes32) view returns (bool)",
  "event Transfer(address indexed from, address indexed to, uint256 value)"
])

/** The anvil binary that `@foundry-rs/anvil` installed for this platform. */
export const anvilBinary = (): string => {
  const require = createRequire(import.meta.url)
  const arch = process.arch === "x64" ? "amd64" : process.arch
  const pkg = `@foundry-rs/anvil-${process.platform}-${arch}`
  return join(dirname(require.resolve(`${pkg}/package.json`)), "bin", "anvil")
}

const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const srv = createServer()
    srv.once("error", reject)
    srv.listen(0, "127.0.0.1", () => {
      const a = srv.address()
      const port = typeof a === "object" && a !== null ? a.port : 0
      srv.close(() => resolve(port))
    })
  })

export interface Chain {
  readonly rpcUrl: string
  readonly stop: () => void
  /** A new key whose account holds `eth` ether for gas (0 for none). */
  readonly newAccount: (eth?: bigint) => Promise<{ key: Hex; address: Address }>
  readonly mint: (to: Address, atomic: bigint) => Promise<void>
  readonly balanceOf: (who: Address) => Promise<bigint>
  readonly authorizationUsed: (from: Address, nonce: Hex) => Promise<boolean>
  /** The receipt of a transaction, or null when the chain never saw it. */
  readonly receipt: (hash: Hex) => Promise<{ status: string; blockNumber: bigint } | null>
  /** Moves the chain's clock (the next block's timestamp) to `unixSeconds`. */
  readonly setNextBlockTime: (unixSeconds: number) => Promise<void>
}

export const startAnvil = async (): Promise<Chain> => {
  let child: ChildProcess | undefined
  let port = 0
  for (let tries = 0; tries < 5 && child === undefined; tries++) {
    port = await freePort()
    const proc = spawn(anvilBinary(), ["--chain-id", String(CHAIN_ID), "--port", String(port), "--host", "127.0.0.1", "--silent"], {
      stdio: ["ignore", "ignore", "pipe"]
    })
    const ready = await waitForRpc(`http://127.0.0.1:${port}`, proc)
    if (ready) child = proc
    else proc.kill("SIGKILL")
  }
  if (child === undefined) throw new Error("anvil did not start")
  const rpcUrl = `http://127.0.0.1:${port}`
  const transport = http(rpcUrl)
  const pub = createPublicClient({ chain: baseSepolia, transport })
  const rpc = (method: string, params: ReadonlyArray<unknown>) =>
    pub.request({ method: method as "eth_chainId", params: params as unknown as undefined })

  await rpc("anvil_setCode", [USDC, TOKEN.runtimeBytecode])
  const minterKey = generatePrivateKey()
  const minter = privateKeyToAccount(minterKey)
  await rpc("anvil_setBalance", [minter.address, `0x${(10n ** 21n).toString(16)}`])
  const wallet = createWalletClient({ account: minter, chain: baseSepolia, transport }).extend(publicActions)

  const proc = child
  return {
    rpcUrl,
    stop: () => {
      proc.kill("SIGKILL")
    },
    newAccount: async (eth = 0n) => {
      const key = generatePrivateKey()
      const address = privateKeyToAccount(key).address
      if (eth > 0n) await rpc("anvil_setBalance", [address, `0x${(eth * 10n ** 18n).toString(16)}`])
      return { key, address }
    },
    mint: async (to, atomic) => {
      const hash = await wallet.writeContract({ address: USDC, abi: tokenAbi, functionName: "mint", args: [to, atomic] })
      await wallet.waitForTransactionReceipt({ hash })
    },
    balanceOf: (who) => pub.readContract({ address: USDC, abi: tokenAbi, functionName: "balanceOf", args: [who] }),
    authorizationUsed: (from, nonce) =>
      pub.readContract({ address: USDC, abi: tokenAbi, functionName: "authorizationState", args: [from, nonce] }),
    receipt: async (hash) => {
      try {
        const r = await pub.getTransactionReceipt({ hash })
        return { status: r.status, blockNumber: r.blockNumber }
      } catch {
        return null
      }
    },
    setNextBlockTime: async (unixSeconds) => {
      await rpc("evm_setNextBlockTimestamp", [unixSeconds])
    }
  }
}

const waitForRpc = async (url: string, proc: ChildProcess): Promise<boolean> => {
  let exited = false
  proc.once("exit", () => {
    exited = true
  })
  const end = Date.now() + 20_000
  while (Date.now() < end && !exited) {
    try {
      const res = await fetch(url, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "eth_chainId", params: [] })
      })
      if (res.ok) return true
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 50))
  }
  return false
}
