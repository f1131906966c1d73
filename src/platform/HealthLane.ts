/**
 * `GET /v1/health` (and `HEAD`) without a body, answered at the Node server beside the admission
 * gate, before the Effect HTTP stack: a load balancer polls it many times a second on every
 * instance, so it should cost about what a bare server's answer costs. The answer is the operation's own: the success
 * body its schema encodes, or the same `service_unavailable` envelope (the database did not answer;
 * the process admits no request now, with `Retry-After`), the `x-request-id` header, the access
 * line at `LOG_LEVEL=info` and the SQL counters' operation. The operation stays declared in the
 * HttpApi (OpenAPI, typed clients) and its handler answers every other form of the request (a
 * query string, another method, a body).
 */
import { Cause, Context, Effect, Exit, FiberRef, FiberRefs, LogLevel, Option, Runtime } from "effect"
import type { IncomingMessage, ServerResponse } from "node:http"
import { envelopeOf, ServiceUnavailable } from "../contract/Errors.js"
import { accessLine, newRequestId } from "./RequestContext.js"
import type { RequestGate } from "./RequestGate.js"
import { HEALTH_PATH, SHED_RETRY_AFTER_SECONDS, unhealthyEnvelope } from "./Shedding.js"
import * as SqlCounters from "./SqlCounters.js"

/** What the health operation checks and answers; provided by the area that owns the operation. */
export class HealthCheck extends Context.Tag("mailroom/HealthCheck")<HealthCheck, {
  /** Succeeds while the service is healthy (its database answers). */
  readonly probe: Effect.Effect<void, ServiceUnavailable>
  /** The healthy answer's body, encoded by the operation's success schema. */
  readonly healthyBody: string
}>() {}

export type HealthLane = (req: IncomingMessage, res: ServerResponse) => void

/**
 * Whether the lane answers this request (the gate's server asks before admission). Only a request
 * without a body: one with a body goes to the handler, whose pipeline bounds what it reads.
 */
export const isHealthProbe = (req: IncomingMessage) =>
  // Exactly the path: with a query string the target differs, and the handler answers.
  req.url === HEALTH_PATH && (req.method === "GET" || req.method === "HEAD") &&
  (req.headers["content-length"] === undefined || req.headers["content-length"] === "0") &&
  req.headers["transfer-encoding"] === undefined

export const makeHealthLane = (
  check: Context.Tag.Service<HealthCheck>,
  gate: RequestGate,
  runtime: Runtime.Runtime<never>
): HealthLane => {
  const logs = LogLevel.greaterThanEqual(
    LogLevel.Info,
    FiberRefs.getOrDefault(runtime.fiberRefs, FiberRef.currentMinimumLogLevel)
  )
  const unhealthyBody = JSON.stringify(unhealthyEnvelope(gate.cap))
  const run = Runtime.runCallback(runtime)

  return (req, res) => {
    const method = req.method!
    const operation = SqlCounters.begin(`http ${method} ${HEALTH_PATH}`)
    const requestId = newRequestId()
    const started = Date.now()
    const send = (status: number, body: string, extra?: Record<string, string>) => {
      SqlCounters.end(operation)
      if (res.headersSent || res.destroyed) return
      res.writeHead(status, {
        "content-type": "application/json",
        "content-length": Buffer.byteLength(body),
        ...extra,
        "x-request-id": requestId
      })
      // Node sends no body for HEAD, with the length the GET would have.
      res.end(body)
      if (logs) run(accessLine(method, HEALTH_PATH, status, requestId, started))
    }
    if (gate.full) return send(503, unhealthyBody, { "retry-after": String(SHED_RETRY_AFTER_SECONDS) })
    run(check.probe, {
      onExit: (exit) => {
        if (Exit.isSuccess(exit)) return send(200, check.healthyBody)
        const failure = Cause.failureOption(exit.cause)
        const error = Option.isSome(failure) ? failure.value : new ServiceUnavailable({ message: "the health check did not finish" })
        send(503, JSON.stringify(envelopeOf(error)))
      }
    })
  }
}
