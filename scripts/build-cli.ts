/**
 * Bundles the CLI with esbuild into `dist/cli/` (entry `mailroom.mjs` plus chunks):
 * `npx tsx scripts/build-cli.ts [outdir]`, run by `npm install` (the `prepare` script) and
 * `npm run build:cli`. Command handlers are split into chunks loaded on use, so `mailroom --help`
 * reads only the command tree. `bin/mailroom.js` runs the bundle; the sources run through tsx only
 * with MAILROOM_CLI_DEV=1 or before a build.
 */
import { build } from "esbuild"
import { rmSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { fileURLToPath } from "node:url"

const ROOT = fileURLToPath(new URL("..", import.meta.url))

/** Builds into `outdir` and returns the entry file's path. */
export const buildCli = async (outdir: string, options: { readonly metafile?: string } = {}) => {
  // Chunk names change with their content: old ones would pile up.
  rmSync(join(outdir, "chunks"), { recursive: true, force: true })
  const result = await build({
    absWorkingDir: ROOT,
    entryPoints: { mailroom: "src/cli/main.ts" },
    bundle: true,
    splitting: true,
    platform: "node",
    target: "node20",
    format: "esm",
    outdir,
    outExtension: { ".js": ".mjs" },
    chunkNames: "chunks/[name]-[hash]",
    logLevel: "warning",
    metafile: options.metafile !== undefined,
    // Less to read and compile on every start.
    minify: true,
    // Bundled CommonJS dependencies call require(); an ES module has none of its own.
    banner: { js: "import { createRequire as __mailroomRequire } from 'node:module'; const require = __mailroomRequire(import.meta.url);" }
  })
  if (options.metafile !== undefined && result.metafile !== undefined) {
    writeFileSync(options.metafile, JSON.stringify(result.metafile))
  }
  return join(outdir, "mailroom.mjs")
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  const outdir = process.argv[2] ?? join(ROOT, "dist", "cli")
  const entry = await buildCli(outdir, { metafile: join(outdir, "meta.json") })
  console.log(`built ${entry}`)
}
