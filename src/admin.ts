/**
 * Operator command: `npm run admin -- <command>`. Uses the same configuration as the service
 * (DATABASE_URL, or the embedded database in DATA_DIR). Beside a running service on the embedded
 * database (whose files only that process may open) the command is handed to the service over its
 * operator socket, DATA_DIR/admin.sock, and runs there. Without DATABASE_URL or DATA_DIR it uses the
 * service's default data, `./.data` of the current directory, only when a database is there: it
 * never starts an empty one that no service reads, and says where it looked.
 */
import { NodeContext, NodeRuntime } from "@effect/platform-node"
import { Effect, Layer } from "effect"
import { existsSync, readFileSync } from "node:fs"
import { connect } from "node:net"
import { dirname, join, resolve } from "node:path"
import { Provisioning } from "./identity/Provisioning.js"
import { runOperatorCommand, set } from "./operator/Commands.js"
import { OPERATOR_SOCKET, type OperatorAnswer } from "./operator/Socket.js"
import { AppConfigLive } from "./platform/Config.js"
import { DatabaseLive } from "./platform/Database.js"
import { SettleCaps } from "./payments/SettleCaps.js"

/**
 * Neither DATABASE_URL nor DATA_DIR: the service's default data must be there. Creating an empty
 * database in whatever directory the command was run from would answer "no organization" for an
 * organization that exists in the service's real data.
 */
const missingDefaultData = (): string | undefined => {
  if (set("DATABASE_URL") || set("DATA_DIR")) return undefined
  const dir = resolve(".data")
  if (existsSync(join(dir, "pglite", "PG_VERSION"))) return undefined
  return `no service data found: DATABASE_URL and DATA_DIR are unset, and ${dir} (the default ./.data of ` +
    `${process.cwd()}) holds no embedded database. Run the command with the service's settings: ` +
    "DATA_DIR=<the directory the service was started with> (or DATABASE_URL=postgres://…) npm run admin -- …"
}

const isAlive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

/** The operator socket of a service running on the embedded database in DATA_DIR, if one is. */
const runningService = (): string | undefined => {
  if (set("DATABASE_URL")) return undefined
  const dataDir = resolve(process.env.DATA_DIR || ".data")
  const lock = join(dirname(join(dataDir, "pglite")), "pglite.lock")
  const socket = join(dataDir, OPERATOR_SOCKET)
  if (!existsSync(lock) || !existsSync(socket)) return undefined
  const pid = Number(readFileSync(lock, "utf8").trim())
  return Number.isInteger(pid) && pid > 0 && pid !== process.pid && isAlive(pid) ? socket : undefined
}

/** Hands the command line to the running service and prints its answer. */
const throughService = (socket: string, args: ReadonlyArray<string>) =>
  Effect.async<OperatorAnswer, Error>((resume) => {
    let input = ""
    const client = connect(socket, () => client.write(`${JSON.stringify({ args })}\n`))
    client.setEncoding("utf8")
    client.on("data", (chunk: string) => (input += chunk))
    client.on("error", (e) => resume(Effect.fail(new Error(`the running service's operator socket ${socket}: ${e.message}`))))
    client.on("end", () => {
      try {
        resume(Effect.succeed(JSON.parse(input) as OperatorAnswer))
      } catch {
        resume(Effect.fail(new Error(`the running service's operator socket ${socket} gave no answer`)))
      }
    })
  }).pipe(
    Effect.flatMap((answer) =>
      Effect.sync(() => {
        process.stdout.write(answer.stdout)
        process.stderr.write(answer.stderr)
        process.exitCode = answer.code
      }))
  )

const Runtime = Layer.merge(Provisioning.Default, SettleCaps.Default).pipe(
  Layer.provideMerge(DatabaseLive),
  Layer.provide(AppConfigLive),
  Layer.merge(NodeContext.layer)
)

const args = process.argv.slice(2)
const helpOnly = args.some((a) => a === "--help" || a === "-h" || a === "--version") || args.length === 0
const service = helpOnly ? undefined : runningService()
const missing = helpOnly || service !== undefined ? undefined : missingDefaultData()

// Before any layer is built: building the database layer would create the very database refused here.
;(service !== undefined
  ? throughService(service, args)
  : missing !== undefined
  ? Effect.fail(new Error(missing))
  : runOperatorCommand(args).pipe(Effect.provide(Runtime))).pipe(
  Effect.catchAll((e) =>
    Effect.sync(() => {
      const message = typeof e === "object" && e !== null && "message" in e ? String(e.message) : String(e)
      if (message !== "") process.stderr.write(`admin: ${message}\n`)
      process.exitCode = 1
    })
  ),
  NodeRuntime.runMain({ disableErrorReporting: true })
)
