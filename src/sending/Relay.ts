/**
 * The outbound relay of customer mail: `OUTBOUND_SMTP_URL` over a pool of SMTP connections
 * (nodemailer), or without it the dev outbox (`DATA_DIR/outbox/*.eml`, subject logged).
 *
 * Every relay outcome maps to exactly one API error (see `classifyRelayError`):
 * - connection refused, unresolvable host, no greeting → `outbound_unreachable` (nothing sent)
 * - no answer within `OUTBOUND_TIMEOUT` once connected (the data sent) → `outbound_relay_timeout`
 * - SMTP 421/452, or more sends waiting for a connection than the pool takes → `outbound_capacity_exhausted`
 * - SMTP 530/534/535 (the relay refuses our credentials) → `outbound_key_invalid`
 * - any other 4xx/5xx, or the connection dropped mid-transaction → `outbound_relay_failed`
 * - a reply that is not SMTP → `outbound_response_malformed`
 */
import { Clock, Duration, Effect, Option, Redacted } from "effect"
import { mkdirSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import nodemailer, { type Transporter } from "nodemailer"
import type SMTPPool from "nodemailer/lib/smtp-pool"
import {
  OutboundCapacityExhausted,
  OutboundKeyInvalid,
  OutboundRelayFailed,
  OutboundRelayTimeout,
  OutboundResponseMalformed,
  OutboundUnreachable
} from "../contract/Errors.js"
import { AppConfig } from "../platform/Config.js"
import { randomToken } from "../platform/Secrets.js"

export type RelayError =
  | OutboundCapacityExhausted
  | OutboundUnreachable
  | OutboundRelayTimeout
  | OutboundRelayFailed
  | OutboundResponseMalformed
  | OutboundKeyInvalid

export interface RelayEnvelope {
  readonly from: string
  readonly to: ReadonlyArray<string>
}

export interface RelayResult {
  /** The relay's final reply (`250 …`), or where the dev outbox wrote the message. */
  readonly response: string
  readonly rejected: ReadonlyArray<string>
}

/** Connections kept open to the relay, and sends allowed to wait for one of them. */
const MAX_CONNECTIONS = 8
const MAX_WAITING = 256
const CONNECT_TIMEOUT_MS = 10_000

interface SmtpFailure {
  readonly code?: string
  readonly originalCode?: string
  readonly responseCode?: number
  readonly response?: string
  readonly command?: string
  readonly timeoutType?: string
  readonly message?: string
}

const UNREACHABLE_CODES = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH", "ECONNRESET_BEFORE_GREETING"])

/** Which transient outcomes a scheduled send tries again (the request path answers them at once). */
export const isTransient = (e: RelayError) =>
  e._tag === "OutboundUnreachable" || e._tag === "OutboundCapacityExhausted" ||
  (e._tag === "OutboundRelayFailed" && typeof e.details?.["smtp_code"] === "number" && (e.details["smtp_code"] as number) < 500)

/** The API error of one failed relay attempt. */
export const classifyRelayError = (error: unknown, timeout: Duration.Duration): RelayError => {
  const e = (error ?? {}) as SmtpFailure
  const response = typeof e.response === "string" ? e.response.slice(0, 500) : null
  const details = { smtp_code: e.responseCode ?? null, smtp_response: response, command: e.command ?? null }
  if (typeof e.responseCode === "number") {
    const code = e.responseCode
    if (code === 421 || code === 452) {
      return new OutboundCapacityExhausted({ message: `the outbound relay is at capacity (SMTP ${code}); try again later`, details })
    }
    if (code === 530 || code === 534 || code === 535) {
      return new OutboundKeyInvalid({
        message: `the outbound relay refused the service's credentials (SMTP ${code}); this is a server-side problem`,
        details
      })
    }
    if (code >= 400 && code < 600) {
      return new OutboundRelayFailed({ message: `the outbound relay refused the message: ${response ?? code}`, details })
    }
    return new OutboundResponseMalformed({ message: `the outbound relay answered an unexpected SMTP code ${code}`, details })
  }
  if (e.code === "EPROTOCOL" || (response !== null && response.trim() !== "" && !/^\d{3}/.test(response))) {
    return new OutboundResponseMalformed({ message: `the outbound relay's answer is not SMTP: ${response ?? e.message ?? ""}`, details })
  }
  if (e.code === "ETIMEDOUT") {
    if (e.timeoutType === "SOCKET_TIMEOUT") {
      return new OutboundRelayTimeout({
        message: `the outbound relay did not answer within ${Duration.format(timeout)}; the message may be in flight: ` +
          "retry with the same Idempotency-Key to get this result again",
        details
      })
    }
    return new OutboundUnreachable({ message: "the outbound relay did not answer the connection; nothing was sent", details })
  }
  if (e.code === "EDNS" || (e.originalCode !== undefined && UNREACHABLE_CODES.has(e.originalCode))) {
    return new OutboundUnreachable({ message: `the outbound relay cannot be reached (${e.originalCode ?? e.code}); nothing was sent`, details })
  }
  if (e.code === "ECONNECTION" || e.code === "ESOCKET") {
    return new OutboundRelayFailed({ message: `the outbound relay closed the connection: ${e.message ?? ""}`, details })
  }
  return new OutboundRelayFailed({ message: `the outbound relay failed: ${e.message ?? String(error)}`, details })
}

export class OutboundRelay extends Effect.Service<OutboundRelay>()("mailroom/OutboundRelay", {
  scoped: Effect.gen(function*() {
    const config = yield* AppConfig
    const timeout = config.outboundTimeout
    const outbox = join(config.dataDir, "outbox")
    const pool = yield* Option.match(config.outboundSmtpUrl, {
      onNone: () => Effect.succeed(Option.none<Transporter<SMTPPool.SentMessageInfo>>()),
      onSome: (url) =>
        Effect.acquireRelease(
          Effect.sync(() => {
            const t: Transporter<SMTPPool.SentMessageInfo> = nodemailer.createTransport({
              url: Redacted.value(url),
              pool: true,
              maxConnections: MAX_CONNECTIONS,
              maxMessages: Infinity,
              connectionTimeout: CONNECT_TIMEOUT_MS,
              greetingTimeout: CONNECT_TIMEOUT_MS,
              socketTimeout: Duration.toMillis(timeout)
            })
            // A pooled connection that fails while idle is replaced; nothing waits on it.
            t.on("error", () => undefined)
            return Option.some(t)
          }),
          (t) => Effect.sync(() => Option.map(t, (x) => x.close()))
        )
    })
    let waiting = 0
    let lastCheck: { reachable: boolean; at: Date } | undefined

    const viaRelay = (t: Transporter<SMTPPool.SentMessageInfo>, envelope: RelayEnvelope, raw: Buffer) =>
      Effect.gen(function*() {
        if (waiting >= MAX_WAITING) {
          return yield* new OutboundCapacityExhausted({
            message: `too many messages are waiting for the outbound relay (${MAX_WAITING}); try again later`,
            details: { waiting }
          })
        }
        waiting++
        const info = yield* Effect.tryPromise({
          try: () => t.sendMail({ envelope: { from: envelope.from, to: [...envelope.to] }, raw }),
          catch: (e) => classifyRelayError(e, timeout)
        }).pipe(
          // The socket timeout covers silence on the wire; this covers a relay that trickles bytes forever.
          Effect.timeoutFail({
            duration: Duration.sum(timeout, Duration.millis(CONNECT_TIMEOUT_MS)),
            onTimeout: () => classifyRelayError({ code: "ETIMEDOUT", timeoutType: "SOCKET_TIMEOUT" }, timeout)
          }),
          Effect.ensuring(Effect.sync(() => waiting--))
        )
        const rejected = (info.rejected ?? []).map((r: string | { address: string }) => (typeof r === "string" ? r : r.address))
        return { response: String(info.response ?? ""), rejected } satisfies RelayResult
      })

    const toOutbox = (raw: Buffer, subject: string) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const file = join(outbox, `${new Date(now).toISOString().replace(/[:.]/g, "-")}-${randomToken(6)}.eml`)
        yield* Effect.try({
          try: () => {
            mkdirSync(outbox, { recursive: true })
            writeFileSync(file, raw)
          },
          catch: (e) => new OutboundRelayFailed({ message: `the dev outbox cannot be written: ${String(e)}` })
        })
        yield* Effect.logInfo(`dev outbox: sent mail written to ${file}`).pipe(Effect.annotateLogs({ subject }))
        return { response: `250 written to the dev outbox (${file})`, rejected: [] } satisfies RelayResult
      })

    /** Hands one composed message to the relay (or the outbox). */
    const relay = (envelope: RelayEnvelope, raw: Buffer, subject: string): Effect.Effect<RelayResult, RelayError> =>
      (Option.isNone(pool) ? toOutbox(raw, subject) : viaRelay(pool.value, envelope, raw) as Effect.Effect<RelayResult, RelayError>).pipe(
        Effect.tap(() => Effect.sync(() => { lastCheck = { reachable: true, at: new Date() } })),
        Effect.tapError((e) =>
          Effect.sync(() => {
            if (e._tag === "OutboundUnreachable") lastCheck = { reachable: false, at: new Date() }
          })
        ),
        Effect.withSpan("OutboundRelay.relay")
      )

    /** Whether the relay answers now (a connection and EHLO), for `GET /outbound/status`. */
    const check = Effect.gen(function*() {
      const at = new Date(yield* Clock.currentTimeMillis)
      if (Option.isNone(pool)) return { relay: "outbox" as const, reachable: true, checkedAt: at }
      const ok = yield* Effect.tryPromise(() => pool.value.verify()).pipe(
        Effect.timeout(Duration.millis(CONNECT_TIMEOUT_MS)),
        Effect.as(true),
        Effect.orElseSucceed(() => false)
      )
      lastCheck = { reachable: ok, at }
      return { relay: "smtp" as const, reachable: ok, checkedAt: at }
    })

    return { relay, check, usesSmtp: Option.isSome(pool), lastCheck: () => lastCheck } as const
  })
}) {}
