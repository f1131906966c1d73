/**
 * The CLI's credentials file: `$XDG_CONFIG_HOME/mailroom/config.json` (or `~/.config/mailroom`),
 * one entry per profile, written with mode 0600 (the directory 0700) because it holds tokens.
 */
import { Effect, Schema } from "effect"
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs"
import { homedir } from "node:os"
import { dirname, join } from "node:path"
import { CliFailure } from "./Failure.js"

export const StoredProfile = Schema.Struct({
  base_url: Schema.optionalWith(Schema.String, { exact: true }),
  auth_method: Schema.optionalWith(Schema.Literal("oauth", "api_key"), { exact: true }),
  api_key: Schema.optionalWith(Schema.String, { exact: true }),
  access_token: Schema.optionalWith(Schema.String, { exact: true }),
  refresh_token: Schema.optionalWith(Schema.String, { exact: true }),
  expires_at: Schema.optionalWith(Schema.String, { exact: true }),
  oauth_grant_id: Schema.optionalWith(Schema.String, { exact: true }),
  org_id: Schema.optionalWith(Schema.String, { exact: true }),
  org_name: Schema.optionalWith(Schema.NullOr(Schema.String), { exact: true }),
  /** A sign-up started without its code: `mailroom signup --email X --code C` finishes it. */
  pending_signup: Schema.optionalWith(
    Schema.Struct({ email: Schema.String, signup_token: Schema.String, expires_at: Schema.String }),
    { exact: true }
  )
})
export type StoredProfile = typeof StoredProfile.Type

const ConfigFile = Schema.Struct({
  profiles: Schema.Record({ key: Schema.String, value: StoredProfile })
})
type ConfigFile = typeof ConfigFile.Type

export const configPath = (): string => {
  const xdg = process.env.XDG_CONFIG_HOME
  const base = xdg !== undefined && xdg !== "" ? xdg : join(homedir(), ".config")
  return join(base, "mailroom", "config.json")
}

const readAll = Effect.try({
  try: (): ConfigFile => {
    const path = configPath()
    if (!existsSync(path)) return { profiles: {} }
    return Schema.decodeUnknownSync(ConfigFile)(JSON.parse(readFileSync(path, "utf8")))
  },
  catch: (e) => new CliFailure({ message: `cannot read ${configPath()}: ${String(e)}` })
})

const writeAll = (config: ConfigFile) =>
  Effect.try({
    try: () => {
      const path = configPath()
      mkdirSync(dirname(path), { recursive: true, mode: 0o700 })
      // Written beside and renamed: a crash never leaves half a file, and the mode is set before any secret lands.
      const tmp = `${path}.${process.pid}.tmp`
      writeFileSync(tmp, `${JSON.stringify(config, null, 2)}\n`, { mode: 0o600 })
      chmodSync(tmp, 0o600)
      renameSync(tmp, path)
    },
    catch: (e) => new CliFailure({ message: `cannot write ${configPath()}: ${String(e)}` })
  })

export const loadProfile = (name: string) =>
  Effect.map(readAll, (c): StoredProfile => c.profiles[name] ?? {})

/** Replaces a profile's stored credentials (keeping its base URL unless a new one is given). */
export const saveProfile = (name: string, profile: StoredProfile) =>
  Effect.flatMap(readAll, (c) => writeAll({ profiles: { ...c.profiles, [name]: profile } }))

export const forgetCredentials = (name: string) =>
  Effect.flatMap(readAll, (c) => {
    const current = c.profiles[name]
    if (current === undefined) return Effect.void
    return writeAll({
      profiles: { ...c.profiles, [name]: current.base_url !== undefined ? { base_url: current.base_url } : {} }
    })
  })
