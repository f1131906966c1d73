/**
 * The send use cases behind the Sending handlers: a send is checked against the caller's inbox limit,
 * then held as a draft when the account's send_approval asks for it, else submitted; replies and
 * forwards become ordinary send inputs first. The handlers only translate HTTP to these.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Option } from "effect"
import type { Forbidden, ValidationError } from "../contract/Errors.js"
import type { Principal } from "../contract/Security.js"
import type { OrgScope } from "../platform/InboxLimit.js"
import type { ForwardMail, ReplyMail } from "./Api.js"
import { SendApproval } from "./Approval.js"
import { checkInboxSender, limitedDefaultFrom } from "./InboxSenders.js"
import { forwardInput, replyInput } from "./Replies.js"
import { toSentEmail } from "./SentRows.js"
import { Sender, type SendInput } from "./Sender.js"

export class SendRequests extends Effect.Service<SendRequests>()("mailroom/sending/SendRequests", {
  effect: Effect.gen(function*() {
    const sender = yield* Sender
    const approvals = yield* SendApproval
    const sql = yield* SqlClient.SqlClient
    const provideSql = Effect.provideService(SqlClient.SqlClient, sql)

    /** Sends now, or holds the send as a draft when the account's send_approval asks for it. */
    const sendOrHold = (principal: Principal, input: SendInput) =>
      Effect.gen(function*() {
        yield* checkInboxSender(sql, principal, input.from)
        // One read of the organization's state serves the approval and every check of the send.
        const state = yield* sender.stateFor(principal.orgId, input)
        const held = yield* approvals.hold(principal, input, state.approval)
        if (Option.isSome(held)) return { draft: held.value } as const
        return { email: toSentEmail(yield* sender.submitAs(principal.orgId, input, principal.automation, state)) } as const
      })

    /** `from` of a send without one: the caller's first inbox when it is limited to inboxes, else the organization's only address. */
    const defaultFrom = (principal: Principal) =>
      Effect.flatMap(limitedDefaultFrom(sql, principal), (first): Effect.Effect<string, ValidationError | Forbidden> =>
        Option.isSome(first) ? Effect.succeed(first.value) : sender.defaultFrom(principal.orgId))

    return {
      sendOrHold,
      defaultFrom,
      replyInput: (scope: OrgScope, id: string, body: ReplyMail) => replyInput(scope, id, body).pipe(provideSql),
      forwardInput: (scope: OrgScope, id: string, body: ForwardMail) => forwardInput(scope, id, body).pipe(provideSql)
    } as const
  })
}) {}
