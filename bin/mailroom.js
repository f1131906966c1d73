#!/usr/bin/env node
// Runs the TypeScript CLI through tsx, from the checkout or after `npm link`.
import { register } from "tsx/esm/api"

register()
await import(new URL("../src/cli/main.ts", import.meta.url).href)
