/**
 * Bundles the CLI (src/cli/main.ts and everything it imports) into one ES module with esbuild:
 * `npx tsx scripts/build-cli.ts [outfile]` (default dist/mailroom.mjs). A bundled CLI starts in about
 * half the time of the tsx-run sources, which matters for the test suite's many CLI subprocesses.
 */
import { build } from "esbuild"
import { fileURLToPath } from "node:url"

const ROOT = fileURLToPath(new URL("..", import.meta.url))

export const buildCli = async (outfile: string) => {
  await build({
    absWorkingDir: ROOT,
    entryPoints: ["src/cli/main.ts"],
    bundle: true,
    platform: "node",
    target: "node20",
    format: "esm",
    outfile,
    logLevel: "warning",
    // Bundled CommonJS dependencies call require(); an ES module has none of its own.
    banner: { js: "import { createRequire as __mailroomRequire } from 'node:module'; const require = __mailroomRequire(import.meta.url);" }
  })
  return outfile
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  const out = await buildCli(process.argv[2] ?? `${ROOT}dist/mailroom.mjs`)
  console.log(`built ${out}`)
}
