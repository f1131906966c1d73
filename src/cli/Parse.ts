/**
 * From argv to what to do: help for a command, the version, a usage error that names the flag or
 * argument and suggests the fix, or a command with its checked values. Tokens are split by
 * `node:util` parseArgs; the command path is walked first, so flags go before or after it.
 */
import { parseArgs } from "node:util"
import type { FlagSpec, Flags, LeafSpec } from "./Spec.js"
import { globalFlags, type Group, type Leaf, nameOf, type Node, root } from "./Tree.js"

export type Raw = Record<string, string | number | boolean | ReadonlyArray<string> | undefined>

export interface GlobalRaw {
  readonly json: boolean
  readonly profile?: string
  readonly baseUrl?: string
}

export type Parsed =
  | { readonly kind: "help"; readonly node: Node; readonly path: ReadonlyArray<string> }
  | { readonly kind: "version" }
  | {
    readonly kind: "usage"
    readonly message: string
    readonly hint: ReadonlyArray<string>
    readonly path: ReadonlyArray<string>
    readonly json: boolean
  }
  | {
    readonly kind: "run"
    readonly leaf: Leaf
    readonly path: ReadonlyArray<string>
    readonly values: Raw
    readonly globals: GlobalRaw
  }

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

/**
 * Edit distance for "did you mean": insertions, deletions, substitutions and swaps of two adjacent
 * letters (optimal string alignment), so `emial` is one edit from `email` and two from `emails`.
 */
const distance = (a: string, b: string): number => {
  const d: Array<Array<number>> = Array.from({ length: a.length + 1 }, (_, i) =>
    Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)))
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1
      let best = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost)
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) best = Math.min(best, d[i - 2]![j - 2]! + 1)
      d[i]![j] = best
    }
  }
  return d[a.length]![b.length]!
}

export const suggest = (input: string, candidates: ReadonlyArray<string>): ReadonlyArray<string> =>
  candidates
    .map((c) => ({ c, d: c.startsWith(input) && input.length >= 2 ? 0 : distance(input, c) }))
    .filter(({ c, d }) => d <= Math.max(1, Math.floor(c.length / 3)))
    .sort((x, y) => x.d - y.d)
    .map(({ c }) => c)

const globalValued = Object.values(globalFlags).filter((f) => f.kind !== "boolean").map((f) => `--${f.name}`)

const helpHint = (path: ReadonlyArray<string>) => `Run \`${["mailroom", ...path].join(" ")} --help\` for usage.`

const allFlags = (leaf: LeafSpec): Flags => ({ ...leaf.flags, ...globalFlags })

export const parse = (argv: ReadonlyArray<string>): Parsed => {
  const end = argv.indexOf("--")
  const before = end === -1 ? argv : argv.slice(0, end)
  const wantsHelp = before.includes("--help") || before.includes("-h")
  const jsonErrors = before.includes("--json")

  // The command path: words in front of the leaf, skipping global flags (and their values).
  let node: Node = root
  const path: Array<string> = []
  const rest: Array<string> = []
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!
    if (arg === "--" || node.kind === "leaf") {
      rest.push(...argv.slice(i))
      break
    }
    if (arg.startsWith("-")) {
      rest.push(arg)
      if (globalValued.includes(arg) && i + 1 < argv.length) rest.push(argv[++i]!)
      continue
    }
    const group: Group = node
    const child = group.children.find((c) => nameOf(c) === arg)
    if (child === undefined) {
      if (wantsHelp) return { kind: "help", node, path }
      const names = group.children.map(nameOf)
      const close = suggest(arg, names)
      return {
        kind: "usage",
        message: `unknown command "${arg}" for \`${["mailroom", ...path].join(" ")}\``,
        hint: [
          ...(close.length > 0 ? [`Did you mean ${close.map((c) => `\`${["mailroom", ...path, c].join(" ")}\``).join(" or ")}?`] : []),
          `Available commands: ${names.join(", ")}.`,
          helpHint(path)
        ],
        path,
        json: jsonErrors
      }
    }
    node = child
    path.push(arg)
  }

  if (wantsHelp) return { kind: "help", node, path }
  if (node.kind === "group") {
    if (path.length === 0 && before.includes("--version")) return { kind: "version" }
    const stray = rest.find((a) => a.startsWith("-") && a !== "--json" && !globalValued.includes(a.split("=")[0]!))
    if (stray !== undefined) {
      return {
        kind: "usage",
        message: `unknown flag ${stray.split("=")[0]} for \`${["mailroom", ...path].join(" ")}\``,
        hint: [helpHint(path)],
        path,
        json: jsonErrors
      }
    }
    return { kind: "help", node, path }
  }
  return parseLeaf(node, path, rest, jsonErrors)
}

const usage = (path: ReadonlyArray<string>, json: boolean, message: string, ...hint: Array<string>): Parsed => ({
  kind: "usage",
  message,
  hint: [...hint, helpHint(path)],
  path,
  json
})

const parseLeaf = (leaf: Leaf, path: ReadonlyArray<string>, args: ReadonlyArray<string>, json: boolean): Parsed => {
  const spec = leaf.spec
  const flags = allFlags(spec)
  const byName = new Map<string, [string, FlagSpec]>()
  const options: Record<string, { type: "string" | "boolean"; short?: string }> = {}
  for (const [key, f] of Object.entries(flags)) {
    byName.set(f.name, [key, f])
    options[f.name] = { type: f.kind === "boolean" ? "boolean" : "string", ...(f.alias !== undefined ? { short: f.alias } : {}) }
  }
  const { tokens } = parseArgs({ args: [...args], options, strict: false, allowPositionals: true, tokens: true })
  const raw: Raw = {}
  const positionals: Array<string> = []
  const seen = new Set<string>()
  for (const token of tokens) {
    if (token.kind === "positional") {
      positionals.push(token.value)
      continue
    }
    if (token.kind !== "option") continue
    const entry = byName.get(token.name)
    if (entry === undefined) {
      const close = suggest(token.name, [...byName.keys()])
      return usage(
        path,
        json,
        `unknown flag ${token.rawName} for \`${["mailroom", ...path].join(" ")}\``,
        ...(close.length > 0 ? [`Did you mean ${close.map((c) => `--${c}`).join(" or ")}?`] : [])
      )
    }
    const [key, f] = entry
    const display = `--${f.name}`
    if (seen.has(key) && f.kind !== "many") return usage(path, json, `${display} was given twice`)
    seen.add(key)
    if (f.kind === "boolean") {
      if (token.inlineValue === true) return usage(path, json, `${display} takes no value (it is on when present)`)
      raw[key] = true
      continue
    }
    if (token.value === undefined) {
      return usage(path, json, `${display} needs a value: ${display} ${f.placeholder}`, `${display}: ${f.description}.`)
    }
    const checked = checkValue(f, token.value)
    if ("problem" in checked) {
      return usage(path, json, `${display}: ${checked.problem}`, `${display} ${f.placeholder}: ${f.description}.`)
    }
    if (f.kind === "many") {
      const before = raw[key]
      raw[key] = [...(Array.isArray(before) ? before : []), String(checked.value)]
    } else {
      raw[key] = checked.value
    }
  }
  for (const [key, f] of Object.entries(spec.flags)) {
    if (f.kind === "many" && raw[key] === undefined) raw[key] = []
    if (f.required && f.kind !== "boolean" && f.kind !== "many" && raw[key] === undefined) {
      return usage(path, json, `missing --${f.name} ${f.placeholder}`, `--${f.name}: ${f.description}.`)
    }
    if (f.kind === "boolean" && raw[key] === undefined) raw[key] = false
  }
  const argSpecs = Object.entries(spec.args)
  for (let i = 0; i < argSpecs.length; i++) {
    const [key, a] = argSpecs[i]!
    const value = positionals[i]
    if (value === undefined) {
      if (a.optional === true) continue
      return usage(path, json, `missing argument <${a.name}>: ${a.description}`)
    }
    if (a.kind === "uuid" && !UUID.test(value)) {
      return usage(
        path,
        json,
        `argument <${a.name}>: "${value}" is not a UUID`,
        `<${a.name}> is ${a.description}.`
      )
    }
    raw[key] = value
  }
  if (positionals.length > argSpecs.length) {
    const extra = positionals[argSpecs.length]!
    return usage(
      path,
      json,
      `unexpected argument "${extra}"`,
      argSpecs.length === 0
        ? `\`${["mailroom", ...path].join(" ")}\` takes no arguments.`
        : `It takes ${argSpecs.map(([, a]) => `<${a.name}>`).join(" ")}.`
    )
  }
  const globals: GlobalRaw = {
    json: raw.json === true,
    ...(typeof raw.profile === "string" ? { profile: raw.profile } : {}),
    ...(typeof raw.baseUrl === "string" ? { baseUrl: raw.baseUrl } : {})
  }
  const { json: _json, profile: _profile, baseUrl: _baseUrl, ...values } = raw
  return { kind: "run", leaf, path, values, globals }
}

type Checked = { readonly value: string | number | boolean } | { readonly problem: string }

/** The value as the handler wants it, or what is wrong with it. */
const checkValue = (f: FlagSpec, value: string): Checked => {
  switch (f.kind) {
    case "integer": {
      if (!/^-?\d+$/.test(value.trim())) return { problem: `"${value}" is not a whole number` }
      const n = Number(value)
      if (f.min !== undefined && n < f.min) return { problem: `${n} is below the minimum ${f.min}` }
      if (f.max !== undefined && n > f.max) return { problem: `${n} is above the maximum ${f.max}` }
      return { value: n }
    }
    case "uuid":
      return UUID.test(value) ? { value } : { problem: `"${value}" is not a UUID` }
    case "choice": {
      const choices = f.choices ?? []
      if (!choices.includes(value)) {
        const close = suggest(value, choices)
        const hint = close.length > 0 ? ` (did you mean ${close[0]}?)` : ""
        return { problem: `"${value}" is not one of ${choices.join(", ")}${hint}` }
      }
      if (f.placeholder === "true|false") return { value: value === "true" }
      return { value }
    }
    default:
      return { value }
  }
}
