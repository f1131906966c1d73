/** Contract of the suppression list: addresses that hard-bounced or complained, which sends refuse. */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { allErrors, DateTimeString, Ok, OkList, Uuid } from "../contract/Envelope.js"
import { Wire } from "../contract/Errors.js"
import { ListQuery } from "../contract/Paging.js"
import { Authentication } from "../contract/Security.js"

export const Suppression = Schema.Struct({
  id: Uuid,
  address: Schema.String.annotations({ description: "lower case" }),
  reason: Schema.Literal("hard_bounce", "complaint"),
  sent_email_id: Schema.NullOr(Uuid).annotations({ description: "the sent email whose bounce or complaint added it" }),
  status: Schema.NullOr(Schema.String).annotations({ description: "the DSN's status code (5.1.1), or the ARF Feedback-Type" }),
  diagnostic: Schema.NullOr(Schema.String),
  created_at: DateTimeString
}).annotations({ identifier: "Suppression" })

export const AddressPath = allErrors(Schema.Struct({
  address: Schema.String.pipe(Schema.minLength(3), Schema.maxLength(320)).annotations({ description: "the suppressed address (case is ignored)" })
}))

export class SuppressionsApi extends HttpApiGroup.make("suppressions")
  .add(
    HttpApiEndpoint.get("list", "/suppressions")
      .setUrlParams(ListQuery)
      .addSuccess(OkList(Suppression, "Suppression"))
      .annotate(OpenApi.Summary, "Suppressed addresses, newest first")
  )
  .add(
    HttpApiEndpoint.del("remove", "/suppressions/:address")
      .setPath(AddressPath)
      .addSuccess(Ok(Suppression, "Suppression"))
      .addError(Wire.NotFound)
      .annotate(OpenApi.Summary, "Mail an address again: removes it from the suppression list (404 when it is not on it)")
  )
  .middleware(Authentication)
  .annotate(
    OpenApi.Description,
    "The suppression list: a hard bounce (a DSN with Action: failed and a 5.x.x status) or a complaint (an ARF " +
      "report) received at a sent email's return path adds the recipient. Sending to a suppressed address " +
      "(send-mail, batch, reply, forward, or a scheduled send when it comes due) is 422 `recipient_suppressed` " +
      "with `details.addresses`."
  )
{}
