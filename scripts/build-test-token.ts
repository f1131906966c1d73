/**
 * Compiles the test chain's EIP-3009 token (`test/support/chain/TestUsdc.sol`) with the npm `solc`
 * compiler (offline, pinned in package.json) and writes its runtime bytecode next to it
 * (`TestUsdc.json`), which the tests place at the network's USDC address with anvil_setCode:
 * `npx tsx scripts/build-test-token.ts`. The output is deterministic (no metadata hash), so a rebuild
 * of the same source gives the same bytes.
 */
import { readFileSync, writeFileSync } from "node:fs"
import { createRequire } from "node:module"
import { join } from "node:path"
import { fileURLToPath } from "node:url"

const DIR = fileURLToPath(new URL("../test/support/chain/", import.meta.url))
const require = createRequire(import.meta.url)
const solc = require("solc") as { compile: (input: string) => string; version: () => string }

const source = readFileSync(join(DIR, "TestUsdc.sol"), "utf8")
const input = {
  language: "Solidity",
  sources: { "TestUsdc.sol": { content: source } },
  settings: {
    optimizer: { enabled: true, runs: 200 },
    evmVersion: "cancun",
    metadata: { bytecodeHash: "none", appendCBOR: false },
    outputSelection: { "*": { "*": ["abi", "evm.deployedBytecode.object"] } }
  }
}
const output = JSON.parse(solc.compile(JSON.stringify(input))) as {
  errors?: Array<{ severity: string; formattedMessage: string }>
  contracts: Record<string, Record<string, { abi: unknown; evm: { deployedBytecode: { object: string } } }>>
}
const errors = (output.errors ?? []).filter((e) => e.severity === "error")
if (errors.length > 0) {
  console.error(errors.map((e) => e.formattedMessage).join("\n"))
  process.exit(1)
}
const contract = output.contracts["TestUsdc.sol"]!["TestUsdc"]!
writeFileSync(
  join(DIR, "TestUsdc.json"),
  JSON.stringify({ compiler: `solc ${solc.version()}`, runtimeBytecode: `0x${contract.evm.deployedBytecode.object}` }, null, 2) + "\n"
)
console.log(`wrote ${join(DIR, "TestUsdc.json")} (${contract.evm.deployedBytecode.object.length / 2} bytes)`)
