/** The global flags, accepted anywhere on the command line, and the API base used when none is set. */
import { flag, text } from "./Spec.js"

export const DEFAULT_API_BASE = "http://localhost:3000/v1"

export const globalFlags = {
  json: flag("json", "print JSON for scripts instead of tables"),
  profile: text("profile", "NAME", "the credentials profile to use (env MAILROOM_PROFILE; default \"default\")"),
  baseUrl: text(
    "base-url",
    "URL",
    `the API base ending in /v1 (env MAILROOM_BASE_URL; default: the profile's, else ${DEFAULT_API_BASE})`
  )
}
