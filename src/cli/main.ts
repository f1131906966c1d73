/**
 * The `mailroom` command. Help, the version and usage errors are answered from the command tree
 * alone; a command's handler, Effect and the typed API client (derived from the contract in
 * `src/Api.ts`, so a contract change breaks this build rather than its users) load only to run it.
 */
import { helpWidth, renderHelp, useColor } from "./Help.js"
import { parse } from "./Parse.js"
import { VERSION } from "../contract/Version.js"

const parsed = parse(process.argv.slice(2))
switch (parsed.kind) {
  case "version":
    process.stdout.write(`mailroom ${VERSION}\n`)
    break
  case "help":
    process.stdout.write(
      renderHelp(parsed.node, parsed.path, { width: helpWidth(process.stdout), color: useColor(process.stdout) })
    )
    break
  case "usage":
    process.stderr.write(
      parsed.json
        ? `${JSON.stringify({ error: { code: "usage_error", message: parsed.message, hint: parsed.hint.join(" ") } })}\n`
        : `error: ${parsed.message}\n${parsed.hint.join("\n")}\n`
    )
    process.exitCode = 2
    break
  case "run": {
    const { runCommand } = await import("./Run.js")
    runCommand(parsed)
  }
}
