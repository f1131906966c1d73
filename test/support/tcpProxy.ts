/** A TCP proxy the test can cut: `down()` drops every connection and refuses new ones until `up()`. */
import { Effect } from "effect"
import { connect, createServer, type Socket } from "node:net"

export interface TcpProxy {
  readonly port: number
  readonly down: () => void
  readonly up: () => void
  readonly close: () => void
}

export const openTcpProxy = (targetHost: string, targetPort: number) =>
  new Promise<TcpProxy>((resolve) => {
    let open = true
    const sockets = new Set<Socket>()
    const server = createServer((client) => {
      if (!open) return client.destroy()
      const upstream = connect(targetPort, targetHost)
      sockets.add(client)
      sockets.add(upstream)
      const drop = () => {
        client.destroy()
        upstream.destroy()
        sockets.delete(client)
        sockets.delete(upstream)
      }
      client.on("error", drop).on("close", drop)
      upstream.on("error", drop).on("close", drop)
      client.pipe(upstream)
      upstream.pipe(client)
    })
    server.listen(0, "127.0.0.1", () => {
      const a = server.address()
      resolve({
        port: typeof a === "object" && a !== null ? a.port : 0,
        down: () => {
          open = false
          for (const s of sockets) s.destroy()
          sockets.clear()
        },
        up: () => {
          open = true
        },
        close: () => {
          for (const s of sockets) s.destroy()
          server.close()
        }
      })
    })
  })

export const startTcpProxy = (targetHost: string, targetPort: number) =>
  Effect.acquireRelease(Effect.promise(() => openTcpProxy(targetHost, targetPort)), (p) => Effect.sync(() => p.close()))
