/**
 * The send path shared by `POST /send-mail`, replies, forwards and the scheduled-send timers:
 * validation, the sender check, the first-send gate, the plan's quotas, then the message is
 * recorded (`recordSentEmail`) and, when due now, composed, DKIM-signed and relayed inside the
 * request (recipients this service receives are delivered here instead: LocalDelivery.ts). Scheduled sends repeat the sender, gate and quota checks when they come due (`deliver`).
 *
 * Quotas: one message = one unit against the plan's `send_per_hour` and `send_per_day`, sliding
 * windows counted on the sent emails themselves (`quota_at`), decided under a per-organization
 * advisory lock so concurrent sends (in any process) never overshoot.
 */
import { SqlClient } from "@effect/sql"
import { Clock, Duration, Effect, Either, Option } from "effect"
import { randomUUID } from "node:crypto"
import {
  CannotSendFromDomain,
  DiscardNotEnabled,
  ErrorTable,
  type ErrorTag,
  Forbidden,
  type Gate,
  LoopDetected,
  RateLimited,
  RecipientNotAllowed,
  RecipientSuppressed,
  ValidationError
} from "../contract/Errors.js"
import { type Entitlement, entitlementsOf, LIMITS, type Plan } from "../contract/Plans.js"
import { OrgEvents } from "../deliveries/OrgEvents.js"
import { AppConfig } from "../platform/Config.js"
import { setHeader } from "../platform/HttpHeaders.js"
import { type Decision, setLimitHeaders } from "../platform/RateLimiter.js"
import { randomToken } from "../platform/Secrets.js"
import { RegistryDirectory } from "../registries/Directory.js"
import { parseRegistryRecipient } from "../registries/Directory.js"
import { canSendFrom, onlySender, sendableAddresses, validSenders } from "../registries/Senders.js"
import { type Mailbox, addressOf, domainOf, formatMailbox, parseMailbox } from "./Addresses.js"
import { ATTACHMENTS_MAX_BYTES, MAX_RECIPIENTS, SCHEDULE_MAX_DAYS, SUBJECT_MAX_LENGTH } from "./Api.js"
import { composeMessage } from "./Compose.js"
import { DkimKeys } from "./Dkim.js"
import { LocalDelivery, sendSplit } from "./LocalDelivery.js"
import { OutboundRelay, type RelayError } from "./Relay.js"
import { type ContentRow, type SentRow, SendingRepo, type StoredAttachment } from "./Repo.js"
import { Threading } from "../threads/Threading.js"
import { Outcomes } from "../bounces/Outcomes.js"
import { SuppressionsRepo } from "../bounces/Repo.js"
import { Verp } from "../bounces/Verp.js"

export const GATE_DOCS_PATH = "/docs#tag/sending"

/** What a caller asks to send, before any check. */
export interface SendInput {
  readonly kind: "send" | "reply" | "forward"
  readonly sourceEmailId: string | null
  readonly from: string
  readonly to: ReadonlyArray<string>
  readonly cc: ReadonlyArray<string>
  readonly bcc: ReadonlyArray<string>
  readonly replyTo: string | null
  readonly subject: string
  readonly text: string | null
  readonly html: string | null
  readonly headers: Record<string, string>
  readonly attachments: ReadonlyArray<{ readonly filename: string; readonly content_type?: string; readonly content_base64: string }>
  readonly sendAt: Date | null
  readonly discardContent: boolean
  readonly inReplyTo: string | null
  readonly references: ReadonlyArray<string>
}

export type SendError =
  | ValidationError
  | Forbidden
  | CannotSendFromDomain
  | RecipientNotAllowed
  | DiscardNotEnabled
  | RateLimited
  | LoopDetected
  | RecipientSuppressed

/**
 * The addresses a display name shows, lowercased: anything shaped `local@domain.tld` once compatibility
 * forms are folded (a fullwidth `＠` reads as `@` in a mail client too).
 */
export const addressesIn = (displayName: string): ReadonlyArray<string> =>
  [...displayName.normalize("NFKC").matchAll(/[^\s@<>"'(),;:[\]]+@[^\s@<>"'(),;:[\]]+\.[^\s@<>"'(),;:[\]]+/g)]
    .map((m) => m[0].toLowerCase().replace(/\.+$/, ""))

/** Who sends when an automation does (a function's MAILROOM binding): its mail is automatic. */
export interface Automation {
  readonly functionId: string
}

/** The loop guard: automated sends to one thread per hour, and in a row to one counterpart without a person's message. */
export const LOOP_THREAD_PER_HOUR = 10
export const LOOP_IN_A_ROW = 5

/** RFC 3834: a reply is `auto-replied`, anything else an automation sends `auto-generated`. */
export const autoSubmittedValue = (kind: SendInput["kind"]) => (kind === "reply" ? "auto-replied" : "auto-generated")

interface LoopRefusal {
  readonly rule: "thread_hourly" | "counterpart_in_a_row"
  readonly limit: number
  readonly windowSeconds: number | null
  readonly retryAfter: number | null
  readonly counterpart: string | null
}

interface OrgFacts {
  readonly plan: Plan
  readonly entitlements: ReadonlyArray<Entitlement>
  readonly discardEnabled: boolean
}

interface Issue {
  readonly field: string
  readonly reason: string
}

const HEADER_NAME = /^(X-|List-)[A-Za-z0-9-]+$/i
const BASE64 = /^[A-Za-z0-9+/\r\n]*={0,2}[\r\n]*$/

/** A small MIME-type table for attachments sent without `content_type`. */
const TYPES: Record<string, string> = {
  txt: "text/plain", html: "text/html", htm: "text/html", csv: "text/csv", json: "application/json", pdf: "application/pdf",
  png: "image/png", jpg: "image/jpeg", jpeg: "image/jpeg", gif: "image/gif", webp: "image/webp", svg: "image/svg+xml",
  zip: "application/zip", gz: "application/gzip", ics: "text/calendar", eml: "message/rfc822", md: "text/markdown",
  xml: "application/xml"
}
export const guessType = (filename: string) => TYPES[filename.slice(filename.lastIndexOf(".") + 1).toLowerCase()] ?? "application/octet-stream"

const invalid = (issues: ReadonlyArray<Issue>) =>
  new ValidationError({
    message: issues.map((i) => `${i.field}: ${i.reason}`).join("; "),
    details: { issues: issues.map((i) => ({ field: i.field, reason: i.reason })) }
  })

const HOUR_S = 3600
const DAY_S = 86_400

/** The 429 of a full quota window, with that window's `ratelimit-*` and `Retry-After` headers. */
const quotaRefusal = (limit: number, windowSeconds: number, used: number, oldest: Date | null, nowMs: number) => {
  const resetMs = oldest === null ? nowMs + windowSeconds * 1000 : oldest.getTime() + windowSeconds * 1000
  const decision: Decision = {
    allowed: false,
    limit,
    remaining: Math.max(0, limit - used),
    reset: Math.ceil(resetMs / 1000),
    retryAfter: Math.max(1, Math.ceil((resetMs - nowMs) / 1000)),
    windowSeconds
  }
  const window = windowSeconds === HOUR_S ? "hour" : "day"
  return Effect.zipRight(
    setLimitHeaders(decision, true),
    Effect.fail(
      new RateLimited({
        message: `send quota reached: ${limit} messages per ${window} on this plan; retry in ${decision.retryAfter} s`,
        details: { limit, window, window_seconds: windowSeconds, retry_after: decision.retryAfter }
      })
    )
  )
}

/**
 * Field checks the request schema cannot express (cross-field, parsed addresses, sizes, times), with
 * registry recipients resolved. The demo's send-mail runs the very same checks.
 */
export const validateSend = (input: SendInput, nowMs: number) =>
  Effect.gen(function*() {
    const directory = yield* RegistryDirectory
    const issues: Array<Issue> = []
    const from = parseMailbox(input.from)
    if (typeof from === "string") issues.push({ field: "from", reason: from })
    const recipients: Array<{ field: "to" | "cc" | "bcc"; value: string }> = [
      ...input.to.map((value) => ({ field: "to" as const, value })),
      ...input.cc.map((value) => ({ field: "cc" as const, value })),
      ...input.bcc.map((value) => ({ field: "bcc" as const, value }))
    ]
    if (input.to.length === 0) issues.push({ field: "to", reason: "at least one recipient is required" })
    if (recipients.length > MAX_RECIPIENTS) {
      issues.push({ field: "to", reason: `at most ${MAX_RECIPIENTS} recipients across to, cc and bcc (got ${recipients.length})` })
    }
    const resolved: Record<"to" | "cc" | "bcc", Array<Mailbox>> = { to: [], cc: [], bcc: [] }
    for (const r of recipients) {
      const handle = parseRegistryRecipient(r.value.trim())
      if (handle !== undefined) {
        const found = yield* directory.resolveHandle(handle.name, handle.handle)
        if (Option.isNone(found)) {
          issues.push({ field: r.field, reason: `${r.value.trim()} is not a published registry entry` })
        } else resolved[r.field].push({ name: "", address: found.value.address.toLowerCase() })
        continue
      }
      if (r.value.trim().startsWith("registry:")) {
        issues.push({ field: r.field, reason: "a registry recipient is written registry:<name>/<handle>" })
        continue
      }
      const m = parseMailbox(r.value)
      if (typeof m === "string") issues.push({ field: r.field, reason: `${JSON.stringify(r.value)} ${m}` })
      else resolved[r.field].push(m)
    }
    let replyTo: Mailbox | null = null
    if (input.replyTo !== null) {
      const m = parseMailbox(input.replyTo)
      if (typeof m === "string") issues.push({ field: "reply_to", reason: m })
      else replyTo = m
    }
    if (input.subject.length < 1 || input.subject.length > SUBJECT_MAX_LENGTH) {
      issues.push({ field: "subject", reason: `must be 1-${SUBJECT_MAX_LENGTH} characters` })
    } else if (/[\r\n]/.test(input.subject)) issues.push({ field: "subject", reason: "must not contain line breaks" })
    if (input.text === null && input.html === null) issues.push({ field: "text", reason: "one of text and html is required" })
    for (const [name, value] of Object.entries(input.headers)) {
      if (!HEADER_NAME.test(name)) issues.push({ field: `headers.${name}`, reason: "only X-* and List-* header names are allowed" })
      else if (/[\r\n]/.test(value)) issues.push({ field: `headers.${name}`, reason: "must not contain line breaks" })
    }
    let total = 0
    const attachments: Array<StoredAttachment> = []
    input.attachments.forEach((a, i) => {
      if (!BASE64.test(a.content_base64)) {
        issues.push({ field: `attachments.${i}.content_base64`, reason: "must be base64" })
        return
      }
      if (/[\r\n"\\/]/.test(a.filename)) issues.push({ field: `attachments.${i}.filename`, reason: "must be a plain file name" })
      if (a.content_type !== undefined && !/^[\w.+-]+\/[\w.+-]+$/.test(a.content_type)) {
        issues.push({ field: `attachments.${i}.content_type`, reason: "must be a MIME type such as text/plain" })
      }
      total += Buffer.from(a.content_base64, "base64").length
      attachments.push({ filename: a.filename, content_type: a.content_type ?? guessType(a.filename), content_base64: a.content_base64.replace(/[\r\n]/g, "") })
    })
    if (total > ATTACHMENTS_MAX_BYTES) issues.push({ field: "attachments", reason: "at most 10 MiB in all" })
    if (input.sendAt !== null) {
      if (input.sendAt.getTime() <= nowMs) issues.push({ field: "send_at", reason: "must be in the future" })
      else if (input.sendAt.getTime() > nowMs + SCHEDULE_MAX_DAYS * DAY_S * 1000) {
        issues.push({ field: "send_at", reason: `must be at most ${SCHEDULE_MAX_DAYS} days ahead` })
      }
    }
    if (issues.length > 0 || typeof from === "string") return yield* invalid(issues)
    return { from, to: resolved.to, cc: resolved.cc, bcc: resolved.bcc, replyTo, attachments }
  })

export class Sender extends Effect.Service<Sender>()("mailroom/Sender", {
  scoped: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const repo = yield* SendingRepo
    const threading = yield* Threading
    const relay = yield* OutboundRelay
    const local = yield* LocalDelivery
    const dkim = yield* DkimKeys
    const directory = yield* RegistryDirectory
    const config = yield* AppConfig
    const orgEvents = yield* OrgEvents
    const verp = yield* Verp
    const outcomes = yield* Outcomes
    const suppressions = yield* SuppressionsRepo
    const provideSql = Effect.provideService(SqlClient.SqlClient, sql)
    const leaseMs = Duration.toMillis(config.outboundTimeout) + 30_000
    const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))
    // Making the managed domain's key (an RSA key pair) takes a moment: not on a first send's clock.
    // In the service's scope, so stopping the service interrupts it.
    yield* Effect.forkScoped(Effect.ignore(dkim.managedSigning))

    const orgFacts = (orgId: string) =>
      sql<{ plan: Plan; discard: boolean; granted: ReadonlyArray<Entitlement> }>`
        SELECT o.plan, o.discard_content_on_webhook_confirmed AS discard,
          coalesce((SELECT json_agg(g.entitlement) FROM organization_entitlements g WHERE g.org_id = o.id), '[]'::json) AS granted
        FROM organizations o WHERE o.id = ${orgId}`.pipe(
        Effect.map((rows): OrgFacts => {
          const r = rows[0] ?? { plan: "agent" as const, discard: false, granted: [] }
          return { plan: r.plan, entitlements: entitlementsOf(r.plan, r.granted), discardEnabled: r.discard }
        }),
        Effect.orDie
      )

    const validate = (input: SendInput, nowMs: number) =>
      validateSend(input, nowMs).pipe(Effect.provideService(RegistryDirectory, directory))

    /**
     * 403 `cannot_send_from_domain` unless the organization can send from the address, and from every
     * address its display name shows (`"ceo@other.test" <own inbox>` would pass for other.test).
     */
    const checkSender = (orgId: string, address: string, displayName: string) =>
      Effect.flatMap(sendableAddresses(orgId).pipe(provideSql), (s) => {
        const shown = addressesIn(displayName).find((a) => !canSendFrom(s, a))
        if (shown !== undefined) {
          const valid = validSenders(s)
          return Effect.fail(
            new CannotSendFromDomain({
              message: `the display name of from shows ${shown}, an address this organization cannot send from: ` +
                "a display name may not be another sender's address (use a plain name)",
              details: { valid_senders: valid, display_name_address: shown }
            })
          )
        }
        if (canSendFrom(s, address)) return Effect.void
        const valid = validSenders(s)
        return Effect.fail(
          new CannotSendFromDomain({
            message: `${address} is not an address this organization can send from (valid senders: ${valid.length === 0 ? "none" : valid.join(", ")})`,
            details: { valid_senders: valid }
          })
        )
      })

    /**
     * `from` of a send that gives none: the organization's only address (its managed inbox, when it
     * has no verified domain); with more to choose from, 400 naming them.
     */
    const defaultFrom = (orgId: string) =>
      Effect.flatMap(sendableAddresses(orgId).pipe(provideSql), (s) => {
        const only = onlySender(s)
        if (only !== undefined) return Effect.succeed(only)
        const valid = validSenders(s)
        const reason = `is required: this organization can send from more than one address (valid senders: ${valid.join(", ")})`
        return Effect.fail(
          new ValidationError({
            message: `from: ${reason}`,
            details: { issues: [{ field: "from", reason }], valid_senders: valid }
          })
        )
      })

    /** The first-send gate: with `send_to_known_addresses`, every recipient must have written in first. */
    const checkGate = (orgId: string, facts: OrgFacts, recipients: ReadonlyArray<string>) =>
      Effect.gen(function*() {
        if (!facts.entitlements.includes("send_to_known_addresses")) return
        const unique = [...new Set(recipients)]
        const known = yield* repo.knownAmong(orgId, unique)
        const refused = unique.filter((a) => !known.has(a))
        if (refused.length === 0) return
        const gates: Array<Gate> = refused.map((subject) => ({
          name: "send_to_known_addresses",
          reason: "recipient_not_known",
          message: `${subject} has not sent this organization mail yet; this account may only write to addresses that wrote to it first`,
          subject,
          fix: { action: "wait_for_inbound", subject },
          docs_url: `${config.publicBaseUrl}${GATE_DOCS_PATH}`
        }))
        return yield* new RecipientNotAllowed({
          message: `recipient${refused.length > 1 ? "s" : ""} not allowed: ${refused.join(", ")} (reply-only account: ` +
            "wait until they write in, or claim the account to lift the gate)",
          gates
        })
      })

    /** 422 `recipient_suppressed` when a recipient hard-bounced or complained (GET /suppressions). */
    const checkSuppressed = (orgId: string, recipients: ReadonlyArray<string>) =>
      Effect.gen(function*() {
        const found = yield* suppressions.suppressedAmong(orgId, recipients.map((a) => a.toLowerCase()))
        if (found.size === 0) return
        const addresses = [...found].sort()
        return yield* new RecipientSuppressed({
          message: `recipient${addresses.length > 1 ? "s" : ""} suppressed after a hard bounce or complaint: ${addresses.join(", ")} ` +
            "(DELETE /v1/suppressions/{address} to mail again)",
          details: { addresses }
        })
      })

    /** 429 when either window is full (nothing counted). */
    const checkQuota = (orgId: string, facts: OrgFacts, at: Date) =>
      Effect.gen(function*() {
        const limits = LIMITS[facts.plan]
        const u = yield* repo.usage(orgId, at)
        if (u.hour >= limits.send_per_hour) return yield* quotaRefusal(limits.send_per_hour, HOUR_S, u.hour, u.oldest_hour, at.getTime())
        if (u.day >= limits.send_per_day) return yield* quotaRefusal(limits.send_per_day, DAY_S, u.day, u.oldest_day, at.getTime())
      })

    /**
     * The loop guard's budgets for an automated send to `threadId` (none for a person's send): at most
     * LOOP_THREAD_PER_HOUR automated sends to the thread per hour, and at most LOOP_IN_A_ROW in a row to
     * one counterpart since the thread's last message from a person.
     */
    const checkLoop = (orgId: string, threadId: string, recipients: ReadonlyArray<string>, at: Date) =>
      Effect.gen(function*() {
        const hour = yield* repo.automatedInThread(threadId, new Date(at.getTime() - HOUR_S * 1000))
        if (hour.n >= LOOP_THREAD_PER_HOUR) {
          const resetMs = (hour.oldest?.getTime() ?? at.getTime()) + HOUR_S * 1000
          return Option.some<LoopRefusal>({
            rule: "thread_hourly",
            limit: LOOP_THREAD_PER_HOUR,
            windowSeconds: HOUR_S,
            retryAfter: Math.max(1, Math.ceil((resetMs - at.getTime()) / 1000)),
            counterpart: null
          })
        }
        const rows = yield* repo.automatedSinceLastPerson(orgId, threadId)
        const counts = new Map<string, number>()
        for (const r of rows) {
          for (const a of new Set([...r.to_addresses, ...r.cc_addresses, ...r.bcc_addresses].map(addressOf))) {
            counts.set(a, (counts.get(a) ?? 0) + 1)
          }
        }
        const counterpart = [...new Set(recipients)].find((a) => (counts.get(a) ?? 0) >= LOOP_IN_A_ROW)
        if (counterpart === undefined) return Option.none<LoopRefusal>()
        return Option.some<LoopRefusal>({ rule: "counterpart_in_a_row", limit: LOOP_IN_A_ROW, windowSeconds: null, retryAfter: null, counterpart })
      })

    /** 429 `loop_detected` for a refused automated send, after its `send.loop_detected` event. */
    const loopRefusal = (orgId: string, automation: Automation, threadId: string, r: LoopRefusal, what: {
      readonly from: string
      readonly to: ReadonlyArray<string>
      readonly subject: string
    }, at: Date) =>
      Effect.gen(function*() {
        yield* orgEvents.emit({
          orgId,
          eventType: "send.loop_detected",
          createdAt: at,
          data: {
            loop: {
              rule: r.rule,
              thread_id: threadId,
              function_id: automation.functionId,
              limit: r.limit,
              window_seconds: r.windowSeconds,
              retry_after: r.retryAfter,
              counterpart: r.counterpart,
              from: what.from,
              to: what.to,
              subject: what.subject
            }
          }
        }).pipe(Effect.catchAllCause((cause) => Effect.logWarning("send.loop_detected was not recorded", cause)))
        if (r.retryAfter !== null) yield* setHeader("retry-after", String(r.retryAfter))
        return yield* new LoopDetected({
          message: r.rule === "thread_hourly"
            ? `loop guard: at most ${r.limit} automated sends to one thread per hour; retry in ${r.retryAfter} s`
            : `loop guard: at most ${r.limit} automated sends in a row to ${r.counterpart} without a message from a person ` +
              "in between; a person's message in the thread lifts it",
          details: {
            thread_id: threadId,
            rule: r.rule,
            limit: r.limit,
            window_seconds: r.windowSeconds,
            retry_after: r.retryAfter,
            ...(r.counterpart !== null ? { counterpart: r.counterpart } : {})
          }
        })
      })

    /** An outcome event is reported on a best-effort basis: the send's own result stands either way. */
    const reported = <A, E>(e: Effect.Effect<A, E>) =>
      Effect.catchAllCause(Effect.asVoid(e), (cause) => Effect.logWarning("outbound outcome event not recorded", cause))

    const messageIdFor = (id: string, fromAddress: string) => `<${id}@${domainOf(fromAddress)}>`

    /** Composes, signs and relays a row this process holds (`token`); records the outcome. */
    const relayRow = (
      row: SentRow,
      token: string,
      retryAt?: (e: RelayError) => Date | undefined,
      known?: ContentRow
    ): Effect.Effect<Either.Either<SentRow, RelayError>> =>
      Effect.gen(function*() {
        // An immediate send has its content at hand (just recorded): no need to read it back.
        const content = known ?? Option.getOrElse(yield* repo.content(row.id), (): ContentRow => ({
          text_body: null,
          html_body: null,
          headers: {},
          attachments: []
        }))
        const at = yield* now
        const signing = yield* dkim.signingFor(row.org_id, row.from_address)
        const raw = yield* Effect.promise(() =>
          composeMessage({
            fromHeader: row.from_header,
            to: row.to_addresses,
            cc: row.cc_addresses,
            replyTo: row.reply_to,
            subject: row.subject,
            messageId: row.message_id,
            inReplyTo: row.in_reply_to,
            references: row.references,
            date: at,
            content
          }, Option.getOrUndefined(signing))
        )
        const envelopeTo = [...row.to_addresses, ...row.cc_addresses, ...row.bcc_addresses].map((s) => {
          const m = parseMailbox(s)
          return typeof m === "string" ? s : m.address
        })
        // Recipients this service receives are delivered here; only the others go to the relay, with
        // the VERP return path: bounces and complaints come back naming this sent email.
        const outcome = yield* Effect.either(sendSplit(yield* local.receiver, (e, r) => relay.relay(e, r, row.subject), {
          raw,
          envelope: { from: verp.returnPath(row.id), to: [...new Set(envelopeTo)] },
          from: row.from_address,
          signed: Option.isSome(signing)
        }))
        const done = yield* now
        if (Either.isLeft(outcome) && retryAt !== undefined) {
          const again = retryAt(outcome.left)
          if (again !== undefined) {
            yield* repo.retryLater(row.id, token, again, { code: codeOf(outcome.left), message: outcome.left.message })
            const smtpCode = outcome.left.details?.["smtp_code"]
            yield* reported(outcomes.relayDelayed(row, typeof smtpCode === "number" ? smtpCode : null, outcome.left.message, again))
            return Either.left(outcome.left)
          }
        }
        const finished = yield* repo.finish(row.id, token, Either.match(outcome, {
          onLeft: (e) => ({
            status: "failed" as const,
            at: done,
            relayResponse: typeof e.details?.["smtp_response"] === "string" ? (e.details["smtp_response"] as string) : null,
            error: { code: codeOf(e), message: e.message, details: e.details ?? null }
          }),
          onRight: (r) => ({
            status: "sent" as const,
            at: done,
            relayResponse: r.rejected.length > 0 ? `${r.response} (refused: ${r.rejected.join(", ")})` : r.response,
            error: null
          })
        }))
        const current = Option.getOrElse(finished, () => row)
        if (Either.isRight(outcome) && Option.isSome(finished)) yield* reported(outcomes.sent(current, current.relay_response))
        return Either.match(outcome, { onLeft: (e) => Either.left(e), onRight: () => Either.right(current) })
      })

    /**
     * Records a send and, unless scheduled, relays it now. Fails with the check that refused it, or
     * with the relay's error after recording the message as `failed`.
     */
    const submitAs = (orgId: string, input: SendInput, automation: Automation | undefined): Effect.Effect<SentRow, SendError | RelayError> =>
      Effect.gen(function*() {
        const at = yield* now
        const v = yield* validate(input, at.getTime())
        const facts = yield* orgFacts(orgId)
        if (!facts.entitlements.includes("send_mail")) {
          return yield* new Forbidden({
            message: "sending needs the send_mail entitlement",
            details: { required_plan: "agent", missing_entitlement: "send_mail", current_plan: facts.plan }
          })
        }
        if (input.discardContent && !facts.discardEnabled) {
          return yield* new DiscardNotEnabled({
            message: "discard_content needs the account setting discard_content_on_webhook_confirmed to be on (PATCH /account)"
          })
        }
        yield* checkSender(orgId, v.from.address, v.from.name)
        const all = [...v.to, ...v.cc, ...v.bcc].map((m) => m.address)
        yield* checkGate(orgId, facts, all)
        yield* checkSuppressed(orgId, all)
        const id = randomUUID()
        const content: ContentRow = {
          text_body: input.text,
          html_body: input.html,
          // An automation's mail says so (RFC 3834), scheduled or not.
          headers: automation === undefined ? input.headers : { ...input.headers, "Auto-Submitted": autoSubmittedValue(input.kind) },
          attachments: v.attachments
        }
        const immediate = input.sendAt === null
        const token = randomToken(16)
        const messageId = messageIdFor(id, v.from.address)
        // A reply names its original (In-Reply-To, References): it joins the original's thread.
        const thread = yield* threading.assign({ orgId, messageId, inReplyTo: input.inReplyTo, references: input.references }).pipe(
          Effect.catchTag("SqlError", Effect.die)
        )
        const record = {
          id,
          orgId,
          kind: input.kind,
          sourceEmailId: input.sourceEmailId,
          fromHeader: formatMailbox(v.from),
          fromAddress: v.from.address,
          to: v.to.map(formatMailbox),
          cc: v.cc.map(formatMailbox),
          bcc: v.bcc.map(formatMailbox),
          replyTo: v.replyTo === null ? null : formatMailbox(v.replyTo),
          subject: input.subject,
          messageId,
          threadId: thread.threadId,
          merges: threading.mergeStatements(orgId, thread),
          inReplyTo: input.inReplyTo,
          references: input.references,
          sendAt: input.sendAt,
          dueAt: input.sendAt ?? at,
          // A process that dies while relaying leaves the row to the timers once the lease runs out.
          lease: immediate ? { token, until: new Date(at.getTime() + leaseMs) } : null,
          quotaAt: immediate ? at : null,
          discardContent: input.discardContent,
          automated: automation !== undefined,
          content
        }
        // Under the organization's quota lock, so concurrent automated sends never pass the loop budgets.
        const recorded = yield* Effect.gen(function*() {
          yield* repo.lockQuota(orgId)
          yield* checkQuota(orgId, facts, at)
          if (automation !== undefined) {
            const loop = yield* checkLoop(orgId, thread.threadId, all, at)
            if (Option.isSome(loop)) return Either.left(loop.value)
          }
          return Either.right(yield* repo.recordSentEmail(record))
        }).pipe(sql.withTransaction, Effect.catchTag("SqlError", Effect.die))
        if (Either.isLeft(recorded)) {
          return yield* loopRefusal(orgId, automation!, thread.threadId, recorded.left, {
            from: record.fromHeader,
            to: [...record.to, ...record.cc, ...record.bcc],
            subject: record.subject
          }, at)
        }
        const row = recorded.right
        if (!immediate) return row
        const result = yield* relayRow(row, token, undefined, content)
        return yield* Either.match(result, { onLeft: (e) => Effect.fail(e), onRight: Effect.succeed })
      }).pipe(Effect.withSpan("Sender.submit"))

    /** A send made by the service itself or a person's credential: the loop guard never applies. */
    const submit = (orgId: string, input: SendInput): Effect.Effect<SentRow, Exclude<SendError, LoopDetected> | RelayError> =>
      submitAs(orgId, input, undefined).pipe(Effect.catchTag("LoopDetected", Effect.die))

    /**
     * A due scheduled send this process leased: the checks again, then the relay. A refused check
     * fails the send; the relay's transient failures are the caller's to retry.
     */
    const deliver = (row: SentRow, token: string, retryAt: (e: RelayError) => Date | undefined) =>
      Effect.gen(function*() {
        const at = yield* now
        const facts = yield* orgFacts(row.org_id)
        const recipients = [...row.to_addresses, ...row.cc_addresses, ...row.bcc_addresses].map((s) => {
          const m = parseMailbox(s)
          return typeof m === "string" ? s : m.address
        })
        const checks = yield* Effect.either(
          Effect.gen(function*() {
            const from = parseMailbox(row.from_header)
            yield* checkSender(row.org_id, row.from_address, typeof from === "string" ? "" : from.name)
            yield* checkGate(row.org_id, facts, recipients)
            yield* checkSuppressed(row.org_id, recipients)
            yield* Effect.gen(function*() {
              yield* repo.lockQuota(row.org_id)
              yield* checkQuota(row.org_id, facts, at)
              yield* repo.takeQuota(row.id, token, at)
            }).pipe(sql.withTransaction, Effect.catchTag("SqlError", Effect.die))
          })
        )
        if (Either.isLeft(checks)) {
          const e = checks.left
          yield* repo.finish(row.id, token, {
            status: "failed",
            at,
            relayResponse: null,
            error: { code: codeOf(e), message: e.message, details: e.details ?? null }
          })
          return { outcome: "refused" as const }
        }
        return { outcome: "relayed" as const, result: yield* relayRow(row, token, retryAt) }
      })

    return { submit, submitAs, deliver, checkQuota, orgFacts, defaultFrom } as const
  }),
  dependencies: [SendingRepo.Default, OutboundRelay.Default, DkimKeys.Default, Verp.Default, Outcomes.Default, SuppressionsRepo.Default]
}) {}

/** The wire code of an error of the table. */
export const codeOf = (e: { readonly _tag: string }): string =>
  e._tag in ErrorTable ? ErrorTable[e._tag as ErrorTag].code : "internal_error"
