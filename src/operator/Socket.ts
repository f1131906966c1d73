/**
 * The operator socket: beside a running service on the embedded database (whose files only this
 * process may open), `npm run admin -- …` hands its command line to the service over a unix socket
 * in DATA_DIR (`admin.sock`, mode 0600: whoever may read DATA_DIR's database may use it) and the
 * service runs it on its own database, answering the command's output and exit code. With
 * DATABASE_URL the admin command opens the database itself and no socket is made.
 */
import { NodeContext } from "@effect/platform-node"
import { SqlClient } from "@effect/sql"
import { Console, Effect, Layer, Option, Runtime } from "effect"
import { chmodSync, existsSync, rmSync } from "node:fs"
import { createServer } from "node:net"
import { join } from "node:path"
import { Provisioning } from "../identity/Provisioning.js"
import { SettleCaps } from "../payments/SettleCaps.js"
import { AppConfig } from "../platform/Config.js"
import { runOperatorCommand } from "./Commands.js"

export const OPERATOR_SOCKET = "admin.sock"

export interface OperatorRequest {
  readonly args: ReadonlyArray<string>
}

export interface OperatorAnswer {
  readonly stdout: string
  readonly stderr: string
  readonly code: number
}

/** A Console that keeps what is written, for the answer. */
const capturing = (out: Array<string>, err: Array<string>): Console.Console => {
  const text = (args: ReadonlyArray<unknown>) => args.map((a) => (typeof a === "string" ? a : JSON.stringify(a))).join(" ")
  const to = (target: Array<string>) => (...args: ReadonlyArray<unknown>) => Effect.sync(() => void target.push(text(args)))
  const unsafeTo = (target: Array<string>) => (...args: ReadonlyArray<unknown>) => void target.push(text(args))
  const nothing = () => Effect.void
  const ignore = () => undefined
  return {
    [Console.TypeId]: Console.TypeId,
    assert: (condition, ...args) => (condition ? Effect.void : to(err)(...args)),
    clear: Effect.void,
    count: nothing,
    countReset: nothing,
    debug: to(err),
    dir: (item) => to(out)(item),
    dirxml: to(out),
    error: to(err),
    group: nothing,
    groupEnd: Effect.void,
    info: to(out),
    log: to(out),
    table: (data) => to(out)(data),
    time: nothing,
    timeEnd: nothing,
    timeLog: nothing,
    trace: to(err),
    warn: to(err),
    unsafe: {
      assert: (condition, ...args) => (condition ? undefined : unsafeTo(err)(...args)),
      clear: ignore,
      count: ignore,
      countReset: ignore,
      debug: unsafeTo(err),
      dir: (item) => unsafeTo(out)(item),
      dirxml: unsafeTo(out),
      error: unsafeTo(err),
      group: ignore,
      groupCollapsed: ignore,
      groupEnd: ignore,
      info: unsafeTo(out),
      log: unsafeTo(out),
      table: (data) => unsafeTo(out)(data),
      time: ignore,
      timeEnd: ignore,
      timeLog: ignore,
      trace: unsafeTo(err),
      warn: unsafeTo(err)
    }
  }
}

const messageOf = (e: unknown) => (typeof e === "object" && e !== null && "message" in e ? String(e.message) : String(e))

export const OperatorSocketLive = Layer.scopedDiscard(Effect.gen(function*() {
  const config = yield* AppConfig
  if (Option.isSome(config.databaseUrl)) return
  const path = join(config.dataDir, OPERATOR_SOCKET)
  const runtime = yield* Effect.runtime<Provisioning | SettleCaps | SqlClient.SqlClient>()
  const run = (args: ReadonlyArray<string>): Promise<OperatorAnswer> => {
    const out: Array<string> = []
    const err: Array<string> = []
    return Runtime.runPromise(runtime)(
      runOperatorCommand(args).pipe(
        Effect.provide(NodeContext.layer),
        Effect.withConsole(capturing(out, err)),
        Effect.as(0),
        Effect.catchAllCause((cause) =>
          Effect.sync(() => {
            const failure = cause._tag === "Fail" ? messageOf(cause.error) : "the command failed"
            if (failure !== "") err.push(`admin: ${failure}`)
            return 1
          })
        ),
        Effect.map((code) => ({ stdout: out.map((l) => `${l}\n`).join(""), stderr: err.map((l) => `${l}\n`).join(""), code }))
      )
    )
  }
  const server = createServer((socket) => {
    let input = ""
    socket.setEncoding("utf8")
    socket.on("data", (chunk: string) => {
      input += chunk
      const end = input.indexOf("\n")
      if (end < 0) {
        if (input.length > 64 * 1024) socket.destroy()
        return
      }
      let request: OperatorRequest
      try {
        request = JSON.parse(input.slice(0, end)) as OperatorRequest
        if (!Array.isArray(request.args) || !request.args.every((a) => typeof a === "string")) throw new Error("args")
      } catch {
        socket.end(`${JSON.stringify({ stdout: "", stderr: "admin: a malformed request\n", code: 2 })}\n`)
        return
      }
      void run(request.args).then((answer) => socket.end(`${JSON.stringify(answer)}\n`))
    })
    socket.on("error", () => socket.destroy())
  })
  yield* Effect.acquireRelease(
    Effect.async<boolean>((resume) => {
      // A socket file left by a process that died: this process holds the database now.
      if (existsSync(path)) rmSync(path, { force: true })
      server.once("error", () => resume(Effect.succeed(false)))
      server.listen(path, () => {
        chmodSync(path, 0o600)
        resume(Effect.succeed(true))
      })
    }),
    () => Effect.async<void>((resume) => {
      server.close(() => resume(Effect.void))
      rmSync(path, { force: true })
    })
  ).pipe(Effect.tap((listening) => listening ? Effect.void : Effect.logWarning(`operator socket ${path} could not be opened`)))
}))
