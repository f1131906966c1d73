/**
 * A scripted outbound SMTP relay for tests: plain TCP on 127.0.0.1 speaking just enough SMTP, so a
 * test decides exactly what the service's relay meets. By default every message is accepted
 * (`250`) and kept raw; `script` holds what the next transactions meet, in order: a reply at a
 * stage (`{stage: "data", reply: "550 5.7.1 no"}`), silence (`"stall"`), a dropped connection
 * (`"drop"`) or a line that is not SMTP (`"garbage"`). `refuse()` stops listening (connection
 * refused) until `accept()`.
 */
import { Effect } from "effect"
import { createServer, type Server, type Socket } from "node:net"

export type Stage = "greeting" | "mail" | "rcpt" | "data"
export type Action = string | "stall" | "drop" | "garbage"

export interface ScriptStep {
  readonly stage: Stage
  readonly action: Action
}

export interface RelayMessage {
  readonly from: string
  readonly to: ReadonlyArray<string>
  readonly raw: Buffer
  readonly at: number
}

export interface TestRelay {
  readonly port: number
  readonly url: string
  readonly messages: Array<RelayMessage>
  readonly script: Array<ScriptStep>
  /** DATA commands that reached the end of their message (accepted or not). */
  readonly dataEnds: { count: number }
  /** Closes every open connection (the next message opens a new one and meets the greeting). */
  readonly dropConnections: () => void
  readonly refuse: () => Promise<void>
  readonly accept: () => Promise<void>
}

const listen = (server: Server, port: number) =>
  new Promise<number>((resolve, reject) => {
    server.once("error", reject)
    server.listen(port, "127.0.0.1", () => {
      server.off("error", reject)
      const a = server.address()
      resolve(typeof a === "object" && a !== null ? a.port : 0)
    })
  })

export const startTestRelay = Effect.acquireRelease(
  Effect.promise(async () => {
    const messages: Array<RelayMessage> = []
    const script: Array<ScriptStep> = []
    const dataEnds = { count: 0 }
    const sockets = new Set<Socket>()

    const handle = (socket: Socket) => {
      sockets.add(socket)
      socket.on("close", () => sockets.delete(socket)).on("error", () => socket.destroy())
      let buffer = ""
      let inData = false
      let dataChunks: Array<string> = []
      let from = ""
      let to: Array<string> = []
      let current: ScriptStep | undefined
      /** What this connection meets at `stage`: a transaction takes the next step of the script at MAIL. */
      const at = (stage: Stage): Action | undefined => {
        if (stage === "greeting" && script[0]?.stage === "greeting") current = script.shift()
        if (stage === "mail" && script[0] !== undefined && script[0].stage !== "greeting") current = script.shift()
        if (current?.stage !== stage) return undefined
        const action = current.action
        current = undefined
        return action
      }
      const act = (action: Action | undefined, otherwise: string) => {
        if (action === undefined) return socket.write(`${otherwise}\r\n`)
        if (action === "stall") return
        if (action === "drop") return socket.destroy()
        if (action === "garbage") return socket.write("this is not smtp\r\n")
        socket.write(`${action}\r\n`)
      }
      act(at("greeting"), "220 relay.test ESMTP")
      socket.on("data", (chunk) => {
        buffer += chunk.toString("latin1")
        while (true) {
          if (inData) {
            const end = buffer.indexOf("\r\n.\r\n")
            if (end < 0) return
            dataChunks.push(buffer.slice(0, end + 2))
            buffer = buffer.slice(end + 5)
            inData = false
            dataEnds.count++
            const raw = Buffer.from(dataChunks.join("").replace(/\r\n\.\./g, "\r\n."), "latin1")
            const action = at("data")
            if (action === undefined || /^2/.test(action)) messages.push({ from, to, raw, at: Date.now() })
            act(action, "250 2.0.0 queued")
            dataChunks = []
            continue
          }
          const nl = buffer.indexOf("\r\n")
          if (nl < 0) return
          const line = buffer.slice(0, nl)
          buffer = buffer.slice(nl + 2)
          const verb = line.slice(0, 4).toUpperCase()
          if (verb === "EHLO" || verb === "HELO") socket.write("250-relay.test\r\n250-8BITMIME\r\n250 SMTPUTF8\r\n")
          else if (verb === "MAIL") {
            from = /<([^>]*)>/.exec(line)?.[1] ?? ""
            to = []
            act(at("mail"), "250 2.1.0 ok")
          } else if (verb === "RCPT") {
            to.push((/<([^>]*)>/.exec(line)?.[1] ?? "").toLowerCase())
            act(at("rcpt"), "250 2.1.5 ok")
          } else if (verb === "DATA") {
            inData = true
            socket.write("354 go ahead\r\n")
          } else if (verb === "RSET" || verb === "NOOP") socket.write("250 ok\r\n")
          else if (verb === "QUIT") {
            socket.write("221 bye\r\n")
            socket.end()
          } else socket.write("502 unknown\r\n")
        }
      })
    }

    let server = createServer(handle)
    const port = await listen(server, 0)
    const relay: TestRelay = {
      port,
      url: `smtp://127.0.0.1:${port}`,
      messages,
      script,
      dataEnds,
      dropConnections: () => {
        for (const s of sockets) s.destroy()
      },
      refuse: () =>
        new Promise<void>((resolve) => {
          for (const s of sockets) s.destroy()
          server.close(() => resolve())
        }),
      accept: async () => {
        server = createServer(handle)
        await listen(server, port)
      }
    }
    return { relay, close: () => new Promise<void>((resolve) => {
      for (const s of sockets) s.destroy()
      server.close(() => resolve())
    }) }
  }),
  ({ close }) => Effect.promise(close)
).pipe(Effect.map(({ relay }) => relay))
