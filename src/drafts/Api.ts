/** Contract of drafts: sends held for a person's approval (account setting `send_approval`). */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { allErrors, DateTimeString, IdempotencyHeaders, IdPath, Ok, Uuid } from "../contract/Envelope.js"
import { Wire } from "../contract/Errors.js"
import { Authentication } from "../contract/Security.js"

/** Drafts not decided within this many days expire. */
export const DRAFT_TTL_DAYS = 7

export { Draft, DraftStatus } from "../contract/Drafts.js"
import { Draft, DraftStatus } from "../contract/Drafts.js"

export const DraftListQuery = allErrors(Schema.Struct({
  status: Schema.optionalWith(DraftStatus, { exact: true })
}))

export class DraftsApi extends HttpApiGroup.make("drafts")
  .add(
    HttpApiEndpoint.get("list", "/drafts")
      .setUrlParams(DraftListQuery)
      .addSuccess(Ok(Schema.Array(Draft), "DraftList"))
      .annotate(OpenApi.Summary, "Sends held for approval, newest first (the latest 100)")
  )
  .add(
    HttpApiEndpoint.get("get", "/drafts/:id")
      .setPath(IdPath)
      .addSuccess(Ok(Draft, "Draft"))
      .addError(Wire.NotFound)
      .annotate(OpenApi.Summary, "One held send")
  )
  .add(
    HttpApiEndpoint.post("approve", "/drafts/:id/approve")
      .setPath(IdPath)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Ok(Draft, "Draft"))
      .addError(Wire.NotFound)
      .addError(Wire.Conflict)
      .annotate(OpenApi.Summary, "Approve a held send: it is sent, exactly once (409 conflict once decided or expired)")
  )
  .add(
    HttpApiEndpoint.post("reject", "/drafts/:id/reject")
      .setPath(IdPath)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Ok(Draft, "Draft"))
      .addError(Wire.NotFound)
      .addError(Wire.Conflict)
      .annotate(OpenApi.Summary, "Reject a held send: it is never sent (409 conflict once decided or expired)")
  )
  .middleware(Authentication)
  .annotate(
    OpenApi.Description,
    "With the account's send_approval, POST /send-mail, reply and forward answer 202 with a draft instead of sending; " +
      "a person approves or rejects it (an admin-scoped credential, or the single-use link mailed to the owner)"
  )
{}
