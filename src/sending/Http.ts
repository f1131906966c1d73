/** Handlers of Sending. */
import { HttpApp, HttpServerResponse } from "@effect/platform"
import { Clock, Effect, Layer, Option } from "effect"
import { MailroomApi } from "../Api.js"
import { NotFound, NotScheduled, ValidationError } from "../contract/Errors.js"
import { decodeCursor, DEFAULT_PAGE_SIZE, pageOf } from "../contract/Paging.js"
import { LIMITS } from "../contract/Plans.js"
import { CurrentPrincipal, type Principal } from "../contract/Security.js"
import * as ApiGroup from "../platform/ApiGroup.js"
import { SCHEDULE_MAX_DAYS } from "./Api.js"
import { sendBatch, sendInputOf } from "./Batch.js"
import { OutboundRelay } from "./Relay.js"
import { SendingRepo } from "./Repo.js"
import { type SentRow, toSentEmail, toSentEmailDetail } from "./SentRows.js"
import { SendRequests } from "./Requests.js"
import { Sender, type SendInput } from "./Sender.js"

const noSent = (id: string) => new NotFound({ message: `no sent email ${id}` })

const notScheduled = (row: SentRow) =>
  new NotScheduled({
    message: `sent email ${row.id} is ${row.status === "scheduled" || row.status === "sending" ? "being sent right now" : row.status}: only a scheduled send can be changed`,
    details: { status: row.status }
  })

/** A send held for approval answers 202 with its draft, not 201. */
const status202 = HttpApp.appendPreResponseHandler((_req, res) =>
  Effect.succeed(res.status === 201 ? HttpServerResponse.setStatus(res, 202) : res)
)

export const SendingHttpLive = ApiGroup.group(MailroomApi, "sending", (handlers) =>
  Effect.gen(function*() {
    const sender = yield* Sender
    const repo = yield* SendingRepo
    const relay = yield* OutboundRelay
    const caller = Effect.map(CurrentPrincipal, (p) => p.orgId)
    const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))
    const requests = yield* SendRequests
    const { defaultFrom, sendOrHold } = requests

    /** One send's answer: the sent email (201), or its draft (202). */
    const submitOrHold = (input: SendInput) =>
      Effect.gen(function*() {
        const submitted = yield* sendOrHold(yield* CurrentPrincipal, input)
        return "draft" in submitted ? yield* Effect.as(status202, submitted.draft) : submitted.email
      })

    /** A PATCH or cancel that found nothing to change: 404, or 409 with the state it is in. */
    const unchanged = (org: Principal, id: string) =>
      Effect.flatMap(repo.find(org, id), (found): Effect.Effect<never, NotFound | NotScheduled> =>
        Option.isNone(found) ? Effect.fail(noSent(id)) : Effect.fail(notScheduled(found.value)))

    return handlers
      .handle("send", ({ payload }) =>
        Effect.gen(function*() {
          const principal = yield* CurrentPrincipal
          return yield* submitOrHold(yield* sendInputOf(defaultFrom(principal), payload))
        }))
      .handle("sendBatch", ({ payload }) =>
        Effect.flatMap(CurrentPrincipal, (principal) =>
          sendBatch(defaultFrom(principal), payload.messages, (input) => sendOrHold(principal, input))))
      .handle("reply", ({ path, payload }) =>
        Effect.gen(function*() {
          const input = yield* requests.replyInput(yield* CurrentPrincipal, path.id, payload)
          return yield* submitOrHold(input)
        }))
      .handle("forward", ({ path, payload }) =>
        Effect.gen(function*() {
          const input = yield* requests.forwardInput(yield* CurrentPrincipal, path.id, payload)
          return yield* submitOrHold(input)
        }))
      .handle("list", ({ urlParams }) =>
        Effect.gen(function*() {
          const org = yield* CurrentPrincipal
          const after = yield* decodeCursor(urlParams.cursor)
          const limit = urlParams.limit ?? DEFAULT_PAGE_SIZE
          const { rows, total } = yield* repo.list(org, limit, after, {
            status: urlParams.status,
            to: urlParams.to,
            dateFrom: urlParams.date_from,
            dateTo: urlParams.date_to,
            inboxId: urlParams.inbox_id
          })
          return pageOf(rows, limit, total, toSentEmail)
        }))
      .handle("get", ({ path }) =>
        Effect.gen(function*() {
          const org = yield* CurrentPrincipal
          const row = yield* Effect.flatMap(repo.find(org, path.id), Option.match({ onNone: () => Effect.fail(noSent(path.id)), onSome: Effect.succeed }))
          return toSentEmailDetail(row, row.content_discarded ? Option.none() : yield* repo.content(row.id))
        }))
      .handle("reschedule", ({ path, payload }) =>
        Effect.gen(function*() {
          const org = yield* CurrentPrincipal
          const at = yield* now
          const t = payload.send_at.getTime()
          if (t <= at.getTime() || t > at.getTime() + SCHEDULE_MAX_DAYS * 86_400_000) {
            const reason = t <= at.getTime() ? "must be in the future" : `must be at most ${SCHEDULE_MAX_DAYS} days ahead`
            return yield* new ValidationError({ message: `send_at: ${reason}`, details: { issues: [{ field: "send_at", reason }] } })
          }
          const row = yield* repo.reschedule(org, path.id, payload.send_at, at)
          if (Option.isNone(row)) return yield* unchanged(org, path.id)
          return toSentEmail(row.value)
        }))
      .handle("cancel", ({ path }) =>
        Effect.gen(function*() {
          const org = yield* CurrentPrincipal
          const row = yield* repo.cancel(org, path.id, yield* now)
          if (Option.isNone(row)) return yield* unchanged(org, path.id)
          return toSentEmail(row.value)
        }))
      .handle("outboundStatus", () =>
        Effect.gen(function*() {
          const org = yield* caller
          const at = yield* now
          const facts = yield* sender.orgFacts(org)
          const limits = LIMITS[facts.plan]
          const [check, usage, scheduled] = yield* Effect.all([relay.check, repo.usage(org, at), repo.scheduledCount(org)], {
            concurrency: "unbounded"
          })
          return {
            relay: check.relay,
            reachable: check.reachable,
            checked_at: check.checkedAt,
            limits: { send_per_hour: limits.send_per_hour, send_per_day: limits.send_per_day },
            usage: { last_hour: usage.hour, today: usage.day },
            remaining: {
              hour: Math.max(0, limits.send_per_hour - usage.hour),
              day: Math.max(0, limits.send_per_day - usage.day)
            },
            scheduled
          }
        }))
  })).pipe(Layer.provide([SendingRepo.Default, SendRequests.Default]))
