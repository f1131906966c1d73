/**
 * Handlers of the live event interfaces. Both wait on the listen area's wake-ups (NOTIFY on
 * PostgreSQL, the in-process watcher on PGlite) and hold one of the organization's listen slots
 * while they wait, so they count on the same cap as waiting `listen` polls.
 */
import { HttpServerResponse } from "@effect/platform"
import { Chunk, Clock, Effect, Exit, Layer, Option, Scope, Stream } from "effect"
import { MailroomApi } from "../Api.js"
import { RateLimitExceeded, ValidationError } from "../contract/Errors.js"
import { CurrentPrincipal } from "../contract/Security.js"
import { DownloadTokens } from "../emails/DownloadTokens.js"
import { toEmail } from "../emails/Present.js"
import { LISTEN_MAX_WAITS_PER_ORG, ListenWakeups } from "../listen/Wakeups.js"
import * as ApiGroup from "../platform/ApiGroup.js"
import { AppConfig } from "../platform/Config.js"
import { requireWholeOrganization } from "../platform/InboxLimit.js"
import { EVENT_LOG_RETENTION_HOURS, KEEP_ALIVE_SECONDS, WAIT_DEFAULT_SECONDS } from "./Api.js"
import { EventLog, type LoggedEvent, type Position } from "./Log.js"
import { EmailWaits } from "./Waits.js"

const slotsTaken = (what: string) =>
  new RateLimitExceeded({
    message: `at most ${LISTEN_MAX_WAITS_PER_ORG} event streams, waits and listen polls may be open at once per organization; ` +
      `close one before opening another ${what}`,
    details: { limit: LISTEN_MAX_WAITS_PER_ORG, retry_after: 1 }
  })

/** One Server-Sent Event; the payload is one line of JSON (JSON escapes every line break). */
const frame = (e: LoggedEvent) => `id: ${e.eventId}\nevent: ${e.eventType}\ndata: ${e.payload}\n\n`

export const EventsHttpLive = ApiGroup.group(MailroomApi, "events", (handlers) =>
  Effect.gen(function*() {
    const waits = yield* EmailWaits
    const log = yield* EventLog
    const wakeups = yield* ListenWakeups
    const tokens = yield* DownloadTokens
    const config = yield* AppConfig

    /** Takes a listen slot for a scope the caller closes (a stream outlives its handler). */
    const takeSlot = (orgId: string) =>
      Effect.gen(function*() {
        const scope = yield* Scope.make()
        const taken = yield* Scope.extend(wakeups.slot(orgId), scope)
        if (!taken) {
          yield* Scope.close(scope, Exit.void)
          return Option.none<Scope.CloseableScope>()
        }
        return Option.some(scope)
      })

    return handlers
      .handle("stream", ({ headers, urlParams }) =>
        Effect.gen(function*() {
          const principal = yield* CurrentPrincipal
          yield* requireWholeOrganization(principal, "the event stream")
          const orgId = principal.orgId
          const types = urlParams.types ?? []
          const lastId = headers["last-event-id"]
          let start: Position
          if (lastId !== undefined) {
            const found = yield* log.positionOf(orgId, lastId)
            if (found === undefined) {
              const reason = `unknown event id, or older than ${EVENT_LOG_RETENTION_HOURS} h; reconnect without Last-Event-ID to start from now`
              return yield* new ValidationError({
                message: `last-event-id: ${reason}`,
                details: { issues: [{ field: "last-event-id", reason }] }
              })
            }
            start = found
          } else {
            start = yield* log.head
          }
          const slot = yield* takeSlot(orgId)
          if (Option.isNone(slot)) return yield* slotsTaken("stream")
          const events = Stream.unfoldChunkEffect(start, (position) =>
            Effect.gen(function*() {
              const deadline = (yield* Clock.currentTimeMillis) + KEEP_ALIVE_SECONDS * 1000
              const rows = yield* wakeups.pollEvents(orgId, deadline, log.after(orgId, position, types))
              if (rows.length === 0) return Option.some([Chunk.of(": keep-alive\n\n"), position] as const)
              // An event whose delivery was deleted since has no payload left: it is passed over.
              const frames = rows.flatMap((r) => (r.payload === null ? [] : [frame(r)]))
              return Option.some([Chunk.fromIterable(frames), rows[rows.length - 1]!.position] as const)
            }))
          const body = Stream.concat(Stream.make(": connected\nretry: 2000\n\n"), events).pipe(
            Stream.encodeText,
            Stream.ensuring(Scope.close(slot.value, Exit.void))
          )
          return HttpServerResponse.stream(body, {
            contentType: "text/event-stream",
            headers: { "cache-control": "no-cache", "x-accel-buffering": "no" }
          })
        }))
      .handle("waitForEmail", ({ urlParams }) =>
        Effect.gen(function*() {
          const principal = yield* CurrentPrincipal
          const orgId = principal.orgId
          const now = yield* Clock.currentTimeMillis
          const take = waits.firstMatch(principal, {
            after: urlParams.after ?? new Date(now),
            from: urlParams.from,
            subjectContains: urlParams.subject_contains,
            recipient: urlParams.recipient
          })
          let rows = yield* take
          const wait = urlParams.timeout_seconds ?? WAIT_DEFAULT_SECONDS
          if (rows.length === 0 && wait > 0) {
            rows = yield* Effect.gen(function*() {
              if (!(yield* wakeups.slot(orgId))) return yield* slotsTaken("wait")
              return yield* wakeups.pollEvents(orgId, now + wait * 1000, take)
            }).pipe(Effect.scoped)
          }
          const row = rows[0]
          if (row === undefined) return null
          return yield* toEmail(config.publicBaseUrl, row).pipe(Effect.provideService(DownloadTokens, tokens))
        }))
  })).pipe(Layer.provide(Layer.mergeAll(EventLog.Default, ListenWakeups.Default, EmailWaits.Default)))
