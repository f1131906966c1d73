/**
 * The service as plain JavaScript (what `npm start` runs): src/main.ts bundled by esbuild into
 * dist/server/main.mjs, and the analysis worker into dist/server/AnalyzeWorker.cjs next to it (the
 * pool loads `./AnalyzeWorker.cjs` beside its own module). Dependencies stay in node_modules. Running
 * the sources through tsx instead costs ~120 MB more RSS (the loader and its compiled modules) and
 * seconds of start-up. Plain JavaScript, so building needs no TypeScript loader.
 */
import { build } from "esbuild"
import { fileURLToPath } from "node:url"

const root = fileURLToPath(new URL("..", import.meta.url))
const common = { absWorkingDir: root, bundle: true, platform: "node", target: "node20", packages: "external", logLevel: "warning" }

await Promise.all([
  // dist/server/ is two levels below the root, as src/platform/ is: `../../migrations` resolves alike.
  build({ ...common, entryPoints: ["src/main.ts"], format: "esm", outfile: "dist/server/main.mjs" }),
  build({ ...common, entryPoints: ["src/inbound/AnalyzeWorker.ts"], format: "cjs", outfile: "dist/server/AnalyzeWorker.cjs" }),
  // The in-process embedding model's worker (src/search/LocalModel.ts loads `./ModelWorker.cjs` beside itself).
  build({ ...common, entryPoints: ["src/search/ModelWorker.cjs"], format: "cjs", outfile: "dist/server/ModelWorker.cjs" })
])
