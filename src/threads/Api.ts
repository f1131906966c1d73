/** Contract of Threads: conversations across received and sent mail. */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { allErrors, DateTimeFilter, DateTimeString, IdPath, Ok, OkList, Uuid } from "../contract/Envelope.js"
import { Wire } from "../contract/Errors.js"
import { IncludeWake, Label } from "../emails/Api.js"
import { ListQuery } from "../contract/Paging.js"
import { Authentication } from "../contract/Security.js"
import { ThreadWatch } from "../wake/Api.js"

export const SNIPPET_CHARS = 200

export const Direction = Schema.Literal("received", "sent")

const threadFields = {
  id: Uuid,
  subject: Schema.NullOr(Schema.String).annotations({ description: "the first message's subject without Re:/Fwd: prefixes" }),
  participants: Schema.Array(Schema.String).annotations({ description: "every From, To and Cc address of its messages, lowercased, sorted" }),
  message_count: Schema.Int,
  received_count: Schema.Int,
  sent_count: Schema.Int,
  first_message_at: DateTimeString,
  last_message_at: DateTimeString,
  snippet: Schema.String.annotations({ description: "at most 200 characters of the newest message's text" }),
  inbox_id: Schema.NullOr(Uuid).annotations({
    description: "the inbox (GET /inboxes) of its first message that reached or left one; null when none did"
  }),
  labels: Schema.Array(Schema.String).annotations({ description: "every label of its received emails, sorted" }),
  unread_count: Schema.Int.annotations({ description: "its received emails not marked read" })
}

export const Thread = Schema.Struct(threadFields).annotations({ identifier: "Thread" })
export type Thread = typeof Thread.Type

export const ThreadMessage = Schema.Struct({
  id: Uuid.annotations({ description: "the received email's id (GET /emails/{id}) or the sent email's (GET /sent-emails/{id})" }),
  direction: Direction,
  from: Schema.NullOr(Schema.String),
  to: Schema.Array(Schema.String),
  cc: Schema.Array(Schema.String),
  subject: Schema.NullOr(Schema.String),
  date: DateTimeString.annotations({ description: "when it reached the conversation: received, or sent" }),
  message_id: Schema.NullOr(Schema.String),
  snippet: Schema.String,
  inbox_id: Schema.NullOr(Uuid).annotations({ description: "the inbox it reached or was sent from; null for a domain address" })
}).annotations({ identifier: "ThreadMessage" })
export type ThreadMessage = typeof ThreadMessage.Type

export const ThreadWithMessages = Schema.Struct({
  ...threadFields,
  messages: Schema.Array(ThreadMessage).annotations({ description: "oldest first" }),
  watches: Schema.Array(ThreadWatch).annotations({
    description: "the thread's watches (POST /threads/{id}/watch), newest first: `status: active` ones are still waiting"
  })
}).annotations({ identifier: "ThreadWithMessages" })
export type ThreadWithMessages = typeof ThreadWithMessages.Type

export const ThreadListQuery = allErrors(Schema.Struct({
  ...ListQuery.fields,
  participant: Schema.optionalWith(Schema.String.pipe(Schema.minLength(1), Schema.maxLength(320)), { exact: true }).annotations({
    description: "only threads with a message from, to or cc this address"
  }),
  date_from: Schema.optionalWith(DateTimeFilter, { exact: true }).annotations({ description: "last activity at or after" }),
  date_to: Schema.optionalWith(DateTimeFilter, { exact: true }).annotations({ description: "last activity at or before" }),
  include: Schema.optionalWith(IncludeWake, { exact: true }),
  inbox_id: Schema.optionalWith(Uuid, { exact: true }).annotations({
    description: "only threads with a message received at or sent from this inbox"
  }),
  label: Schema.optionalWith(Label, { exact: true }).annotations({ description: "only threads with an email carrying this label" })
}))

export class ThreadsApi extends HttpApiGroup.make("threads")
  .add(
    HttpApiEndpoint.get("list", "/threads")
      .setUrlParams(ThreadListQuery)
      .addSuccess(OkList(Thread, "Thread"))
      .annotate(OpenApi.Summary, "Conversations, last activity first")
      .annotate(
        OpenApi.Description,
        "Wake firings are left out (their counts, snippets and threads made of nothing else) unless `include=wake` is given; " +
          "GET /threads/{id} always shows every message."
      )
  )
  .add(
    HttpApiEndpoint.get("get", "/threads/:id")
      .setPath(IdPath)
      .addSuccess(Ok(ThreadWithMessages, "ThreadWithMessages"))
      .addError(Wire.NotFound)
      .annotate(OpenApi.Summary, "One conversation with its messages, oldest first")
  )
  .middleware(Authentication)
  .annotate(
    OpenApi.Description,
    "Conversations across received and sent mail. A message joins the thread of any message of the organization " +
      "it names in In-Reply-To or References, or that names it; when that links two threads they merge into the older. " +
      "Spam-rejected mail keeps a thread id but is not shown. Needs no entitlement."
  )
{}
