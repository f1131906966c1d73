/** An HTTP receiver on 127.0.0.1 that records requests and answers as the test says. */
import { Effect } from "effect"
import { createServer, type IncomingHttpHeaders } from "node:http"

export interface Received {
  readonly method: string
  readonly path: string
  readonly headers: IncomingHttpHeaders
  readonly body: string
}

export interface Answer {
  status: number
  body: string
  headers?: Record<string, string>
}

export interface Receiver {
  readonly port: number
  readonly url: (path?: string) => string
  readonly received: Array<Received>
  /** What the next requests get (default 200 "ok"). */
  answer: Answer
}

export const startReceiver = Effect.acquireRelease(
  Effect.async<Receiver & { close: () => void }>((resume) => {
    const state: Receiver & { close: () => void } = {
      port: 0,
      url: (path = "/hook") => `http://127.0.0.1:${state.port}${path}`,
      received: [],
      answer: { status: 200, body: "ok" },
      close: () => server.close()
    }
    const server = createServer((req, res) => {
      const chunks: Array<Buffer> = []
      req.on("data", (c: Buffer) => chunks.push(c))
      req.on("end", () => {
        state.received.push({
          method: req.method ?? "",
          path: req.url ?? "",
          headers: req.headers,
          body: Buffer.concat(chunks).toString("utf8")
        })
        res.writeHead(state.answer.status, { "content-type": "text/plain", ...state.answer.headers })
        res.end(state.answer.body)
      })
    })
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      ;(state as { port: number }).port = typeof address === "object" && address !== null ? address.port : 0
      resume(Effect.succeed(state))
    })
  }),
  (r) => Effect.sync(() => r.close())
)
