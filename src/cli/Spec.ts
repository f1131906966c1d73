/**
 * How a command is declared: its flags, positional arguments, help text and examples, as plain data.
 * The parser and the help renderer read these without loading Effect or the API client, so `--help`
 * and usage errors answer before any command module is loaded.
 */
import type { HttpClient } from "@effect/platform"
import type { Effect, Option } from "effect"
import type { Globals } from "./Globals.js"
import type { LastResponse } from "./LastResponse.js"

export type FlagKind = "boolean" | "text" | "integer" | "uuid" | "choice" | "many"

export interface FlagSpec<T = unknown, Required extends boolean = boolean> {
  readonly kind: FlagKind
  readonly name: string
  readonly description: string
  /** What the value looks like in help: `URL`, `ID`, `http|function`; empty for boolean flags. */
  readonly placeholder: string
  readonly required: Required
  readonly choices?: ReadonlyArray<string>
  readonly alias?: string
  /** The request field this flag fills, when its name differs (API messages are reworded to the flag). */
  readonly field?: string
  readonly min?: number
  readonly max?: number
  /** Type-level only: the parsed value's type. */
  readonly _value?: T
}

export interface ArgSpec<T = string> {
  readonly kind: "text" | "uuid"
  readonly name: string
  readonly description: string
  /** For ids: what the id names, and the command that lists them (named in the error). */
  readonly lister?: string
  /** May be left out (the handler then gets undefined); shown as `[<name>]`. */
  readonly optional?: boolean
  readonly _value?: T
}

interface FlagExtra {
  readonly alias?: string
  readonly field?: string
}

export const flag = (name: string, description: string, extra: FlagExtra = {}): FlagSpec<boolean, true> => ({
  kind: "boolean",
  name,
  description,
  placeholder: "",
  required: true,
  ...extra
})

export const text = (name: string, placeholder: string, description: string, extra: FlagExtra = {}): FlagSpec<string, false> => ({
  kind: "text",
  name,
  description,
  placeholder,
  required: false,
  ...extra
})

/** A flag that may be given several times; the handler gets every value, in order (none: empty). */
export const many = (name: string, placeholder: string, description: string, extra: FlagExtra = {}): FlagSpec<ReadonlyArray<string>, true> => ({
  kind: "many",
  name,
  description: `${description} (repeatable)`,
  placeholder,
  required: true,
  ...extra
})

export const integer = (
  name: string,
  description: string,
  range: { readonly min?: number; readonly max?: number } = {}
): FlagSpec<number, false> => ({ kind: "integer", name, description, placeholder: "N", required: false, ...range })

export const uuid = (name: string, description: string, extra: FlagExtra = {}): FlagSpec<string, false> => ({
  kind: "uuid",
  name,
  description,
  placeholder: "ID",
  required: false,
  ...extra
})

export const choice = <const C extends string>(
  name: string,
  choices: ReadonlyArray<C>,
  description: string,
  extra: FlagExtra = {}
): FlagSpec<C, false> => ({ kind: "choice", name, description, placeholder: choices.join("|"), choices, required: false, ...extra })

/** A setting that takes `true` or `false` (unlike a boolean flag, it can also turn something off). */
export const onOff = (name: string, description: string, extra: FlagExtra = {}): FlagSpec<boolean, false> => ({
  kind: "choice",
  name,
  description,
  placeholder: "true|false",
  choices: ["true", "false"],
  required: false,
  ...extra
})

export const required = <T>(spec: FlagSpec<T, false>): FlagSpec<T, true> => ({ ...spec, required: true })

export const textArg = (name: string, description: string): ArgSpec<string> => ({ kind: "text", name, description })

/** `<id>` of a resource; a value that is not a UUID is a usage error naming the argument. */
export const idArg = (what: string, lister: string): ArgSpec<string> => ({
  kind: "uuid",
  name: "id",
  description: `the ${what}'s id (a UUID; \`${lister}\` shows them)`,
  lister
})

/** An `<id>` that may be left out (another flag names the thing instead). */
export const optionalIdArg = (what: string, lister: string): ArgSpec<string | undefined> => ({
  ...idArg(what, lister),
  optional: true
})

export type Flags = Readonly<Record<string, FlagSpec>>
export type Args = Readonly<Record<string, ArgSpec<string | undefined>>>

export interface LeafSpec<F extends Flags = Flags, A extends Args = Args> {
  readonly name: string
  /** One line, shown in the parent's command list. */
  readonly summary: string
  /** More paragraphs for the command's own help. */
  readonly description?: string
  readonly flags: F
  readonly args: A
  /** Whole command lines, without the leading `$ `. */
  readonly examples: ReadonlyArray<string>
}

export const leaf = <const F extends Flags, const A extends Args>(spec: LeafSpec<F, A>): LeafSpec<F, A> => spec

type FlagValue<S> = S extends FlagSpec<infer T, infer R> ? (R extends true ? T : Option.Option<T>) : never
type ArgValue<S> = S extends ArgSpec<infer T> ? T : never

/** What a command's handler receives: flags by key (optional ones as Option), then the arguments. */
export type Values<S> = S extends LeafSpec<infer F, infer A>
  ? { readonly [K in keyof F]: FlagValue<F[K]> } & { readonly [K in keyof A]: ArgValue<A[K]> }
  : never

export type Handler<S> = (values: Values<S>) => Effect.Effect<unknown, unknown, HttpClient.HttpClient | Globals | LastResponse>
