/** Runs one parsed command: its handler with the HTTP client and global flags, then the exit code. */
import * as FetchHttpClient from "@effect/platform/FetchHttpClient"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Cause, Effect, Exit, Option, Ref } from "effect"
import { reportFailure } from "./Errors.js"
import { Globals, type GlobalValues } from "./Globals.js"
import { LastResponse } from "./LastResponse.js"
import type { Parsed } from "./Parse.js"
import { DEFAULT_API_BASE } from "./Root.js"
import type { LeafSpec } from "./Spec.js"

const env = (name: string) => {
  const value = process.env[name]
  return value !== undefined && value !== "" ? value : undefined
}

/** Optional flags become Options; boolean flags and arguments are passed as they are. */
const valuesOf = (spec: LeafSpec, raw: Readonly<Record<string, unknown>>) => {
  const values: Record<string, unknown> = {}
  for (const [key, f] of Object.entries(spec.flags)) {
    values[key] = f.required ? raw[key] : Option.fromNullable(raw[key])
  }
  for (const key of Object.keys(spec.args)) values[key] = raw[key]
  return values
}

/** API request fields named by the command's flags, so API messages can name the flag instead. */
const fieldNames = (spec: LeafSpec): ReadonlyArray<readonly [string, string]> =>
  Object.values(spec.flags).flatMap((f) => {
    return [[f.field ?? f.name.replace(/-/g, "_"), `--${f.name}`] as const]
  })

export const runCommand = (parsed: Extract<Parsed, { kind: "run" }>) => {
  const globals: GlobalValues = {
    json: parsed.globals.json,
    profile: parsed.globals.profile ?? env("MAILROOM_PROFILE") ?? "default",
    baseUrl: Option.fromNullable(parsed.globals.baseUrl ?? env("MAILROOM_BASE_URL"))
  }
  const apiBase = Option.getOrElse(globals.baseUrl, () => DEFAULT_API_BASE)
  const spec = parsed.leaf.spec
  const program = Effect.promise(() => parsed.leaf.load()).pipe(
    Effect.flatMap((handler) => handler(valuesOf(spec, parsed.values) as Parameters<typeof handler>[0])),
    Effect.as(0),
    Effect.catchAllCause((cause) =>
      Cause.isInterruptedOnly(cause) ? Effect.failCause(cause) : reportFailure(cause, globals.json, apiBase, fieldNames(spec))
    ),
    Effect.tap((code) => Effect.sync(() => { process.exitCode = code })),
    Effect.provideService(Globals, globals),
    Effect.provideServiceEffect(LastResponse, Ref.make<Readonly<Record<string, string>>>({})),
    // Node's own fetch: bundling undici as well would double what a command loads.
    Effect.provide(FetchHttpClient.layer)
  )
  NodeRuntime.runMain(program, {
    disableErrorReporting: true,
    teardown: (exit, onExit) => onExit(Exit.isSuccess(exit) ? Number(process.exitCode ?? 0) : 130)
  })
}
