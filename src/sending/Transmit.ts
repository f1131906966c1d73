/**
 * The relay step of the send path, for a row this process holds (its lease `token`): the message is
 * composed at relay time (its Date is the relay's), DKIM-signed with the sending domain's key (or the
 * managed domain's), split between recipients this service receives (LocalDelivery.ts) and the
 * relay, and the outcome is recorded on the row. A transient relay failure with a retry time is left
 * to the timers (`retryLater`); anything else finishes the row as `sent` or `failed`. `email.sent` is
 * written by the statement that records the send as sent (it exists exactly when that outcome does);
 * the delay event is best-effort: the recorded result stands either way.
 */
import { Clock, type Context, Effect, Either, Option } from "effect"
import { ErrorTable, type ErrorTag } from "../contract/Errors.js"
import type { DkimKeys } from "../domains/Dkim.js"
import { parseMailbox } from "../mail/Addresses.js"
import type { Verp } from "../mail/Verp.js"
import { composeMessage } from "./Compose.js"
import { type DomainsRead, type LocalDelivery, sendSplit } from "./LocalDelivery.js"
import type { SendOutcomes } from "./Outcomes.js"
import type { OutboundRelay, RelayError } from "./Relay.js"
import type { Outcome, SendingRepo } from "./Repo.js"
import type { ContentRow, SentRow } from "./SentRows.js"

/** The wire code of an error of the table. */
export const codeOf = (e: { readonly _tag: string }): string =>
  e._tag in ErrorTable ? ErrorTable[e._tag as ErrorTag].code : "internal_error"

/** The relay step over the send path's repository, signing keys, local delivery, relay and outcomes port. */
export const transmitter = (deps: {
  readonly repo: SendingRepo
  readonly dkim: DkimKeys
  readonly local: Context.Tag.Service<LocalDelivery>
  readonly relay: OutboundRelay
  readonly verp: Verp
  readonly outcomes: Context.Tag.Service<SendOutcomes>
}) => {
  const { dkim, local, outcomes, relay, repo, verp } = deps
  const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

  /** An outcome event is reported on a best-effort basis: the send's own result stands either way. */
  const reported = <A, E>(e: Effect.Effect<A, E>) =>
    Effect.catchAllCause(Effect.asVoid(e), (cause) => Effect.logWarning("outbound outcome event not recorded", cause))

  /** Composes, signs and relays a row this process holds (`token`); records the outcome. */
  const relayRow = (
    row: SentRow,
    token: string,
    retryAt?: (e: RelayError) => Date | undefined,
    known?: ContentRow,
    /** The recipients' verified domains, when the caller read them with the send's state. */
    domains?: DomainsRead
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
      }, domains))
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
      const result: Outcome = Either.match(outcome, {
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
      })
      // `email.sent` is written by the statement that records the send as sent (see SendingRepo.finish).
      const sentEvent = result.status === "sent"
        ? yield* outcomes.sentWithin({ ...row, status: "sent", sent_at: done, relay_response: result.relayResponse }, result.relayResponse, "finished")
        : []
      const finished = yield* repo.finish(row.id, token, result, sentEvent)
      const current = Option.getOrElse(finished, () => row)
      return Either.match(outcome, { onLeft: (e) => Either.left(e), onRight: () => Either.right(current) })
    })

  return { relayRow } as const
}
