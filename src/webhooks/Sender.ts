/**
 * One HTTP POST of a webhook body to an already checked URL (see net/Ssrf.ts): the connection goes
 * to a checked address (the host name is kept for the Host header and TLS server name), redirects
 * are not followed, the whole attempt has a deadline and only the first bytes of the answer are kept.
 */
import { Effect } from "effect"
import { Agent as HttpAgent, request as httpRequest, type IncomingMessage } from "node:http"
import { Agent as HttpsAgent, request as httpsRequest } from "node:https"
import { isIP, type LookupFunction } from "node:net"
import type { CheckedUrl } from "../net/Ssrf.js"

export interface SendResult {
  /** null when no HTTP response arrived (timeout, connection error). */
  readonly statusCode: number | null
  readonly responseBody: string
  readonly responseHeaders: Readonly<Record<string, string>>
  readonly durationMs: number
  /** `timeout` or `connection_error` when no response arrived. */
  readonly errorCode: "timeout" | "connection_error" | null
  readonly error: string | null
}

export interface SendOptions {
  readonly target: CheckedUrl
  readonly body: string
  readonly headers: Readonly<Record<string, string>>
  readonly timeoutMs: number
  readonly maxResponseBytes: number
}

const readLimited = (res: IncomingMessage, max: number): Promise<string> =>
  new Promise((resolve) => {
    const chunks: Array<Buffer> = []
    let size = 0
    const done = () => resolve(Buffer.concat(chunks).subarray(0, max).toString("utf8"))
    res.on("data", (chunk: Buffer) => {
      if (size < max) chunks.push(chunk)
      size += chunk.length
      if (size >= max) {
        res.destroy()
        done()
      }
    })
    res.on("end", done)
    res.on("error", done)
    res.on("close", done)
  })

/**
 * Keep-alive agents, one per checked destination (scheme, address, port, host name): connections
 * are reused across deliveries, and a pooled socket can only lead to the address it was opened to.
 */
const agents = new Map<string, HttpAgent>()
const MAX_AGENTS = 256

const agentFor = (target: CheckedUrl, address: string) => {
  const key = `${target.url.protocol}//${address}:${target.port}/${target.hostname}`
  let agent = agents.get(key)
  if (agent === undefined) {
    if (agents.size >= MAX_AGENTS) {
      const [oldestKey, oldest] = agents.entries().next().value as [string, HttpAgent]
      oldest.destroy()
      agents.delete(oldestKey)
    }
    // As many idle sockets kept as may be busy: with fewer, a burst of attempts that ends together
    // closes the surplus, and the next burst opens them again (a connect per delivery under load).
    const options = { keepAlive: true, maxSockets: 64, maxFreeSockets: 64, timeout: 60_000 }
    agent = target.url.protocol === "https:" ? new HttpsAgent(options) : new HttpAgent(options)
    agents.set(key, agent)
  }
  return agent
}

export const postJson = (options: SendOptions): Effect.Effect<SendResult> =>
  Effect.async<SendResult>((resume) => {
    const started = performance.now()
    const { target } = options
    const pinned = target.addresses[0]!
    // Node resolves through this instead of DNS: the connection can only reach the checked address.
    const lookup: LookupFunction = (_hostname, opts, cb) => {
      if (typeof opts === "object" && opts !== null && (opts as { all?: boolean }).all) {
        ;(cb as (e: null, a: Array<{ address: string; family: number }>) => void)(null, [
          { address: pinned.address, family: pinned.family }
        ])
      } else cb(null, pinned.address, pinned.family)
    }
    let settled = false
    const finish = (r: Omit<SendResult, "durationMs">) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      resume(Effect.succeed({ ...r, durationMs: Math.round(performance.now() - started) }))
    }
    const body = Buffer.from(options.body, "utf8")
    const send = target.url.protocol === "https:" ? httpsRequest : httpRequest
    const req = send({
      protocol: target.url.protocol,
      hostname: target.hostname,
      port: target.port,
      path: `${target.url.pathname}${target.url.search}`,
      method: "POST",
      lookup,
      // SNI carries names only; an IP-literal URL sends none.
      ...(isIP(target.hostname) === 0 ? { servername: target.hostname } : {}),
      agent: agentFor(target, pinned.address),
      headers: {
        ...options.headers,
        "content-type": "application/json",
        "content-length": String(body.length),
        host: target.url.host
      }
    }, (res) => {
      void readLimited(res, options.maxResponseBytes).then((text) => {
        const headers: Record<string, string> = {}
        for (const [k, v] of Object.entries(res.headers)) if (typeof v === "string") headers[k] = v
        finish({ statusCode: res.statusCode ?? 0, responseBody: text, responseHeaders: headers, errorCode: null, error: null })
      })
    })
    const timer = setTimeout(() => {
      finish({
        statusCode: null,
        responseBody: "",
        responseHeaders: {},
        errorCode: "timeout",
        error: `no response within ${options.timeoutMs} ms`
      })
      req.destroy()
    }, options.timeoutMs)
    req.on("error", (e) =>
      finish({ statusCode: null, responseBody: "", responseHeaders: {}, errorCode: "connection_error", error: e.message })
    )
    req.end(body)
    return Effect.sync(() => {
      clearTimeout(timer)
      req.destroy()
    })
  })
