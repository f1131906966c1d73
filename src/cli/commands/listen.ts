/**
 * `mailroom listen --forward-to URL`: opens a listen session, long-polls it and POSTs each
 * delivery's exact body with the signature headers the service computed, so a local handler
 * verifies `Mailroom-Signature` with the account's webhook secret as it would in production.
 */
import { HttpClient, HttpClientRequest } from "@effect/platform"
import { Console, Duration, Effect, Option, Schedule } from "effect"
import { hostname } from "node:os"
import type { ListenEvent } from "../../listen/Api.js"
import { CliFailure } from "../Failure.js"
import { authedClient } from "../Session.js"
import type { Handler } from "../Spec.js"
import type * as S from "../Specs.js"
import { note } from "../Terminal.js"

const FORWARD_TIMEOUT = Duration.seconds(15)

interface Forwarded {
  readonly delivery_id: string
  readonly event_id: string
  readonly event_type: string
  readonly status: number | null
  readonly error: string | null
}

/** Tracing headers: the CLI's own spans are nobody else's business, and a handler must not see them. */
const TRACING_HEADERS = new Set(["b3", "traceparent", "tracestate", "baggage"])

/**
 * POSTs one delivery to the local URL with the service's headers (signature, Mailroom-Event-Id,
 * Mailroom-Attempt, …) and nothing of the CLI's tracing.
 */
export const forward = (client: HttpClient.HttpClient, url: string, event: ListenEvent) => {
  const http = HttpClient.withTracerPropagation(client, false)
  const headers = Object.fromEntries(Object.entries(event.headers).filter(([k]) => !TRACING_HEADERS.has(k.toLowerCase())))
  return HttpClientRequest.post(url).pipe(
    HttpClientRequest.setHeaders({ ...headers, "user-agent": "Mailroom-CLI-listen/1.0" }),
    // The payload string is the exact body that was signed: sent as is, never re-serialized.
    HttpClientRequest.bodyText(event.payload, "application/json"),
    http.execute,
    Effect.flatMap((res) => Effect.as(res.text.pipe(Effect.ignore), res.status)),
    Effect.scoped,
    Effect.timeoutFail({ duration: FORWARD_TIMEOUT, onTimeout: () => "timeout" }),
    Effect.match({
      onFailure: (e): Forwarded => ({
        delivery_id: event.delivery_id,
        event_id: event.event_id,
        event_type: event.event_type,
        status: null,
        error: typeof e === "string" ? e : e.message
      }),
      onSuccess: (status): Forwarded => ({
        delivery_id: event.delivery_id,
        event_id: event.event_id,
        event_type: event.event_type,
        status,
        error: null
      })
    })
  )
}

export const listen: Handler<typeof S.listen> = (o) =>
  Effect.gen(function*() {
    let url: URL
    try {
      url = new URL(o.forwardTo)
    } catch {
      return yield* new CliFailure({ message: `--forward-to: not a URL: ${o.forwardTo}`, usage: true })
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      return yield* new CliFailure({ message: "--forward-to must be an http(s) URL", usage: true })
    }
    const { client, target } = yield* authedClient
    const http = yield* HttpClient.HttpClient
    const session = yield* Effect.acquireRelease(
      client.listen.createSession({ payload: { device_name: hostname().slice(0, 80) || "mailroom-cli" }, headers: {} }),
      // Ctrl-C or the last event: end the session so the service stops queueing copies for it.
      (s) => client.listen.deleteSession({ path: { id: s.id } }).pipe(Effect.ignore)
    )
    yield* note(
      `Ready: forwarding this organization's new deliveries to ${url.href} (session ${session.id}). Press Ctrl-C to stop.`
    )
    let forwarded = 0
    const limit = Option.getOrElse(o.maxEvents, () => Number.POSITIVE_INFINITY)
    // A dropped connection or a restarting service is retried; a lasting outage ends with exit 4.
    const poll = client.listen.events({ path: { id: session.id }, urlParams: { wait: 25 } }).pipe(
      Effect.retry({
        while: (e) => e._tag === "RequestError",
        schedule: Schedule.exponential("500 millis").pipe(Schedule.intersect(Schedule.recurs(6)))
      })
    )
    while (forwarded < limit) {
      const events = yield* poll
      for (const event of events) {
        if (forwarded >= limit) break
        const result = yield* forward(http, url.href, event)
        forwarded++
        if (target.json) yield* Console.log(JSON.stringify(result))
        else {
          const outcome = result.status !== null ? `HTTP ${result.status}` : `failed: ${result.error}`
          yield* Console.log(`${new Date().toISOString()}  ${event.event_type}  ${event.delivery_id}  → ${outcome}`)
        }
      }
    }
  }).pipe(Effect.scoped)
