/**
 * Composition of the HTTP service: contract handlers, middleware, docs and the serving pipeline,
 * over the database, on a Node HTTP server. `ServiceLive` is what `npm start` and the tests run.
 */
import { HttpApiBuilder, HttpApiScalar, HttpMiddleware, HttpServer } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { Effect, Layer, Logger, LogLevel } from "effect"
import { createServer } from "node:http"
import { MailroomApi } from "../Api.js"
import { AccountHttpLive } from "../account/Http.js"
import { DeliveryCountsMaintenanceLive } from "../deliveries/Counts.js"
import { DeliveriesHttpLive } from "../deliveries/Http.js"
import { DeliveryAttempts, DispatcherLive } from "../deliveries/Dispatcher.js"
import { OnEmailStoredLive } from "../deliveries/Enqueue.js"
import { DeliveryQueue } from "../deliveries/Queue.js"
import { DownloadsHttpLive, EmailsHttpLive } from "../emails/Http.js"
import { DownloadTokens } from "../emails/DownloadTokens.js"
import { AgentAccountsHttpLive } from "../identity/AgentAccountsHttp.js"
import { SmtpServerLive } from "../inbound/SmtpServer.js"
import { ProcessStatsLive } from "./ProcessStats.js"
import { Recipients } from "../inbound/Recipients.js"
import { InboundStore } from "../inbound/Store.js"
import { IdentityHttpLive, IdentityServicesLive } from "../identity/AuthHttp.js"
import { ClaimPageLive } from "../identity/ClaimPage.js"
import { DevicePageLive } from "../identity/DevicePage.js"
import { DeviceWeb } from "../identity/DeviceWeb.js"
import { IdentityMaintenanceLive } from "../identity/Maintenance.js"
import { Mailer } from "../mail/Mailer.js"
import { ServiceHttpLive } from "../service/Http.js"
import { DomainsHttpLive } from "../domains/Http.js"
import { EndpointsHttpLive } from "../endpoints/Http.js"
import { FiltersHttpLive } from "../filters/Http.js"
import { InboxHttpLive } from "../inbox/Http.js"
import { RoutesHttpLive } from "../routes/Http.js"
import { ListenHttpLive } from "../listen/Http.js"
import { ServiceRoutesLive } from "../service/Routes.js"
import { WebhookSecrets } from "../account/WebhookSecret.js"
import { DomainsRepo } from "../domains/Repo.js"
import { EndpointsRepo } from "../endpoints/Repo.js"
import { Dns } from "../net/Dns.js"
import { RouteResolver } from "../routes/Resolver.js"
import { RoutesRepo } from "../routes/Repo.js"
import { Admission } from "./Admission.js"
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
  Admission.Default,
  RateLimiter.Default,
  Idempotency.Default,
  Credentials.Default,
  DownloadTokens.Default,
  InboundStore.Default,
  Mailer.Default
)

/** Services of the delivery pipeline shared by the HTTP handlers, SMTP ingestion and workers. */
export const DeliveryServicesLive = Layer.mergeAll(
  Recipients.Default,
  DeliveryAttempts.Default,
  OnEmailStoredLive,
  DeliveryQueue.Default,
  EndpointsRepo.Default,
  // One resolver (and its batch workers) for SMTP ingestion and the inbox readiness report.
  RouteResolver.Default
).pipe(
  Layer.provide([RouteResolver.Default, DeliveryQueue.Default]),
  Layer.provide([EndpointsRepo.Default, DomainsRepo.Default, RoutesRepo.Default, WebhookSecrets.Default, Dns.Default])
)

export const ApiLive = HttpApiBuilder.api(MailroomApi).pipe(
  Layer.provide([ServiceHttpLive, AccountHttpLive, AgentAccountsHttpLive, IdentityHttpLive]),
  Layer.provide([EmailsHttpLive, DownloadsHttpLive, DeliveriesHttpLive, InboxHttpLive, ListenHttpLive]),
  Layer.provide([DomainsHttpLive, EndpointsHttpLive, FiltersHttpLive, RoutesHttpLive]),
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
    // The request span's attributes (URL, every header) are computed even for a no-op span.
    HttpMiddleware.withTracerDisabledWhen(() => true),
    Layer.provide(NodeHttpServer.layer(createServer, { port: config.port, host: config.host }))
  )
}))

export const loggerLayer = Layer.unwrapEffect(Effect.map(AppConfig, (c) =>
  Layer.mergeAll(
    // logfmtLogger only formats; withConsoleLog makes it write (without it every log line was dropped).
    Logger.replace(Logger.defaultLogger, Logger.withConsoleLog(Logger.logfmtLogger)),
    // runMain installs its pretty logger first; one format per line, not two.
    Logger.remove(Logger.prettyLoggerDefault),
    Logger.minimumLogLevel(LogLevel.fromLiteral(capitalize(c.logLevel))),
    // No tracer is exported anywhere, yet every span (one per request in the HTTP tracer middleware
    // with its URL and header attributes, one per SQL statement, one per withSpan) was built and
    // dropped on every request: measurable CPU for nothing. Spans become no-ops.
    Layer.setTracerEnabled(false)
  )
))

const capitalize = (s: string) => (s.charAt(0).toUpperCase() + s.slice(1)) as LogLevel.Literal

/** The whole service over an AppConfig. */
export const ServiceLive = Layer.mergeAll(
  HttpLive,
  SmtpServerLive,
  DispatcherLive(),
  MaintenanceLive,
  IdentityMaintenanceLive,
  DeliveryCountsMaintenanceLive,
  ProcessStatsLive
).pipe(
  Layer.provide(DeliveryServicesLive),
  Layer.provide(PlatformServicesLive),
  Layer.provide(DatabaseLive),
  Layer.provide(loggerLayer)
)
