/**
 * The host side of the MAILROOM binding: a unix-socket HTTP server between workerd and the
 * service's own HTTP port. workerd sets the process's token on every request (replacing any header
 * of that name the tenant wrote); the gate forwards only while that process runs an invocation,
 * with a bearer credential for the process's function that never enters workerd, so neither the
 * tenant nor its process ever holds a credential. Anything else is refused.
 */
import { chmodSync } from "node:fs"
import { createServer, type IncomingMessage, request, type Server, type ServerResponse } from "node:http"
import { PROCESS_HEADER } from "./Workerd.js"

export interface GateTarget {
  readonly host: string
  readonly port: number
}

const refuse = (res: ServerResponse, status: number, message: string) => {
  const body = JSON.stringify({ success: false, error: { code: status === 403 ? "forbidden" : "service_unavailable", message } })
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) })
  res.end(body)
}

export const startServiceGate = (
  socketPath: string,
  target: GateTarget,
  /** The bearer credential for the running process this token names, or undefined when none runs. */
  credentialFor: (token: string) => Promise<string | undefined>
): Promise<Server> => {
  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const token = req.headers[PROCESS_HEADER]
    const credential = typeof token === "string" ? await credentialFor(token) : undefined
    if (credential === undefined) return refuse(res, 403, "not a running invocation")
    const headers: Record<string, string | Array<string> | undefined> = { ...req.headers, authorization: `Bearer ${credential}` }
    delete headers[PROCESS_HEADER]
    const upstream = request({ host: target.host, port: target.port, method: req.method, path: req.url, headers }, (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers)
      answer.pipe(res)
    })
    upstream.on("error", () => {
      if (!res.headersSent) refuse(res, 503, "the service could not be reached")
      else res.destroy()
    })
    req.on("aborted", () => upstream.destroy())
    req.pipe(upstream)
  }
  const server = createServer((req, res) => {
    handle(req, res).catch(() => {
      if (!res.headersSent) refuse(res, 503, "the service could not be reached")
      else res.destroy()
    })
  })
  return new Promise((resolve, reject) => {
    server.once("error", reject)
    server.listen(socketPath, () => {
      server.off("error", reject)
      chmodSync(socketPath, 0o600)
      resolve(server)
    })
  })
}
