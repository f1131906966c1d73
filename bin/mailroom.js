#!/usr/bin/env node
// The bundle built by `npm install` / `npm run build:cli` (dist/cli/mailroom.mjs) starts several
// times faster than the TypeScript sources; those run through tsx when MAILROOM_CLI_DEV=1 or when
// no bundle has been built.
import { existsSync } from "node:fs"

const bundle = new URL("../dist/cli/mailroom.mjs", import.meta.url)
if (process.env.MAILROOM_CLI_DEV !== "1" && existsSync(bundle)) {
  await import(bundle.href)
} else {
  const { register } = await import("tsx/esm/api")
  register()
  await import(new URL("../src/cli/main.ts", import.meta.url).href)
}
