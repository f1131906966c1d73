/** Handlers of the Wake area. */
import { Clock, Effect, Layer, Option } from "effect"
import { MailroomApi } from "../Api.js"
import { Policy } from "../policy/Policy.js"
import { WebhookSecrets } from "../account/WebhookSecret.js"
import { Conflict, NotFound, ValidationError } from "../contract/Errors.js"
import { decodeCursor, DEFAULT_PAGE_SIZE, pageOf } from "../contract/Paging.js"
import { CurrentPrincipal } from "../contract/Security.js"
import { DomainsRepo } from "../domains/Repo.js"
import { EndpointsRepo } from "../endpoints/Repo.js"
import { EndpointsService } from "../endpoints/Service.js"
import { FunctionsRepo } from "../functions/Repo.js"
import { Dns } from "../net/Dns.js"
import { AppConfig } from "../platform/Config.js"
import { PAYLOAD_MAX_BYTES } from "./Api.js"
import { WakeFiring } from "./Firing.js"
import { wakeAddress } from "../mail/WakeMessage.js"
import * as ApiGroup from "../platform/ApiGroup.js"
import { toAllowlist, toWake, toWatch, WakesRepo } from "./Repo.js"
import { checkSchedule } from "./Schedule.js"

const invalid = (field: string, reason: string) =>
  new ValidationError({ message: `${field}: ${reason}`, details: { issues: [{ field, reason }] } })

export const WakesHttpLive = ApiGroup.group(MailroomApi, "wakes", (handlers) =>
  Effect.gen(function*() {
    const repo = yield* WakesRepo
    const functions = yield* FunctionsRepo
    const endpoints = yield* EndpointsService
    const firing = yield* WakeFiring
    const config = yield* AppConfig
    const policy = yield* Policy
    const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

    const entitledOrg = Effect.gen(function*() {
      const { orgId } = yield* CurrentPrincipal
      yield* policy.require(orgId, "wakes.use")
      return orgId
    })

    const functionOf = (org: string, id: string) =>
      Effect.flatMap(functions.find(org, id), Option.match({
        onNone: () => Effect.fail(new NotFound({ message: `no function ${id}` })),
        onSome: Effect.succeed
      }))

    const wakeOf = (org: string, id: string) =>
      Effect.flatMap(repo.find(org, id), Option.match({
        onNone: () => Effect.fail(new NotFound({ message: `no wake ${id}` })),
        onSome: Effect.succeed
      }))

    return handlers
      .handle("create", ({ payload }) =>
        Effect.gen(function*() {
          const org = yield* entitledOrg
          const at = yield* now
          const checked = checkSchedule(payload, at)
          if ("problem" in checked) return yield* invalid(checked.field, checked.problem)
          const payloadText = payload.command.payload === undefined ? null : JSON.stringify(payload.command.payload)
          if (payloadText !== null && Buffer.byteLength(payloadText, "utf8") > PAYLOAD_MAX_BYTES) {
            return yield* invalid("command.payload", `must be at most ${PAYLOAD_MAX_BYTES} bytes of JSON`)
          }
          const fn = yield* functionOf(org, payload.function_id)
          // The wake address delivers to the function's endpoint: made (a route target) if it has none.
          yield* endpoints.forFunction(org, fn.id)
          const row = yield* repo.insert({
            orgId: org,
            functionId: fn.id,
            type: payload.command.type,
            payload: payloadText,
            kind: checked.schedule.kind,
            value: checked.schedule.value,
            nextRunAt: checked.first
          })
          return toWake(row)
        }))
      .handle("list", ({ urlParams }) =>
        Effect.gen(function*() {
          const org = yield* entitledOrg
          const after = yield* decodeCursor(urlParams.cursor)
          const limit = urlParams.limit ?? DEFAULT_PAGE_SIZE
          const { rows, total } = yield* repo.list(org, limit, after, {
            functionId: urlParams.function_id,
            status: urlParams.status
          })
          return pageOf(rows, limit, total, toWake)
        }))
      .handle("get", ({ path }) => Effect.flatMap(entitledOrg, (org) => Effect.map(wakeOf(org, path.id), toWake)))
      .handle("cancel", ({ path }) =>
        Effect.gen(function*() {
          const org = yield* entitledOrg
          const current = yield* wakeOf(org, path.id)
          if (current.status === "canceled") return toWake(current)
          if (current.status === "completed") {
            return yield* new Conflict({ message: `wake ${path.id} has completed: there is nothing left to cancel` })
          }
          const canceled = yield* repo.cancel(org, path.id, yield* now)
          // A firing completed it meanwhile: say so rather than claim a cancel that did nothing.
          if (Option.isNone(canceled)) return yield* new Conflict({ message: `wake ${path.id} completed meanwhile` })
          return toWake(canceled.value)
        }))
      .handle("run", ({ path }) =>
        Effect.gen(function*() {
          const org = yield* entitledOrg
          const wake = yield* wakeOf(org, path.id)
          if (wake.status === "canceled") return yield* new Conflict({ message: `wake ${path.id} is canceled` })
          const at = yield* now
          // Checked for a stored copy like a retried firing: two runs in the same millisecond are one email.
          yield* firing.fire(wake, at, true).pipe(
            Effect.catchTag("FiringFailed", (e) => Effect.fail(new Conflict({ message: `the wake did not fire: ${e.reason}` })))
          )
          return toWake(yield* repo.ranNow(wake.id, at))
        }))
      .handle("watchThread", ({ path, payload }) =>
        Effect.gen(function*() {
          const org = yield* entitledOrg
          const at = yield* now
          const checked = checkSchedule({ in: payload.within }, at)
          if ("problem" in checked) return yield* invalid("within", checked.problem)
          const command = payload.wake.command
          const payloadText = command.payload === undefined ? null : JSON.stringify(command.payload)
          if (payloadText !== null && Buffer.byteLength(payloadText, "utf8") > PAYLOAD_MAX_BYTES) {
            return yield* invalid("wake.command.payload", `must be at most ${PAYLOAD_MAX_BYTES} bytes of JSON`)
          }
          if (!(yield* repo.threadExists(org, path.id))) return yield* new NotFound({ message: `no thread ${path.id}` })
          const fn = yield* functionOf(org, payload.wake.function_id)
          yield* endpoints.forFunction(org, fn.id)
          const row = yield* repo.insert({
            orgId: org,
            functionId: fn.id,
            type: command.type,
            payload: payloadText,
            kind: checked.schedule.kind,
            value: checked.schedule.value,
            nextRunAt: checked.first,
            watch: { threadId: path.id, within: checked.schedule.value }
          })
          return toWatch(row)
        }))
      .handle("getAllowlist", ({ path }) =>
        Effect.gen(function*() {
          const org = yield* entitledOrg
          const fn = yield* functionOf(org, path.id)
          return toAllowlist(fn.id, wakeAddress(fn.id, config.managedInboxDomain), yield* repo.allowlist(fn.id))
        }))
      .handle("putAllowlist", ({ path, payload }) =>
        Effect.gen(function*() {
          const org = yield* entitledOrg
          const fn = yield* functionOf(org, path.id)
          const senders = [...new Set(payload.senders.map((s) => s.trim().toLowerCase()))].sort()
          // Mail to the wake address needs the function's endpoint to go anywhere.
          yield* endpoints.forFunction(org, fn.id)
          const row = yield* repo.setAllowlist(org, fn.id, senders, yield* now)
          return toAllowlist(fn.id, wakeAddress(fn.id, config.managedInboxDomain), Option.some(row))
        }))
  })).pipe(
    Layer.provide([WakesRepo.Default, WakeFiring.Default, EndpointsService.Default]),
    Layer.provide([FunctionsRepo.Default, EndpointsRepo.Default, DomainsRepo.Default, Dns.Default, WebhookSecrets.Default])
  )
