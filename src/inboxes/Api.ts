/**
 * Contract of Inboxes: the organization's addresses on the managed inbox domain. The default inbox
 * (the account's `managed_inbox_address`) is one of them; more are created up to the plan's
 * `limits.inboxes_max`. Mail to an inbox (and its `+tag` forms) is stored with its `inbox_id`.
 */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { DateTimeString, IdempotencyHeaders, IdPath, Ok, OkList, strict, Uuid } from "../contract/Envelope.js"
import { Wire } from "../contract/Errors.js"
import { ListQuery } from "../contract/Paging.js"
import { Authentication } from "../contract/Security.js"

export const Inbox = Schema.Struct({
  id: Uuid,
  address: Schema.String.annotations({ description: "username@<managed inbox domain>; its +tag forms reach it too" }),
  username: Schema.String,
  display_name: Schema.NullOr(Schema.String),
  is_default: Schema.Boolean.annotations({ description: "the organization's default inbox (the account's managed_inbox_address)" }),
  created_at: DateTimeString,
  updated_at: DateTimeString
}).annotations({ identifier: "Inbox" })
export type Inbox = typeof Inbox.Type

/** Why a username is refused, or undefined when it is a valid one (case is ignored). */
export const usernameProblem = (u: string): string | undefined => {
  if (u.length < 1 || u.length > 64) return "must be 1 to 64 characters"
  if (!/^[a-z0-9](?:[a-z0-9._-]*[a-z0-9])?$/i.test(u) || u.includes("..")) {
    return "must be letters, digits, '.', '_' or '-', starting and ending with a letter or digit (no '+': that starts a tag)"
  }
  // `fn-<id>@` addresses are functions' wake addresses.
  if (/^fn-/i.test(u)) return "must not start with fn- (reserved for functions' wake addresses)"
  // `bounces+<token>@` is every send's VERP return path: its +tag forms must stay the service's.
  if (u.toLowerCase() === "bounces") return "bounces is reserved (the return path of sent mail)"
  return undefined
}

export const Username = Schema.String.pipe(
  Schema.filter((u) => usernameProblem(u) ?? true)
).annotations({ description: "the local part: 1-64 of letters, digits, '.', '_', '-'; lowercased" })

const DisplayName = Schema.String.pipe(Schema.minLength(1), Schema.maxLength(100))
  .annotations({ description: "shown as the From name when it sends; 1-100 characters" })

export const CreateInbox = strict(Schema.Struct({
  username: Schema.optionalWith(Username, { exact: true }).annotations({ description: "random when absent" }),
  display_name: Schema.optionalWith(DisplayName, { exact: true })
})).annotations({ identifier: "CreateInbox" })
export type CreateInbox = typeof CreateInbox.Type

export const UpdateInbox = strict(Schema.Struct({
  username: Schema.optionalWith(Username, { exact: true }),
  display_name: Schema.optionalWith(Schema.NullOr(DisplayName), { exact: true })
})).pipe(
  Schema.filter((b) => Object.keys(b).length > 0 || "at least one property is required"),
  Schema.annotations({ identifier: "UpdateInbox" })
)
export type UpdateInbox = typeof UpdateInbox.Type

export class InboxesApi extends HttpApiGroup.make("inboxes")
  .add(
    HttpApiEndpoint.post("create", "/inboxes")
      .setPayload(CreateInbox)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Ok(Inbox, "Inbox"), { status: 201 })
      .addError(Wire.Forbidden)
      .addError(Wire.Conflict)
      .annotate(OpenApi.Summary, "Create an inbox on the managed domain")
      .annotate(
        OpenApi.Description,
        "409 `conflict` when the address is taken (by any organization); 403 `forbidden` past the plan's `limits.inboxes_max`."
      )
  )
  .add(
    HttpApiEndpoint.get("list", "/inboxes")
      .setUrlParams(ListQuery)
      .addSuccess(OkList(Inbox, "Inbox"))
      .annotate(OpenApi.Summary, "Inboxes, the default one included, newest first")
  )
  .add(
    HttpApiEndpoint.get("get", "/inboxes/:id")
      .setPath(IdPath)
      .addSuccess(Ok(Inbox, "Inbox"))
      .addError(Wire.NotFound)
      .annotate(OpenApi.Summary, "One inbox")
  )
  .add(
    HttpApiEndpoint.patch("update", "/inboxes/:id")
      .setPath(IdPath)
      .setPayload(UpdateInbox)
      .addSuccess(Ok(Inbox, "Inbox"))
      .addError(Wire.NotFound)
      .addError(Wire.Conflict)
      .annotate(OpenApi.Summary, "Rename an inbox (display_name and/or username)")
      .annotate(
        OpenApi.Description,
        "409 `conflict` when the new address is taken, when it is the default inbox's username (the account's address), " +
          "or when routes use the inbox (change or delete them first; `details` lists them)."
      )
  )
  .add(
    HttpApiEndpoint.del("remove", "/inboxes/:id")
      .setPath(IdPath)
      .addSuccess(Ok(Inbox, "Inbox"))
      .addError(Wire.NotFound)
      .addError(Wire.Conflict)
      .annotate(OpenApi.Summary, "Delete an inbox")
      .annotate(
        OpenApi.Description,
        "409 `conflict` for the default inbox, and while routes (or functions through routes) use it: `details.routes` and " +
          "`details.functions` list them. Its stored mail stays, with `inbox_id` null."
      )
  )
  .middleware(Authentication)
  .annotate(OpenApi.Description, "Addresses of the organization on the managed inbox domain")
{}
