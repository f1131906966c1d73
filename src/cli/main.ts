/**
 * The `mailroom` command. Every command talks to the service through the typed client derived from
 * the contract (`src/Api.ts`), so a contract change breaks this build rather than its users.
 */
import { Command } from "@effect/cli"
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Cause, Effect, Exit, Layer } from "effect"
import { account, secret } from "./commands/account.js"
import { authCommands } from "./commands/auth.js"
import { listen } from "./commands/listen.js"
import { deliveries, emails } from "./commands/mail.js"
import { domains, endpoints, filters, routes } from "./commands/resources.js"
import { reportFailure } from "./Errors.js"
import { DEFAULT_API_BASE, GLOBAL_FLAGS, GLOBAL_VALUED, root } from "./Root.js"

export const VERSION = "0.1.0"

export const command = root.pipe(
  Command.withSubcommands([
    ...authCommands,
    account,
    secret,
    domains,
    endpoints,
    filters,
    routes,
    emails,
    deliveries,
    listen
  ])
)

/**
 * @effect/cli reads a parent's options only before the subcommand; people write `--json` and
 * `--profile` anywhere, so they are moved to the front (up to a `--`).
 */
export const hoistGlobalOptions = (args: ReadonlyArray<string>): { args: Array<string>; json: boolean; baseUrl?: string } => {
  const globals: Array<string> = []
  const rest: Array<string> = []
  let json = false
  let baseUrl: string | undefined
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!
    if (arg === "--") {
      rest.push(...args.slice(i))
      break
    }
    if ((GLOBAL_FLAGS as ReadonlyArray<string>).includes(arg)) {
      json = true
      globals.push(arg)
      continue
    }
    const valued = GLOBAL_VALUED.find((name) => arg === name || arg.startsWith(`${name}=`))
    if (valued !== undefined) {
      const value = arg === valued ? args[++i] : arg.slice(valued.length + 1)
      if (value === undefined) {
        rest.push(arg)
        continue
      }
      if (valued === "--base-url") baseUrl = value
      globals.push(valued, value)
      continue
    }
    rest.push(arg)
  }
  return { args: [...globals, ...rest], json, ...(baseUrl !== undefined ? { baseUrl } : {}) }
}

const cli = Command.run(command, { name: "mailroom", version: VERSION })

const hoisted = hoistGlobalOptions(process.argv.slice(2))
const apiBase = hoisted.baseUrl ?? process.env.MAILROOM_BASE_URL ?? DEFAULT_API_BASE

const program = cli([...process.argv.slice(0, 2), ...hoisted.args]).pipe(
  Effect.as(0),
  Effect.catchAllCause((cause) =>
    Cause.isInterruptedOnly(cause) ? Effect.failCause(cause) : reportFailure(cause, hoisted.json, apiBase)
  ),
  Effect.tap((code) => Effect.sync(() => { process.exitCode = code })),
  Effect.provide(Layer.mergeAll(NodeContext.layer, NodeHttpClient.layerUndici))
)

NodeRuntime.runMain(program, {
  disableErrorReporting: true,
  teardown: (exit, onExit) => onExit(Exit.isSuccess(exit) ? Number(process.exitCode ?? 0) : 130)
})
