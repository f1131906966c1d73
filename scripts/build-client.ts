/**
 * Bundles `mailroom/client` (src/client.ts) into `dist/client.mjs` for projects that import it:
 * `npx tsx scripts/build-client.ts`, run by `npm install` (the `prepare` script). Effect stays
 * external, so the client's tagged errors and effects are the importing project's own Effect's.
 */
import { build } from "esbuild"
import { fileURLToPath } from "node:url"

const ROOT = fileURLToPath(new URL("..", import.meta.url))

export const buildClient = async (outfile = "dist/client.mjs") => {
  await build({
    absWorkingDir: ROOT,
    entryPoints: ["src/client.ts"],
    bundle: true,
    platform: "node",
    target: "node20",
    format: "esm",
    outfile,
    external: ["effect", "@effect/*"],
    logLevel: "warning"
  })
  return outfile
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  await buildClient(process.argv[2])
}
