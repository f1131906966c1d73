/**
 * `mailroom listen --forward-to URL`: opens a listen session, long-polls it and POSTs each
 * delivery's exact body with the signature headers the service computed, so a local handler
 * verifies `Mailroom-Signature` with the account's webhook secret as it would in production.
 */
import { Command, Options } from "@effect/cli"
import { HttpClient, HttpClientRequest } from "@effect/platform"
import { Console, Duration, Effect, Option, Schedule } from "effect"
import { hostname } from "node:os"
import type { ListenEvent } from "../../listen/Api.js"
import { CliFailure } from "../Failure.js"
import { authedClient } from "../Session.js"
import { note } from "../Terminal.js"

const FORWARD_TIMEOUT = Duration.seconds(15)

interface Forwarded {
  readonly delivery_id: string
  readonly event_id: string
  readonly event_type: string
  readonly status: number | null
  readonly error: string | null
}

const forwardUrl = Options.text("forward-to").pipe(
  Options.withAlias("f"),
  Options.withDescription("local URL that receives each delivery, e.g. http://localhost:8000/webhooks")
)

const forward = (http: HttpClient.HttpClient, url: string, event: ListenEvent) =>
  HttpClientRequest.post(url).pipe(
    HttpClientRequest.setHeaders({ ...event.headers, "user-agent": "Mailroom-CLI-listen/1.0" }),
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

export const listen = Command.make("listen", {
  forwardTo: forwardUrl,
  maxEvents: Options.integer("max-events").pipe(
    Options.optional,
    Options.withDescription("stop after forwarding this many deliveries (default: run until interrupted)")
  )
}, (o) =>
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
  }).pipe(Effect.scoped)).pipe(
    Command.withDescription(
      "Forward this organization's new deliveries, with their signature headers, to a local URL (no public URL needed)"
    )
  )
