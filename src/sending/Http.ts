/** Handlers of Sending. */
import { HttpApiBuilder } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Layer, Option } from "effect"
import { MailroomApi } from "../Api.js"
import { NotFound, NotScheduled } from "../contract/Errors.js"
import { decodeCursor, DEFAULT_PAGE_SIZE, pageOf } from "../contract/Paging.js"
import { LIMITS } from "../contract/Plans.js"
import { CurrentPrincipal } from "../contract/Security.js"
import { ValidationError } from "../contract/Errors.js"
import { SCHEDULE_MAX_DAYS } from "./Api.js"
import { sendBatch, sendInputOf } from "./Batch.js"
import { OutboundRelay } from "./Relay.js"
import { forwardInput, replyInput } from "./Replies.js"
import { type SentRow, SendingRepo, toSentEmail, toSentEmailDetail } from "./Repo.js"
import { Sender } from "./Sender.js"

const noSent = (id: string) => new NotFound({ message: `no sent email ${id}` })

const notScheduled = (row: SentRow) =>
  new NotScheduled({
    message: `sent email ${row.id} is ${row.status === "scheduled" || row.status === "sending" ? "being sent right now" : row.status}: only a scheduled send can be changed`,
    details: { status: row.status }
  })

export const SendingHttpLive = HttpApiBuilder.group(MailroomApi, "sending", (handlers) =>
  Effect.gen(function*() {
    const sender = yield* Sender
    const repo = yield* SendingRepo
    const relay = yield* OutboundRelay
    const sql = yield* SqlClient.SqlClient
    const provideSql = Effect.provideService(SqlClient.SqlClient, sql)
    const caller = Effect.map(CurrentPrincipal, (p) => p.orgId)
    const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

    /** A PATCH or cancel that found nothing to change: 404, or 409 with the state it is in. */
    const unchanged = (org: string, id: string) =>
      Effect.flatMap(repo.find(org, id), (found): Effect.Effect<never, NotFound | NotScheduled> =>
        Option.isNone(found) ? Effect.fail(noSent(id)) : Effect.fail(notScheduled(found.value)))

    return handlers
      .handle("send", ({ payload }) =>
        Effect.gen(function*() {
          const principal = yield* CurrentPrincipal
          const org = principal.orgId
          const row = yield* sender.submitAs(org, yield* sendInputOf(sender, org, payload), principal.automation)
          return toSentEmail(row)
        }))
      .handle("sendBatch", ({ payload }) =>
        Effect.flatMap(CurrentPrincipal, (principal) => sendBatch(sender, principal.orgId, payload.messages, principal.automation)))
      .handle("reply", ({ path, payload }) =>
        Effect.gen(function*() {
          const principal = yield* CurrentPrincipal
          const org = principal.orgId
          const input = yield* replyInput(org, path.id, payload).pipe(provideSql)
          return toSentEmail(yield* sender.submitAs(org, input, principal.automation))
        }))
      .handle("forward", ({ path, payload }) =>
        Effect.gen(function*() {
          const principal = yield* CurrentPrincipal
          const org = principal.orgId
          const input = yield* forwardInput(org, path.id, payload).pipe(provideSql)
          return toSentEmail(yield* sender.submitAs(org, input, principal.automation))
        }))
      .handle("list", ({ urlParams }) =>
        Effect.gen(function*() {
          const org = yield* caller
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
          const org = yield* caller
          const row = yield* Effect.flatMap(repo.find(org, path.id), Option.match({ onNone: () => Effect.fail(noSent(path.id)), onSome: Effect.succeed }))
          return toSentEmailDetail(row, row.content_discarded ? Option.none() : yield* repo.content(row.id))
        }))
      .handle("reschedule", ({ path, payload }) =>
        Effect.gen(function*() {
          const org = yield* caller
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
          const org = yield* caller
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
  })).pipe(Layer.provide(SendingRepo.Default))
