/** The global flags (`--json`, `--profile`, `--base-url`) as the command handlers see them. */
import { Context, type Option } from "effect"

export interface GlobalValues {
  readonly json: boolean
  readonly profile: string
  readonly baseUrl: Option.Option<string>
}

export class Globals extends Context.Tag("mailroom/cli/Globals")<Globals, GlobalValues>() {}
