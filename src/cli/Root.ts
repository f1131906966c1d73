/** The root command and its global options (accepted anywhere on the command line, see main.ts). */
import { Command, Options } from "@effect/cli"
import { Config } from "effect"

export const DEFAULT_API_BASE = "http://localhost:3000/v1"

export const globalOptions = {
  json: Options.boolean("json").pipe(Options.withDescription("print JSON for scripts instead of tables")),
  profile: Options.text("profile").pipe(
    Options.withFallbackConfig(Config.string("MAILROOM_PROFILE")),
    Options.withDefault("default"),
    Options.withDescription("credentials profile in the config file (env MAILROOM_PROFILE)")
  ),
  baseUrl: Options.text("base-url").pipe(
    Options.withFallbackConfig(Config.string("MAILROOM_BASE_URL")),
    Options.optional,
    Options.withDescription(`API base ending in /v1 (env MAILROOM_BASE_URL; default: the profile's, else ${DEFAULT_API_BASE})`)
  )
}

/** Names of the global options, for hoisting them in front of the subcommand. */
export const GLOBAL_FLAGS = ["--json"] as const
export const GLOBAL_VALUED = ["--profile", "--base-url"] as const

export const root = Command.make("mailroom", globalOptions).pipe(
  Command.withDescription("Mailroom from the terminal: inboxes, domains, endpoints, deliveries and local forwarding")
)
