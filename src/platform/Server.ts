/**
 * Composition of the HTTP service: contract handlers, middleware, docs and the serving pipeline,
 * over the database, on a Node HTTP server. `ServiceLive` is what `npm start` and the tests run.
 */
import { HttpApiBuilder, HttpApiScalar, HttpServer } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { Effect, Layer, Logger, LogLevel } from "effect"
import { createServer } from "node:http"
import { MailroomApi } from "../Api.js"
import { AccountHttpLive } from "../account/Http.js"
import { AgentAccountsHttpLive } from "../identity/AgentAccountsHttp.js"
import { IdentityHttpLive, IdentityServicesLive } from "../identity/AuthHttp.js"
import { ClaimPageLive } from "../identity/ClaimPage.js"
import { DevicePageLive } from "../identity/DevicePage.js"
import { DeviceWeb } from "../identity/DeviceWeb.js"
import { IdentityMaintenanceLive } from "../identity/Maintenance.js"
import { Mailer } from "../mail/Mailer.js"
import { ServiceHttpLive } from "../service/Http.js"
import { ServiceRoutesLive } from "../service/Routes.js"
import { AuthenticationLive } from "./Authentication.js"
import { AppConfig } from "./Config.js"
import { Credentials } from "./Credentials.js"
import { DatabaseLive } from "./Database.js"
import { ErrorMappingLive } from "./ErrorMapping.js"
import { Idempotency } from "./Idempotency.js"
import { MaintenanceLive } from "./Maintenance.js"
import { RateLimiter } from "./RateLimiter.js"
import { requestPipeline } from "./RequestPipeline.js"

/** Services every area may use, built over the SqlClient. */
export const PlatformServicesLive = Layer.mergeAll(
  RateLimiter.Default,
  Idempotency.Default,
  Credentials.Default,
  Mailer.Default
)

export const ApiLive = HttpApiBuilder.api(MailroomApi).pipe(
  Layer.provide([ServiceHttpLive, AccountHttpLive, AgentAccountsHttpLive, IdentityHttpLive]),
  Layer.provide(AuthenticationLive)
)

/**
 * Like `HttpApiBuilder.serve`, but the request pipeline receives the API's app before its response
 * is written, so it can finalize and record the exact response (see RequestPipeline).
 */
const serve = HttpApiBuilder.httpApp.pipe(
  Effect.map((app) => HttpServer.serve(requestPipeline(app))),
  Layer.unwrapEffect,
  Layer.provide([HttpApiBuilder.Router.Live, HttpApiBuilder.Middleware.layer])
)

export const HttpLive = Layer.unwrapEffect(Effect.gen(function*() {
  const config = yield* AppConfig
  return serve.pipe(
    Layer.provide(HttpApiScalar.layer({ path: "/docs" })),
    Layer.provide(ServiceRoutesLive),
    Layer.provide(Layer.mergeAll(DevicePageLive, ClaimPageLive).pipe(Layer.provide([IdentityServicesLive, DeviceWeb.Default]))),
    Layer.provide(ErrorMappingLive),
    Layer.provide(ApiLive),
    HttpServer.withLogAddress,
    Layer.provide(NodeHttpServer.layer(createServer, { port: config.port, host: config.host }))
  )
}))

export const loggerLayer = Layer.unwrapEffect(Effect.map(AppConfig, (c) =>
  Layer.mergeAll(
    // logfmtLogger only formats; withConsoleLog makes it write (without it every log line was dropped).
    Logger.replace(Logger.defaultLogger, Logger.withConsoleLog(Logger.logfmtLogger)),
    // runMain installs its pretty logger first; one format per line, not two.
    Logger.remove(Logger.prettyLoggerDefault),
    Logger.minimumLogLevel(LogLevel.fromLiteral(capitalize(c.logLevel)))
  )
))

const capitalize = (s: string) => (s.charAt(0).toUpperCase() + s.slice(1)) as LogLevel.Literal

/** The whole service over an AppConfig. */
export const ServiceLive = Layer.mergeAll(HttpLive, MaintenanceLive, IdentityMaintenanceLive).pipe(
  Layer.provide(PlatformServicesLive),
  Layer.provide(DatabaseLive),
  Layer.provide(loggerLayer)
)
