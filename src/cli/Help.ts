/**
 * Help in the shape people know from `gh` and the Stripe CLI: a summary, USAGE, the commands or
 * flags in two wrapped columns, EXAMPLES. Lines fit the terminal (80 columns when not a terminal);
 * headings are bold only on a terminal without NO_COLOR.
 */
import type { FlagSpec, LeafSpec } from "./Spec.js"
import { globalFlags, nameOf, type Node } from "./Tree.js"

/** ANSI styling only for a terminal, and never with NO_COLOR set (https://no-color.org) or TERM=dumb. */
export const useColor = (stream: NodeJS.WriteStream): boolean =>
  stream.isTTY === true && (process.env.NO_COLOR ?? "") === "" && process.env.TERM !== "dumb"

export const helpWidth = (stream: NodeJS.WriteStream): number =>
  stream.isTTY === true && typeof stream.columns === "number" && stream.columns > 40 ? Math.min(stream.columns, 100) : 80

/** Words into lines of at most `width` characters (a longer word gets a line of its own). */
export const wrap = (text: string, width: number): Array<string> => {
  const lines: Array<string> = []
  let line = ""
  for (const word of text.split(/\s+/).filter((w) => w !== "")) {
    if (line === "") line = word
    else if (line.length + 1 + word.length <= width) line += ` ${word}`
    else {
      lines.push(line)
      line = word
    }
  }
  if (line !== "") lines.push(line)
  return lines
}

const INDENT = "  "
const GAP = 3
const MAX_LEFT = 28

/** Two columns: names on the left, descriptions wrapped beside them (or below a long name). */
const columns = (rows: ReadonlyArray<readonly [string, string]>, width: number): Array<string> => {
  const left = Math.min(MAX_LEFT, Math.max(...rows.map(([l]) => l.length)))
  const textWidth = Math.max(20, width - INDENT.length - left - GAP)
  const out: Array<string> = []
  for (const [name, description] of rows) {
    const body = wrap(description, textWidth)
    const pad = " ".repeat(INDENT.length + left + GAP)
    if (name.length > left) {
      out.push(`${INDENT}${name}`)
      out.push(...body.map((l) => pad + l))
    } else {
      out.push(`${INDENT}${name.padEnd(left + GAP)}${body[0] ?? ""}`)
      out.push(...body.slice(1).map((l) => pad + l))
    }
  }
  return out
}

const flagLabel = (f: FlagSpec) =>
  `${f.alias !== undefined ? `-${f.alias}, ` : "    "}--${f.name}${f.placeholder !== "" ? ` ${f.placeholder}` : ""}`

const flagRows = (flags: ReadonlyArray<FlagSpec>) =>
  flags.map((f) => [flagLabel(f), `${f.description}${f.required && f.kind !== "boolean" && f.kind !== "many" ? " (required)" : ""}`] as const)

const HELP_ROW = ["-h, --help", "show help for the command"] as const

export interface HelpStyle {
  readonly width: number
  readonly color: boolean
}

export const renderHelp = (node: Node, path: ReadonlyArray<string>, style: HelpStyle): string => {
  const heading = (s: string) => (style.color ? `\x1b[1m${s}\x1b[0m` : s)
  const command = ["mailroom", ...path].join(" ")
  const sections: Array<Array<string>> = []
  const section = (title: string, lines: Array<string>) => sections.push([heading(title), ...lines])
  const globals = Object.values(globalFlags)

  if (node.kind === "group") {
    sections.push(wrap(node.summary, style.width))
    section("USAGE", [`${INDENT}${command} <command> [flags]`])
    section("COMMANDS", columns(node.children.map((c) => [nameOf(c), c.kind === "leaf" ? c.spec.summary : c.summary]), style.width))
    const flags = flagRows(globals)
    if (path.length === 0) flags.push(["    --version", "print the version"])
    flags.push(HELP_ROW)
    section("FLAGS", columns(flags, style.width))
    section("EXAMPLES", node.examples.map((e) => `${INDENT}$ ${e}`))
    section("LEARN MORE", wrap(`Use \`${command} <command> --help\` for more about a command.`, style.width - 2).map((l) => INDENT + l))
  } else {
    const spec: LeafSpec = node.spec
    const args = Object.values(spec.args)
    sections.push(wrap(spec.summary, style.width))
    if (spec.description !== undefined) sections.push(wrap(spec.description, style.width))
    const argName = (a: (typeof args)[number]) => (a.optional === true ? `[<${a.name}>]` : `<${a.name}>`)
    const argNames = args.map(argName).join(" ")
    section("USAGE", [`${INDENT}${command}${argNames !== "" ? ` ${argNames}` : ""} [flags]`])
    if (args.length > 0) section("ARGUMENTS", columns(args.map((a) => [argName(a), a.description]), style.width))
    const own = Object.values(spec.flags)
    if (own.length > 0) section("FLAGS", columns(flagRows(own), style.width))
    section("GLOBAL FLAGS", columns([...flagRows(globals), HELP_ROW], style.width))
    section("EXAMPLES", spec.examples.map((e) => `${INDENT}$ ${e}`))
  }
  return `${sections.map((s) => s.join("\n")).join("\n\n")}\n`
}
