/**
 * `POST /send-mail/batch`: up to 100 send-mail bodies in one request. Each message is decoded with
 * the send-mail schema and goes through the whole send path on its own (sender, gate, suppression,
 * quota: one unit each, relay), a few at a time; a message that fails answers the `error` object of
 * the envelope `POST /send-mail` would have answered, and the others go on.
 */
import { HttpApiDecodeError } from "@effect/platform/HttpApiError"
import { Cause, Effect, Either, Option, ParseResult, Schema } from "effect"
import { type ApiError, envelopeOf, ErrorTable } from "../contract/Errors.js"
import { validationFromDecode } from "../platform/ErrorMapping.js"
import { asList } from "../mail/Addresses.js"
import { type BatchResult, SendMail } from "./Api.js"
import type { Draft } from "../contract/Drafts.js"
import type { SentEmail } from "./Api.js"
import type { SendInput } from "./Sender.js"

/** Messages of one batch relayed at once (the relay pool keeps 8 connections). */
const BATCH_CONCURRENCY = 8

/**
 * The send path's input for a send-mail body, `from` defaulted by `defaultFrom` (the organization's
 * only address; a key limited to inboxes, its first inbox).
 */
export const sendInputOf = <E>(defaultFrom: Effect.Effect<string, E>, payload: SendMail) =>
  Effect.map(payload.from === undefined ? defaultFrom : Effect.succeed(payload.from), (from): SendInput => ({
    kind: "send",
    sourceEmailId: null,
    from,
    to: asList(payload.to),
    cc: asList(payload.cc),
    bcc: asList(payload.bcc),
    replyTo: payload.reply_to ?? null,
    subject: payload.subject,
    text: payload.text ?? null,
    html: payload.html ?? null,
    headers: payload.headers ?? {},
    attachments: payload.attachments ?? [],
    sendAt: payload.send_at ?? null,
    discardContent: payload.discard_content ?? false,
    inReplyTo: null,
    references: []
  }))

const decodeMessage = Schema.decodeUnknownEither(SendMail)

const isApiError = (e: unknown): e is ApiError =>
  typeof e === "object" && e !== null && "_tag" in e && typeof e._tag === "string" && e._tag in ErrorTable

type Result = BatchResult["results"][number]

/** What one message became: sent (or scheduled), or held as a draft for approval. */
export type Submitted = { readonly email: SentEmail } | { readonly draft: Draft }

export const sendBatch = <E, D>(
  defaultFrom: Effect.Effect<string, D>,
  messages: ReadonlyArray<unknown>,
  submit: (input: SendInput) => Effect.Effect<Submitted, E>
) =>
  Effect.forEach(messages, (message, index): Effect.Effect<Result> => {
    const decoded = decodeMessage(message)
    if (Either.isLeft(decoded)) {
      const issues = ParseResult.ArrayFormatter.formatErrorSync(decoded.left)
      const invalid = validationFromDecode(new HttpApiDecodeError({ issues: [...issues], message: "" }))
      return Effect.succeed({ index, error: envelopeOf(invalid).error })
    }
    return Effect.flatMap(sendInputOf(defaultFrom, decoded.right), submit).pipe(
      Effect.map((submitted): Result => ({ index, ...submitted })),
      Effect.catchAllCause((cause) => {
        const failure = Cause.failureOption(cause)
        if (Option.isSome(failure) && isApiError(failure.value)) return Effect.succeed({ index, error: envelopeOf(failure.value).error })
        return Effect.as(
          Effect.logError("a batch message failed unexpectedly", cause),
          { index, error: { code: "internal_error", message: "the message could not be sent because of a server fault" } }
        )
      })
    )
  }, { concurrency: BATCH_CONCURRENCY }).pipe(Effect.map((results) => ({ results })))
