/**
 * Listening ports checked before the service starts anything: an occupied port stops it with one
 * line naming the port and its variable, before any listener says it is listening (the HTTP and
 * SMTP listeners start side by side, so one could otherwise announce itself while the other fails).
 */
import { Data, Effect } from "effect"
import { createServer } from "node:net"

/** Exit code of a start refused because a port is taken (EADDRINUSE on Linux). */
export const PORT_IN_USE_EXIT = 98

export class PortInUse extends Data.TaggedError("PortInUse")<{
  readonly port: number
  readonly variable: string
  readonly code: string
}> {
  override get message() {
    return this.code === "EADDRINUSE"
      ? `port ${this.port} (${this.variable}) is already in use`
      : `port ${this.port} (${this.variable}) cannot be opened: ${this.code}`
  }
}

/** Binds and releases `host:port`; fails with PortInUse if that is refused. Port 0 always passes. */
const probe = (host: string, port: number, variable: string) =>
  port === 0 ? Effect.void : Effect.async<void, PortInUse>((resume) => {
    const server = createServer()
    server.once("error", (e: NodeJS.ErrnoException) => resume(Effect.fail(new PortInUse({ port, variable, code: e.code ?? String(e) }))))
    server.listen({ port, host, exclusive: true }, () => server.close(() => resume(Effect.void)))
  })

export const ensurePortsFree = (host: string, ports: ReadonlyArray<{ readonly port: number; readonly variable: string }>) =>
  Effect.forEach(ports, ({ port, variable }) => probe(host, port, variable), { discard: true })

/** A listener's own bind failure (the port was taken after the check), as the same error. */
export const asPortInUse = (port: number, variable: string) => (cause: unknown) => {
  const code = typeof cause === "object" && cause !== null && "code" in cause ? String(cause.code) : undefined
  return code === "EADDRINUSE" || code === "EACCES" || code === "EADDRNOTAVAIL" ? new PortInUse({ port, variable, code }) : undefined
}
