/**
 * Webhook receivers for delivery tests: a node:http server whose behaviour is chosen by path
 * (`/ok`, `/confirm`, `/fail`, `/gone`, `/slow`, `/redirect`), recording every request with its raw
 * body; and an independent check of the Mailroom signature (written here, not imported).
 */
import { Effect } from "effect"
import { createHmac, timingSafeEqual } from "node:crypto"
import { createServer, type IncomingHttpHeaders } from "node:http"

export interface Hit {
  readonly path: string
  readonly headers: IncomingHttpHeaders
  readonly body: string
  readonly at: number
}

export interface Hooks {
  readonly url: (path: string) => string
  readonly hits: Array<Hit>
  readonly on: (path: string) => Array<Hit>
}

export const startHooks = Effect.acquireRelease(
  Effect.async<Hooks & { close: () => void }>((resume) => {
    const hits: Array<Hit> = []
    let port = 0
    const server = createServer((req, res) => {
      const chunks: Array<Buffer> = []
      req.on("data", (c: Buffer) => chunks.push(c))
      req.on("end", () => {
        const path = (req.url ?? "").split("?")[0]!
        hits.push({ path, headers: req.headers, body: Buffer.concat(chunks).toString("utf8"), at: Date.now() })
        const base = path.replace(/\/\d+$/, "")
        switch (base) {
          case "/confirm":
            res.writeHead(200, { "mailroom-confirmed": "yes" }).end("confirmed")
            return
          case "/fail":
            res.writeHead(500).end("boom")
            return
          case "/gone":
            res.writeHead(410).end("gone")
            return
          case "/slow":
            setTimeout(() => res.writeHead(200).end("late"), 3000)
            return
          case "/redirect":
            res.writeHead(302, { location: `http://127.0.0.1:${port}/ok` }).end()
            return
          default:
            res.writeHead(200).end("ok")
        }
      })
    })
    server.keepAliveTimeout = 100
    server.listen(0, "127.0.0.1", () => {
      const a = server.address()
      port = typeof a === "object" && a !== null ? a.port : 0
      resume(Effect.succeed({
        url: (path: string) => `http://127.0.0.1:${port}${path}`,
        hits,
        on: (path: string) => hits.filter((h) => h.path === path),
        close: () => {
          server.closeAllConnections()
          server.close()
        }
      }))
    })
  }),
  (h) => Effect.sync(() => h.close())
)

/**
 * Verifies `Mailroom-Signature: t=…,v1=…[,v1=…]` over `t.<raw body>` with HMAC-SHA256 of the
 * secret, accepting the header when any `v1` matches (during a rotation it carries two).
 */
export const verifySignature = (header: string | undefined, body: string, secret: string, nowSeconds = Date.now() / 1000) => {
  if (header === undefined) return false
  const pairs = header.split(",").map((kv) => kv.split("=") as [string, string])
  const t = Number(pairs.find(([k]) => k === "t")?.[1])
  if (!Number.isFinite(t) || Math.abs(nowSeconds - t) > 300) return false
  const expected = Buffer.from(createHmac("sha256", Buffer.from(secret, "utf8")).update(`${t}.${body}`).digest("hex"))
  return pairs.some(([k, v]) => {
    const given = Buffer.from(v ?? "", "utf8")
    return k === "v1" && given.length === expected.length && timingSafeEqual(given, expected)
  })
}

/** Polls until `check` holds (or fails after `ms`). */
export const eventually = <A>(check: () => A | undefined | false, ms = 15_000, what = "condition") =>
  Effect.promise(async () => {
    const until = Date.now() + ms
    for (;;) {
      const v = check()
      if (v !== undefined && v !== false) return v
      if (Date.now() > until) throw new Error(`timed out waiting for ${what}`)
      await new Promise((r) => setTimeout(r, 50))
    }
  })
