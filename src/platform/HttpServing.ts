/**
 * Serving an HttpApi through the request pipeline on a Node HTTP server. Knows no area: the
 * composition root (src/Server.ts) provides the API's handlers and the extra routes to `serveApi`.
 */
import { Etag, FileSystem, HttpApi, HttpApiBuilder, HttpMiddleware, HttpPlatform, HttpRouter, HttpServer, Path } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { Context, Effect, Layer, Scope } from "effect"
import { Admission } from "./Admission.js"
import { Idempotency } from "./Idempotency.js"
import { IncomingMessage, Server, type ServerResponse } from "node:http"
import { DRAIN_MAX_BYTES } from "./BodyLimits.js"
import { parseTrustedProxies } from "./ClientAddress.js"
import { AppConfig } from "./Config.js"
import { creatingOperations } from "./Idempotency.js"
import { CurrentRequestGate, RequestGate } from "./RequestGate.js"
import { HealthCheck, type HealthLane, isHealthProbe, makeHealthLane } from "./HealthLane.js"
import { requestPipeline } from "./RequestPipeline.js"

/**
 * Like `HttpApiBuilder.serve`, but the request pipeline receives the API's app before its response
 * is written, so it can finalize and record the exact response (see RequestPipeline).
 */
export const serveApi = Effect.gen(function*() {
  // Path parameters may be long: a memory key is up to 512 bytes of UTF-8, percent-encoded.
  const app = yield* HttpApiBuilder.httpApp.pipe(HttpRouter.withRouterConfig({ maxParamLength: 4096 }))
  const { api } = yield* HttpApi.Api
  const config = yield* AppConfig
  const gate = yield* CurrentRequestGate
  const proxies = parseTrustedProxies(config.trustedProxies.join(","))
  const served = requestPipeline(app, {
    createsResource: creatingOperations(api),
    maxInflight: config.maxInflightRequests,
    gate,
    trustedProxies: "ok" in proxies && proxies.entries.length > 0 ? proxies.ok : undefined
  })
  return Layer.scopedDiscard(Effect.mapInputContext(HttpServer.serveEffect(served), requestContext))
}).pipe(
  Layer.unwrapEffect,
  Layer.provide([HttpApiBuilder.Router.Live, HttpApiBuilder.Middleware.layer])
)

/**
 * The services a request starts with: only what the pipeline and the router read at request time.
 * Handlers carry the services of their own layers (HttpApiBuilder merges them in), so the rest of
 * the service's context, about fifty services, need not ride along: Effect copies a fiber's context
 * on every `provideService` and compares old and new contexts entry by entry when it restores one,
 * several times per request, and those copies and comparisons were an eighth of the CPU a
 * request took.
 */
const requestContext = (
  context: Context.Context<
    | HttpServer.HttpServer
    | Scope.Scope
    | Admission
    | Idempotency
    | HttpPlatform.HttpPlatform
    | Etag.Generator
    | FileSystem.FileSystem
    | Path.Path
  >
) =>
  Context.pick(
    HttpServer.HttpServer,
    Scope.Scope,
    Admission,
    Idempotency,
    HttpPlatform.HttpPlatform,
    Etag.Generator,
    FileSystem.FileSystem,
    Path.Path
  )(context)

/**
 * Idle keep-alive connections are kept 65 s (Node's default is 5 s). A client reuses an idle
 * connection until its own idle limit, computed from the `Keep-Alive: timeout=` this server
 * advertises minus a margin and checked on a coarse timer; a process stalled past the server's
 * deadline (a loaded machine) sends its next request on a connection the server is closing that
 * instant, and that request fails at the transport level ("fetch failed"). With 65 s that race
 * needs a connection idle for a minute, and a load balancer's usual 60 s idle limit ends first.
 */
export const KEEP_ALIVE_TIMEOUT_MS = 65_000
/**
 * A request whose body is read past its limit is not torn down. The platform destroys a body it
 * stops reading (past `MaxBodySize`: a chunked body, which declares no length the pipeline could
 * refuse first), and destroying an unfinished request resets the connection: the client's next
 * read fails before the 413 arrives. Instead the rest of the body is read and discarded, as Node
 * does with any body its handler left unread, up to `DRAIN_MAX_BYTES`; past that the connection
 * is closed.
 */
class DrainingIncomingMessage extends IncomingMessage {
  /** Bytes still accepted while draining; undefined until a destroy turned into a drain. */
  private drainLeft: number | undefined

  override destroy(error?: Error): this {
    if (this.complete || this.socket === null || this.socket.destroyed || this.drainLeft !== undefined) {
      return super.destroy(error)
    }
    this.drainLeft = DRAIN_MAX_BYTES
    this.removeAllListeners("data")
    this.resume()
    return this
  }

  // Counted where the parser hands over the body, so the bound holds whoever reads it (Node's own
  // discarding of an unread body, once the answer is sent, removes every `data` listener).
  override push(chunk: unknown, encoding?: BufferEncoding): boolean {
    if (this.drainLeft !== undefined && (typeof chunk === "string" || chunk instanceof Uint8Array)) {
      this.drainLeft -= chunk.length
      if (this.drainLeft < 0) {
        super.destroy()
        return false
      }
    }
    return super.push(chunk, encoding)
  }
}

/**
 * A Node HTTP server whose requests pass the admission gate before the app sees them (the gate
 * holds or refuses them at Node's level, before any fiber exists). The health probe is answered
 * beside the gate (HealthLane.ts).
 */
class GatedServer extends Server {
  constructor(private readonly gate: RequestGate, private readonly health: HealthLane) {
    super({ IncomingMessage: DrainingIncomingMessage })
  }

  override emit(event: string | symbol, ...args: Array<any>): boolean {
    if (event !== "request") return super.emit(event as string, ...args)
    const [req, res] = args as [IncomingMessage, ServerResponse]
    if (isHealthProbe(req)) this.health(req, res)
    else this.gate.admit(req, res, () => super.emit("request", req, res))
    return true
  }
}

const keepAliveServer = (gate: RequestGate, health: HealthLane) => () => {
  const server = new GatedServer(gate, health)
  server.keepAliveTimeout = KEEP_ALIVE_TIMEOUT_MS
  // Must outlast the keep-alive timeout, or an idle connection's next request is timed out early.
  server.headersTimeout = KEEP_ALIVE_TIMEOUT_MS + 1000
  server.once("close", () => gate.close())
  return server
}

/** Binds a served app (with every route and handler provided) to `HOST:PORT`. */
export const onNodeHttpServer = <A, E, R>(served: Layer.Layer<A, E, R>) =>
  Layer.unwrapEffect(Effect.gen(function*() {
    const config = yield* AppConfig
    const gate = new RequestGate(config.maxInflightRequests)
    const health = makeHealthLane(yield* HealthCheck, gate, yield* Effect.runtime<never>())
    return served.pipe(
      HttpServer.withLogAddress,
      // The request span's attributes (URL, every header) are computed even for a no-op span.
      HttpMiddleware.withTracerDisabledWhen(() => true),
      Layer.provide(NodeHttpServer.layer(keepAliveServer(gate, health), { port: config.port, host: config.host })),
      Layer.provide(Layer.succeed(CurrentRequestGate, gate))
    )
  }))
