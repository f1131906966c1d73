/** Handlers of the Endpoints area. */
import { HttpApp, HttpServerResponse } from "@effect/platform"
import { Effect, Layer, Option } from "effect"
import { MailroomApi } from "../Api.js"
import { WebhookSecrets } from "../account/WebhookSecret.js"
import { NotFound } from "../contract/Errors.js"
import { decodeCursor, DEFAULT_PAGE_SIZE, pageOf } from "../contract/Paging.js"
import { CurrentPrincipal } from "../contract/Security.js"
import { DomainsRepo } from "../domains/Repo.js"
import { Dns } from "../net/Dns.js"
import * as ApiGroup from "../platform/ApiGroup.js"
import { noStore } from "../platform/HttpHeaders.js"
import { EndpointsRepo, toEndpoint } from "./Repo.js"
import { EndpointsService } from "./Service.js"
import { EndpointTester } from "./TestSend.js"

/** An existing function endpoint answered by POST /endpoints: 200, not 201. */
const status200 = HttpApp.appendPreResponseHandler((_req, res) =>
  Effect.succeed(res.status === 201 ? HttpServerResponse.setStatus(res, 200) : res)
)

export const EndpointsHttpLive = ApiGroup.group(MailroomApi, "endpoints", (handlers) =>
  Effect.gen(function*() {
    const repo = yield* EndpointsRepo
    const service = yield* EndpointsService
    const tester = yield* EndpointTester
    const orgId = Effect.map(CurrentPrincipal, (p) => p.orgId)
    return handlers
      .handle("create", ({ payload }) =>
        Effect.gen(function*() {
          const result = yield* service.create(yield* orgId, payload)
          if (!result.created) yield* status200
          return toEndpoint(result.row)
        }))
      .handle("list", ({ urlParams }) =>
        Effect.gen(function*() {
          const after = yield* decodeCursor(urlParams.cursor)
          const limit = urlParams.limit ?? DEFAULT_PAGE_SIZE
          const { rows, total } = yield* repo.list(yield* orgId, limit, after)
          return pageOf(rows, limit, total, toEndpoint)
        }))
      .handle("update", ({ path, payload }) =>
        Effect.map(Effect.flatMap(orgId, (org) => service.update(org, path.id, payload)), toEndpoint))
      .handle("remove", ({ path }) =>
        Effect.gen(function*() {
          const removed = yield* repo.deactivate(yield* orgId, path.id)
          return yield* Option.match(removed, {
            onNone: () => Effect.fail(new NotFound({ message: `no endpoint ${path.id}` })),
            onSome: (r) => Effect.succeed(toEndpoint(r))
          })
        }))
      .handle("test", ({ path }) =>
        Effect.gen(function*() {
          const org = yield* orgId
          // Never replayed from a derived idempotency key: every test is a fresh send.
          yield* noStore
          return yield* tester.test(org, path.id, yield* repo.managedInboxOf(org))
        }))
  })).pipe(
    Layer.provide([EndpointsService.Default, EndpointTester.Default]),
    Layer.provide([EndpointsRepo.Default, DomainsRepo.Default, Dns.Default, WebhookSecrets.Default])
  )
