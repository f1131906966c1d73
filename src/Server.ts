/**
 * The composition root: every area's handlers, pages and background workers wired over the
 * platform services and the database. `ServiceLive` is what `npm start` and the tests run.
 *
 * A new area is a folder and a line here: its handlers in `AreaHandlers` (and its group in
 * `Api.ts`), its workers in `AreaWorkers`, a service other areas use in `AreaServicesLive`.
 */
import { OperatorSocketLive } from "./operator/Socket.js"
import { Provisioning } from "./identity/Provisioning.js"
import { SettleCaps } from "./payments/SettleCaps.js"
import { HttpApiBuilder } from "@effect/platform"
import { Effect, Layer } from "effect"
import { MailroomApi } from "./Api.js"
import { AccountHttpLive } from "./account/Http.js"
import { WebhookSecrets } from "./account/WebhookSecret.js"
import { DeliveryCountsMaintenanceLive } from "./deliveries/Counts.js"
import { DeliveryAttempts, DispatcherLive } from "./deliveries/Dispatcher.js"
import { DeliveryHook } from "./inbound/Enqueue.js"
import { DeliveriesHttpLive } from "./deliveries/Http.js"
import { OrgEvents } from "./events/OrgEvents.js"
import { DeliveryQueue } from "./deliveries/Queue.js"
import { DomainsHttpLive } from "./domains/Http.js"
import { DomainsRepo } from "./domains/Repo.js"
import { DownloadTokens } from "./emails/DownloadTokens.js"
import { DownloadsHttpLive, EmailsHttpLive } from "./emails/Http.js"
import { EndpointsHttpLive } from "./endpoints/Http.js"
import { EndpointsRepo } from "./endpoints/Repo.js"
import { FiltersHttpLive } from "./filters/Http.js"
import { FunctionsHttpLive } from "./functions/Http.js"
import { FunctionInvoker } from "./functions/Invoker.js"
import { FunctionsMaintenanceLive } from "./functions/Maintenance.js"
import { FunctionRuntime } from "./functions/Runtime.js"
import { AgentAccountsHttpLive } from "./identity/AgentAccountsHttp.js"
import { IdentityHttpLive, IdentityServicesLive } from "./identity/AuthHttp.js"
import { ClaimPageLive } from "./identity/ClaimPage.js"
import { DevicePageLive } from "./identity/DevicePage.js"
import { DeviceWeb } from "./identity/DeviceWeb.js"
import { IdentityMaintenanceLive } from "./identity/Maintenance.js"
import { EmailStoredHooks, InboundStore } from "./inbound/Store.js"
import { QuarantineHttpLive } from "./trust/Http.js"
import { QuarantineMaintenanceLive } from "./trust/Release.js"
import { Threading } from "./mail/Threading.js"
import { ThreadsHttpLive } from "./threads/Http.js"
import { EmbeddingBacklogLive } from "./search/Backlog.js"
import { EmbedderLive } from "./search/Embedder.js"
import { SearchHttpLive } from "./search/Http.js"
import { Recipients } from "./inbound/Recipients.js"
import { SmtpServerLive } from "./inbound/SmtpServer.js"
import { LocalReceiverLive } from "./inbound/Local.js"
import { WakeIntakeLive } from "./inbound/WakeIntake.js"
import { InboxHttpLive } from "./inbox/Http.js"
import { ListenHttpLive } from "./listen/Http.js"
import { MemoriesHttpLive } from "./memories/Http.js"
import { TemplatesHttpLive } from "./templates/Http.js"
import { WakesHttpLive } from "./wake/Http.js"
import { WakeSchedulerLive, type WakeSchedulerOptions } from "./wake/Scheduler.js"
import { WakeFiring } from "./wake/Firing.js"
import { WakesRepo } from "./wake/Repo.js"
import { PaymentsHttpLive } from "./payments/Http.js"
import { DemoHttpLive } from "./demo/Http.js"
import { PaymentsLive } from "./payments/Service.js"
import { EmailRail, EmailRailWorkerLive, type EmailRailWorkerOptions } from "./payments/EmailRail.js"
import { SettlementReconcilerLive } from "./payments/Reconciler.js"
import { Mailer } from "./mail/Mailer.js"
import { SendingHttpLive } from "./sending/Http.js"
import { SendApprovalLive } from "./drafts/SendApproval.js"
import { SuppressionsHttpLive } from "./bounces/Http.js"
import { SendOutcomesLive } from "./bounces/SendOutcomes.js"
import { OutboundRelay } from "./sending/Relay.js"
import { LocalDelivery } from "./sending/LocalDelivery.js"
import { SendSchedulerLive, type SendSchedulerOptions } from "./sending/Scheduler.js"
import { Sender } from "./sending/Sender.js"
import { SendingRepo } from "./sending/Repo.js"
import { Dns } from "./net/Dns.js"
import { Admission } from "./platform/Admission.js"
import { AuthenticationLive } from "./platform/Authentication.js"
import { PolicyLive, ScopePolicyLive } from "./policy/Policy.js"
import { ApiKeysHttpLive } from "./apikeys/Http.js"
import { DraftsHttpLive } from "./drafts/Http.js"
import { DraftReviewPageLive } from "./drafts/Page.js"
import { Approvals } from "./drafts/Approvals.js"
import { DraftsRepo } from "./drafts/Repo.js"
import { Credentials } from "./platform/Credentials.js"
import { DatabaseLive } from "./platform/Database.js"
import { apiMiddleware } from "./platform/ErrorMapping.js"
import { onNodeHttpServer, serveApi } from "./platform/HttpServing.js"
import { Idempotency } from "./platform/Idempotency.js"
import { loggerLayer } from "./platform/Logging.js"
import { MaintenanceLive } from "./platform/Maintenance.js"
import { ProcessStatsLive } from "./platform/ProcessStats.js"
import { RateLimiter } from "./platform/RateLimiter.js"
import { RouteTable } from "./platform/RouteTable.js"
import { RegistryDirectory } from "./registries/Directory.js"
import { RegistriesHttpLive } from "./registries/Http.js"
import { RouteResolver } from "./routes/Resolver.js"
import { RoutesHttpLive } from "./routes/Http.js"
import { InboxesHttpLive } from "./inboxes/Http.js"
import { RoutesRepo } from "./routes/Repo.js"
import { HealthCheckLive, ServiceHttpLive } from "./service/Http.js"
import { ServiceRoutesLive } from "./service/Routes.js"
import { EventsHttpLive } from "./events/Http.js"
import { McpHttpLive } from "./mcp/Http.js"
import { EventLogMaintenanceLive } from "./events/Log.js"

export { loggerLayer } from "./platform/Logging.js"

/** Services every area may use, built over the SqlClient. */
export const PlatformServicesLive = Layer.mergeAll(
  Admission.Default,
  RateLimiter.Default,
  Idempotency.Default,
  Credentials.Default,
  DownloadTokens.Default,
  InboundStore.Default,
  Mailer.Default
).pipe(
  // One threading service (its lookup batches and recent assignments) for every way mail is stored.
  Layer.provideMerge(Threading.Default)
)

/** Payments and their email rail (which mails through the send path and hooks mail ingestion). */
const PaymentsEmailLive = EmailRail.Default.pipe(
  Layer.provideMerge(PaymentsLive.pipe(Layer.provide(OrgEvents.Default), Layer.provide(DeliveryQueue.Default))),
  Layer.provide(Sender.Default)
)

/**
 * The work stored with every accepted email, wherever it is stored (SMTP, local delivery, wake
 * firings, quarantine releases): its delivery, and the payments email rail's job row.
 */
const EmailStoredHooksLive = Layer.effect(
  EmailStoredHooks,
  Effect.map(Effect.all([DeliveryHook, EmailRail]), ([delivery, rail]) => ({ hooks: [delivery.hook, rail.hook] }))
).pipe(Layer.provide(DeliveryHook.Default))

/**
 * Services of the delivery pipeline shared by the HTTP handlers, SMTP ingestion and workers, over
 * the local-delivery port given (`LocalDelivery.Live`; tests that model two services joined by a
 * relay pass `LocalDelivery.Off`).
 */
const deliveryServicesOver = (localDelivery: Layer.Layer<LocalDelivery>) => Layer.mergeAll(
  Recipients.Default,
  DeliveryAttempts.Default,
  DeliveryQueue.Default,
  EndpointsRepo.Default,
  // One resolver (and its batch workers) for SMTP ingestion and the inbox readiness report.
  RouteResolver.Default,
  // One functions runtime (its queue, memory socket and processes) for deliveries and the API.
  FunctionInvoker.Default,
  FunctionRuntime.Default,
  // One verified-sender lookup (and its batch workers) for ingestion; the send path resolves handles with it.
  RegistryDirectory.Default,
  // One embedder (the built-in model in its own process, or the HTTP client) for search queries and the embedding backlog.
  EmbedderLive,
  // Events that are not about one email (payments), through the same delivery path.
  OrgEvents.Default,
  // One outbound relay pool and one send path for the API and the scheduled-send timers.
  OutboundRelay.Default,
  Sender.Default,
  // The port through which the send path hands mail for our own addresses to the inbound side.
  localDelivery,
  // Payments: the HTTP flow's handlers and the email rail's ingestion and workers share one service.
  EmailStoredHooksLive.pipe(Layer.provideMerge(PaymentsEmailLive))
).pipe(
  // The send path's outcome events and suppression list, from the bounce area (src/sending/Outcomes.ts).
  Layer.provide(SendOutcomesLive),
  // The send path reports refused loops (send.loop_detected) through OrgEvents.
  Layer.provide([RouteResolver.Default, DeliveryQueue.Default, FunctionInvoker.Default, RegistryDirectory.Default, OrgEvents.Default]),
  Layer.provide(localDelivery),
  Layer.provide([EndpointsRepo.Default, DomainsRepo.Default, RoutesRepo.Default, WebhookSecrets.Default, Dns.Default, DeliveryQueue.Default])
)

/**
 * The delivery pipeline's services with the local receiver registered into the send path's port
 * (and the wake firing's way into the inbound pipeline, src/wake/Intake.ts),
 * once the hooks stored with each email exist (sending/LocalDelivery.ts says why it is bound late):
 * every composition of the service delivers mail for its own addresses internally.
 */
export const deliveryServices = (localDelivery: Layer.Layer<LocalDelivery> = LocalDelivery.Live) =>
  Layer.merge(LocalReceiverLive.pipe(Layer.provide(WebhookSecrets.Default)), WakeIntakeLive).pipe(
    Layer.provideMerge(deliveryServicesOver(localDelivery))
  )

export const DeliveryServicesLive = deliveryServices()

/** The handlers of every group of `MailroomApi`, one line per area. */
const AreaHandlers = [
  ServiceHttpLive,
  AccountHttpLive,
  AgentAccountsHttpLive,
  IdentityHttpLive,
  EmailsHttpLive,
  QuarantineHttpLive,
  DownloadsHttpLive,
  DeliveriesHttpLive,
  InboxHttpLive,
  InboxesHttpLive,
  ListenHttpLive,
  DomainsHttpLive,
  EndpointsHttpLive,
  FiltersHttpLive,
  RoutesHttpLive,
  FunctionsHttpLive,
  MemoriesHttpLive,
  TemplatesHttpLive,
  RegistriesHttpLive,
  WakesHttpLive,
  PaymentsHttpLive,
  DemoHttpLive,
  ThreadsHttpLive,
  SearchHttpLive,
  // Sends held for approval are the drafts area's (src/sending/Approval.ts).
  SendingHttpLive.pipe(Layer.provide(SendApprovalLive)),
  SuppressionsHttpLive,
  EventsHttpLive,
  ApiKeysHttpLive,
  DraftsHttpLive
] as const

export const ApiLive = HttpApiBuilder.api(MailroomApi).pipe(
  Layer.provide(AreaHandlers),
  Layer.provide(AuthenticationLive.pipe(Layer.provide(ScopePolicyLive)))
)

/** Routes outside `/v1`: the reference, discovery documents, the MCP endpoint and the browser pages. */
const PagesLive = Layer.mergeAll(
  ServiceRoutesLive,
  McpHttpLive.pipe(Layer.provide([AuthenticationLive.pipe(Layer.provide(ScopePolicyLive)), HttpApiBuilder.Middleware.layer])),
  Layer.mergeAll(DevicePageLive, ClaimPageLive).pipe(Layer.provide([IdentityServicesLive, DeviceWeb.Default])),
  DraftReviewPageLive.pipe(Layer.provide(Approvals.Default), Layer.provide(DraftsRepo.Default))
)

export const HttpLive = onNodeHttpServer(
  serveApi.pipe(
    Layer.provide(PagesLive),
    Layer.provide(HttpApiBuilder.middleware(MailroomApi, apiMiddleware(RouteTable.of(MailroomApi)))),
    Layer.provide(ApiLive),
    Layer.provide(PolicyLive)
  )
).pipe(Layer.provide(HealthCheckLive))

/** The wake timers with what firing needs (tests start them with a shorter poll). */
export const WakeTimersLive = (options: WakeSchedulerOptions = {}) =>
  WakeSchedulerLive(options).pipe(Layer.provide([WakesRepo.Default, WakeFiring.Default]), Layer.provide(WebhookSecrets.Default))

/** The scheduled-send timers (tests start them with a shorter poll and retry delays). */
export const SendTimersLive = (options: SendSchedulerOptions = {}) => SendSchedulerLive(options).pipe(Layer.provide(SendingRepo.Default))

/** The email rail's workers: payment replies settled and answered (tests start them with a shorter poll). */
export const PaymentEmailWorkersLive = (options: EmailRailWorkerOptions = {}) => EmailRailWorkerLive(options)

/** Background work of the areas: SMTP ingestion, delivery workers, maintenance loops. */
const AreaWorkers = [
  SmtpServerLive,
  DispatcherLive(),
  MaintenanceLive,
  IdentityMaintenanceLive,
  DeliveryCountsMaintenanceLive,
  FunctionsMaintenanceLive,
  WakeTimersLive(),
  SendTimersLive(),
  PaymentEmailWorkersLive(),
  // Payments a stopped process left settling, ended from what the chain says.
  SettlementReconcilerLive(),
  ProcessStatsLive,
  EventLogMaintenanceLive,
  QuarantineMaintenanceLive,
  // `npm run admin` beside this process on the embedded database.
  OperatorSocketLive.pipe(Layer.provide([Provisioning.Default, SettleCaps.Default]))
] as const

/**
 * The whole service over an AppConfig. Every worker of `WORKERS` (platform/Workers.ts) runs it; all
 * but the first leave out the embedding backlog, so that one process feeds the one model process.
 */
export const serviceLive = (options: { readonly embeddingBacklog: boolean }) =>
  Layer.mergeAll(HttpLive, ...AreaWorkers, options.embeddingBacklog ? EmbeddingBacklogLive() : Layer.empty).pipe(
    Layer.provide(DeliveryServicesLive),
    Layer.provide(PlatformServicesLive),
    Layer.provide(DatabaseLive),
    Layer.provide(loggerLayer)
  )

export const ServiceLive = serviceLive({ embeddingBacklog: true })
