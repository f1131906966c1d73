/**
 * POST /endpoints/{id}/test: a synthetic `email.received`, signed like a real delivery, sent once.
 * Limits: 30 per hour per organization for every test sent; 4 per minute for tests that fail,
 * except tests to a URL on one of the organization's verified domains. A test in flight holds a
 * per-minute slot until it succeeds.
 */
import { Clock, Duration, Effect, Option } from "effect"
import { WebhookSecrets } from "../account/WebhookSecret.js"
import { NotFound } from "../contract/Errors.js"
import { DomainsRepo } from "../domains/Repo.js"
import { Dns } from "../net/Dns.js"
import { checkUrl } from "../net/Ssrf.js"
import { AppConfig } from "../platform/Config.js"
import { RateLimiter, setLimitHeaders } from "../platform/RateLimiter.js"
import { RateLimitExceeded } from "../contract/Errors.js"
import { LEGACY_SIGNATURE_HEADER, sign, SIGNATURE_HEADER } from "../webhooks/Signing.js"
import { serializeEvent, syntheticEmailReceived } from "../webhooks/Payload.js"
import { postJson } from "../webhooks/Sender.js"
import type { TestResult } from "./Api.js"
import { type EndpointRow, EndpointsRepo } from "./Repo.js"
import { invalid } from "./Service.js"

export const TESTS_PER_MINUTE = { limit: 4, windowSeconds: 60 } as const
export const TESTS_PER_HOUR = { limit: 30, windowSeconds: 3600 } as const
export const TEST_TIMEOUT_MS = 10_000
export const RESPONSE_BODY_LIMIT = 2048
export const USER_AGENT = "Mailroom-Webhooks/1.0"

export class EndpointTester extends Effect.Service<EndpointTester>()("mailroom/EndpointTester", {
  effect: Effect.gen(function*() {
    const repo = yield* EndpointsRepo
    const domains = yield* DomainsRepo
    const secrets = yield* WebhookSecrets
    const limiter = yield* RateLimiter
    const config = yield* AppConfig
    const dns = yield* Dns
    const timeoutMs = Math.min(TEST_TIMEOUT_MS, Duration.toMillis(config.deliveryTimeout))

    const test = (orgId: string, id: string, managedInboxAddress: string | null) =>
      Effect.gen(function*() {
        const endpoint = yield* Effect.flatMap(repo.find(orgId, id), Option.match({
          onNone: () => Effect.fail(new NotFound({ message: `no endpoint ${id}` })),
          onSome: Effect.succeed
        }))
        if (endpoint.kind !== "http" || endpoint.url === null) {
          return yield* invalid("kind", "test sends are for http endpoints only")
        }
        const url = new URL(endpoint.url)
        const host = url.hostname.toLowerCase()
        const verified = yield* domains.verifiedNames(orgId)
        const exempt = verified.some((d) => host === d || host.endsWith(`.${d}`))

        // The per-minute slot is reserved before the attempt, atomically, and given back when the
        // test succeeds (or is never sent): concurrent tests can never spend more than are left.
        const minuteKey = `endpoint-test:min:org:${orgId}`
        const minute = exempt ? undefined : yield* limiter.reserve(minuteKey, TESTS_PER_MINUTE)
        if (minute !== undefined && !minute.decision.allowed) {
          const d = minute.decision
          yield* setLimitHeaders(d, true)
          return yield* new RateLimitExceeded({
            message: `endpoint tests: ${TESTS_PER_MINUTE.limit} failed tests per minute reached; retry in ${d.retryAfter} s`,
            details: { limit: d.limit, window_seconds: d.windowSeconds, retry_after: d.retryAfter }
          })
        }
        const giveBack = minute?.release ?? Effect.void
        const result = yield* send(orgId, endpoint, endpoint.url, managedInboxAddress).pipe(Effect.tapError(() => giveBack))
        if (result.delivered) yield* giveBack
        return result
      })

    const send = (orgId: string, endpoint: EndpointRow, endpointUrl: string, managedInboxAddress: string | null) =>
      Effect.gen(function*() {
        yield* limiter.enforce(`endpoint-test:hour:org:${orgId}`, TESTS_PER_HOUR, "endpoint tests")
        // Resolved and checked again now: DNS may have changed since the endpoint was saved.
        const target = yield* checkUrl(endpointUrl, { allowPrivate: config.webhookAllowPrivateUrls }).pipe(
          Effect.provideService(Dns, dns),
          Effect.mapError((e) => invalid("url", e.reason))
        )
        const secret = yield* Effect.map(secrets.signing(orgId), Option.getOrElse((): ReadonlyArray<string> => [""]))
        const now = yield* Clock.currentTimeMillis
        const domainName = endpoint.domain_id === null ? undefined : yield* Effect.map(
          domains.find(orgId, endpoint.domain_id),
          Option.map((d) => d.domain)
        ).pipe(Effect.map(Option.getOrUndefined))
        const recipient = domainName !== undefined ? `test@${domainName}` : managedInboxAddress ?? "test@mailroom.test"
        const event = syntheticEmailReceived({ publicBaseUrl: config.publicBaseUrl, recipient, now: new Date(now) })
        const body = serializeEvent(event)
        const signature = sign(secret, body, Math.floor(now / 1000))
        const result = yield* postJson({
          target,
          body,
          headers: {
            [SIGNATURE_HEADER]: signature,
            [LEGACY_SIGNATURE_HEADER]: signature,
            "user-agent": USER_AGENT,
            "mailroom-event": event.event,
            "mailroom-event-id": event.id,
            "mailroom-attempt": "1",
            "mailroom-test": "true"
          },
          timeoutMs,
          maxResponseBytes: RESPONSE_BODY_LIMIT
        })
        const delivered = result.statusCode !== null && result.statusCode >= 200 && result.statusCode < 300
        return {
          status_code: result.statusCode,
          response_body: result.responseBody,
          signature,
          duration_ms: result.durationMs,
          delivered,
          error: result.error ?? (delivered ? null : `http_${result.statusCode}`)
        } satisfies TestResult
      })

    return { test } as const
  })
}) {}
