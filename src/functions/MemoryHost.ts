/**
 * The host side of the MEMORY and ORG_MEMORY bindings: a unix-socket HTTP server speaking the
 * protocol workerd uses for a `kvNamespace` bound to an external service (`GET|PUT|DELETE
 * /<percent-encoded key>?urlencoded=true`, `GET /?prefix=&key_count_limit=&cursor=` for list).
 *
 * Who is calling comes only from headers workerd injects on the way out (the token of the workerd
 * process, which the tenant never sees, and the scope of the binding); a same-named header the
 * tenant sets is replaced by workerd. The token is looked up among the processes running an
 * invocation now, so a process between invocations (or gone) opens nothing. The key is one
 * decoded path segment, never a path.
 */
import { Effect, Option, Runtime } from "effect"
import { chmodSync } from "node:fs"
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import { keyProblem, type MemoryScope, MemoriesRepo, VALUE_MAX_BYTES } from "../memories/Repo.js"
import { PROCESS_HEADER } from "./Workerd.js"

export interface InvocationIdentity {
  readonly orgId: string
  readonly functionId: string
}

const LIST_DEFAULT = 1000
const BODY_LIMIT = VALUE_MAX_BYTES + 1024

const reply = (res: ServerResponse, status: number, body: string, type = "text/plain") => {
  res.writeHead(status, { "content-type": type, "content-length": Buffer.byteLength(body) })
  res.end(body)
}

const readBody = (req: IncomingMessage) =>
  new Promise<Buffer | undefined>((resolve, reject) => {
    const chunks: Array<Buffer> = []
    let size = 0
    req.on("data", (d: Buffer) => {
      size += d.length
      if (size <= BODY_LIMIT) chunks.push(d)
    })
    req.on("end", () => resolve(size > BODY_LIMIT ? undefined : Buffer.concat(chunks)))
    req.on("error", reject)
  })

const encodeCursor = (key: string) => Buffer.from(key, "utf8").toString("base64url")
const decodeCursor = (c: string | null) => (c === null || c === "" ? undefined : Buffer.from(c, "base64url").toString("utf8"))

export const startMemoryHost = (
  socketPath: string,
  identify: (token: string) => InvocationIdentity | undefined
): Effect.Effect<Server, never, MemoriesRepo> =>
  Effect.gen(function*() {
    const repo = yield* MemoriesRepo
    const runtime = yield* Effect.runtime<never>()
    const run = <A>(e: Effect.Effect<A>) => Runtime.runPromise(runtime)(e)

    const handle = async (req: IncomingMessage, res: ServerResponse) => {
      const token = req.headers[PROCESS_HEADER]
      const scopeName = req.headers["x-mailroom-scope"]
      const who = typeof token === "string" ? identify(token) : undefined
      if (who === undefined || (scopeName !== "function" && scopeName !== "org")) return reply(res, 403, "not a running invocation")
      const scope: MemoryScope = { orgId: who.orgId, functionId: scopeName === "function" ? who.functionId : null }
      const url = new URL(req.url ?? "/", "http://memory.invalid")
      const raw = url.pathname.slice(1)
      if (raw === "") {
        if (req.method !== "GET") return reply(res, 405, "method not allowed")
        const limitParam = Number(url.searchParams.get("key_count_limit") ?? LIST_DEFAULT)
        const limit = Number.isInteger(limitParam) && limitParam >= 1 ? Math.min(limitParam, LIST_DEFAULT) : LIST_DEFAULT
        const prefix = url.searchParams.get("prefix") ?? ""
        const after = decodeCursor(url.searchParams.get("cursor"))
        // PostgreSQL text holds no NUL: a prefix or cursor no key could match is refused, not a 500.
        if (prefix !== "" && keyProblem(prefix) !== undefined) return reply(res, 400, `prefix ${keyProblem(prefix)}`)
        if (after !== undefined && keyProblem(after) !== undefined) return reply(res, 400, "not a cursor of this list")
        const { rows } = await run(repo.list(scope, { prefix, after, limit }))
        const page = rows.slice(0, limit)
        const more = rows.length > limit
        return reply(res, 200, JSON.stringify({
          keys: page.map((r) => ({
            name: r.key,
            ...(r.expires_at === null ? {} : { expiration: Math.floor(r.expires_at.getTime() / 1000) })
          })),
          list_complete: !more,
          ...(more ? { cursor: encodeCursor(page[page.length - 1]!.key) } : {}),
          cacheStatus: null
        }), "application/json")
      }
      let key: string
      try {
        // Exactly one segment: a `/` inside a key arrives as %2F and stays part of the key.
        if (raw.includes("/")) return reply(res, 400, "a key is one percent-encoded path segment")
        key = decodeURIComponent(raw)
      } catch {
        return reply(res, 400, "the key is not valid percent-encoded UTF-8")
      }
      const problem = keyProblem(key)
      if (problem !== undefined) return reply(res, 400, `key ${problem}`)
      switch (req.method) {
        case "GET": {
          const row = await run(repo.get(scope, key))
          return Option.isNone(row) ? reply(res, 404, "") : reply(res, 200, row.value.value, "application/json")
        }
        case "DELETE": {
          await run(repo.remove(scope, key))
          return reply(res, 200, "")
        }
        case "PUT": {
          const body = await readBody(req)
          if (body === undefined) return reply(res, 413, `values are at most ${VALUE_MAX_BYTES} bytes`)
          const text = body.toString("utf8")
          let value: unknown
          try {
            value = JSON.parse(text)
          } catch {
            return reply(res, 400, "memory values are JSON text; store JSON.stringify(value)")
          }
          const stored = JSON.stringify(value)
          if (Buffer.byteLength(stored, "utf8") > VALUE_MAX_BYTES) return reply(res, 413, `values are at most ${VALUE_MAX_BYTES} bytes`)
          let ttl: number | undefined
          const ttlParam = url.searchParams.get("expiration_ttl")
          const expParam = url.searchParams.get("expiration")
          if (ttlParam !== null) ttl = Number(ttlParam)
          else if (expParam !== null) ttl = Number(expParam) - Math.floor(Date.now() / 1000)
          if (ttl !== undefined && (!Number.isInteger(ttl) || ttl < 1)) return reply(res, 400, "expiration must be in the future")
          const result = await run(Effect.either(repo.put(scope, key, stored, ttl)))
          if (result._tag === "Left") return reply(res, 409, result.left.message)
          return reply(res, 200, "")
        }
        default:
          return reply(res, 405, "method not allowed")
      }
    }

    const server = createServer((req, res) => {
      handle(req, res).catch(() => {
        if (!res.headersSent) reply(res, 500, "memory store unavailable")
        else res.destroy()
      })
    })
    yield* Effect.async<void>((resume) => {
      server.listen(socketPath, () => resume(Effect.void))
    })
    chmodSync(socketPath, 0o600)
    return server
  })
