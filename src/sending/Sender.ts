/**
 * The send path shared by `POST /send-mail`, replies, forwards and the scheduled-send timers:
 * validation (Validate.ts), the sender check, the first-send gate, the suppression list, the plan's
 * quotas (Checks.ts) and, for an automation, the loop guard (LoopGuard.ts); then the message is
 * recorded (`recordSentEmail`) and, when due now, composed, DKIM-signed and relayed inside the
 * request (Transmit.ts; recipients this service receives are delivered here instead: LocalDelivery.ts).
 * Scheduled sends repeat the sender, gate and quota checks when they come due (`deliver`).
 *
 * Quotas: one message = one unit against the plan's `send_per_hour` and `send_per_day`, sliding
 * windows counted on the sent emails themselves (`quota_at`), decided under a per-organization
 * advisory lock so concurrent sends (in any process) never overshoot.
 */
import { SqlClient } from "@effect/sql"
import { Clock, Duration, Effect, Either, identity, Option } from "effect"
import { randomUUID } from "node:crypto"
import {
  CannotSendFromDomain,
  DiscardNotEnabled,
  Forbidden,
  LoopDetected,
  RateLimited,
  RecipientNotAllowed,
  RecipientSuppressed,
  ValidationError
} from "../contract/Errors.js"
import { OrgEvents } from "../events/OrgEvents.js"
import { AppConfig } from "../platform/Config.js"
import { randomToken } from "../platform/Secrets.js"
import { RegistryDirectory } from "../registries/Directory.js"
import { domainOf, formatMailbox, parseMailbox } from "../mail/Addresses.js"
import { DkimKeys } from "../domains/Dkim.js"
import { covers, sendChecks, type SendState } from "./Checks.js"
import { LocalDelivery } from "./LocalDelivery.js"
import { type Automation, autoSubmittedValue, loopGuard } from "./LoopGuard.js"
import { OutboundRelay, type RelayError } from "./Relay.js"
import { SendingRepo } from "./Repo.js"
import type { ContentRow, SentRow } from "./SentRows.js"
import { Threading, uuid7 } from "../mail/Threading.js"
import { decide } from "../policy/Permissions.js"
import { SendOutcomes } from "./Outcomes.js"
import { codeOf, transmitter } from "./Transmit.js"
import { type SendInput, validateSend } from "./Validate.js"
import { Verp } from "../mail/Verp.js"

// The names of the send path's parts that its callers import from here.
export { addressesIn, type ApprovalSetting, GATE_DOCS_PATH, type SendState } from "./Checks.js"
export { type Automation, autoSubmittedValue, LOOP_IN_A_ROW, LOOP_THREAD_PER_HOUR } from "./LoopGuard.js"
export { codeOf } from "./Transmit.js"
export { guessType, type SendInput, validateSend } from "./Validate.js"

export type SendError =
  | ValidationError
  | Forbidden
  | CannotSendFromDomain
  | RecipientNotAllowed
  | DiscardNotEnabled
  | RateLimited
  | LoopDetected
  | RecipientSuppressed

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
    const outcomes = yield* SendOutcomes
    const leaseMs = Duration.toMillis(config.outboundTimeout) + 30_000
    const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))
    // Making the managed domain's key (an RSA key pair) takes a moment: not on a first send's clock.
    // In the service's scope, so stopping the service interrupts it.
    yield* Effect.forkScoped(Effect.ignore(dkim.managedSigning))

    const { checkGate, checkSender, checkSuppressed, defaultFrom, orgFacts, quotaOf, roomOf, stateOf } = sendChecks({ sql, outcomes, config })
    const loop = loopGuard({ repo, orgEvents })
    const { relayRow } = transmitter({ repo, dkim, local, relay, verp, outcomes })

    const validate = (input: SendInput, nowMs: number) =>
      validateSend(input, nowMs).pipe(Effect.provideService(RegistryDirectory, directory))

    const messageIdFor = (id: string, fromAddress: string) => `<${id}@${domainOf(fromAddress)}>`

    /**
     * Records a send and, unless scheduled, relays it now. Fails with the check that refused it, or
     * with the relay's error after recording the message as `failed`.
     */
    const submitAs = (
      orgId: string,
      input: SendInput,
      automation: Automation | undefined,
      /** The organization's state as the caller read it moments ago (`stateFor`), if it did. */
      read?: SendState
    ): Effect.Effect<SentRow, SendError | RelayError> =>
      Effect.gen(function*() {
        const at = yield* now
        const v = yield* validate(input, at.getTime())
        const all = [...v.to, ...v.cc, ...v.bcc].map((m) => m.address)
        // Registry recipients resolve to addresses the caller's read did not cover: read again then.
        const state = read !== undefined && covers(read, all) ? read : yield* stateOf(orgId, all)
        const facts = state.facts
        yield* decide("emails.send", facts, config.publicBaseUrl)
        if (input.discardContent && !facts.discardEnabled) {
          return yield* new DiscardNotEnabled({
            message: "discard_content needs the account setting discard_content_on_webhook_confirmed to be on (PATCH /account)"
          })
        }
        yield* checkSender(state.senders, v.from.address, v.from.name)
        yield* checkGate(state, all)
        yield* checkSuppressed(state, all)
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
        // A reply names its original (In-Reply-To, References): it joins the original's thread. A
        // message naming none starts a thread of its own: its Message-ID is new and unguessable
        // (a random UUID), so no stored message can name it yet and there is nothing to look up.
        const thread = input.inReplyTo === null && input.references.length === 0
          ? { threadId: uuid7(at.getTime()), merged: [] }
          : yield* threading.assign({ orgId, messageId, inReplyTo: input.inReplyTo, references: input.references }).pipe(
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
        // Under the organization's quota lock, so concurrent sends never overshoot the quota and
        // concurrent automated sends never pass the loop budgets. A person's send is one statement:
        // it takes the lock, reads the usage (as it was before the row) and writes the row only when
        // both windows have room. With thread merges it runs in a transaction that a full window
        // fails, so the merges are taken back with it.
        const recorded = automation === undefined
          ? yield* Effect.gen(function*() {
            const counted = yield* repo.recordCounted(record, roomOf(facts, at))
            yield* quotaOf(facts, counted.usage, at)
            if (Option.isNone(counted.row)) return yield* Effect.die(new Error("a send the quota had room for was not recorded"))
            return Either.right<SentRow>(counted.row.value)
          }).pipe(record.merges.length === 0 ? identity : sql.withTransaction, Effect.catchTag("SqlError", Effect.die))
          : yield* Effect.gen(function*() {
            yield* quotaOf(facts, yield* repo.usageLocked(orgId, at), at)
            const refusal = yield* loop.check(orgId, thread.threadId, all, at)
            if (Option.isSome(refusal)) return Either.left(refusal.value)
            return Either.right(yield* repo.recordSentEmail(record))
          }).pipe(sql.withTransaction, Effect.catchTag("SqlError", Effect.die))
        if (Either.isLeft(recorded)) {
          return yield* loop.refuse(orgId, automation!, thread.threadId, recorded.left, {
            from: record.fromHeader,
            to: [...record.to, ...record.cc, ...record.bcc],
            subject: record.subject
          }, at)
        }
        const row = recorded.right
        if (!immediate) return row
        const result = yield* relayRow(row, token, undefined, content, state.domains)
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
        const recipients = [...row.to_addresses, ...row.cc_addresses, ...row.bcc_addresses].map((s) => {
          const m = parseMailbox(s)
          return typeof m === "string" ? s : m.address
        })
        const state = yield* stateOf(row.org_id, recipients)
        const facts = state.facts
        const checks = yield* Effect.either(
          Effect.gen(function*() {
            const from = parseMailbox(row.from_header)
            yield* checkSender(state.senders, row.from_address, typeof from === "string" ? "" : from.name)
            yield* checkGate(state, recipients)
            yield* checkSuppressed(state, recipients)
            // One statement under the quota lock: counted into the quota only when there is room.
            const usage = yield* repo.takeQuota(row.org_id, row.id, token, roomOf(facts, at))
            yield* quotaOf(facts, usage, at)
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
        return { outcome: "relayed" as const, result: yield* relayRow(row, token, retryAt, undefined, state.domains) }
      })

    /**
     * The organization's state for a send of `input` as written (its addresses parsed as far as they
     * parse): read once by a caller that decides something on it before submitting (the approval).
     */
    const stateFor = (orgId: string, input: SendInput) =>
      stateOf(orgId, [...input.to, ...input.cc, ...input.bcc].flatMap((s) => {
        const m = parseMailbox(s)
        return typeof m === "string" ? [] : [m.address]
      }))

    return { submit, submitAs, deliver, orgFacts, stateFor, defaultFrom } as const
  }),
  dependencies: [SendingRepo.Default, OutboundRelay.Default, DkimKeys.Default, Verp.Default]
}) {}

