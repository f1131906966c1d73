/** Contract of quarantine: releasing held-back mail (listing is `GET /emails?status=quarantined`). */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { IdempotencyHeaders, IdPath, Ok } from "../contract/Envelope.js"
import { Wire } from "../contract/Errors.js"
import { Authentication } from "../contract/Security.js"
import { Email } from "../emails/Api.js"

export class QuarantineApi extends HttpApiGroup.make("quarantine")
  .add(
    HttpApiEndpoint.post("release", "/emails/:id/release")
      .setPath(IdPath)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Ok(Email, "Email"))
      .addError(Wire.NotFound)
      .addError(Wire.Conflict)
      .annotate(OpenApi.Summary, "Release a quarantined email: it is delivered now, with the events of new mail")
      .annotate(
        OpenApi.Description,
        "The email becomes `accepted` and goes through routing, filters and endpoint rules as if it had just arrived " +
          "(a new event id). An email that is not quarantined (never was, or released already) is 409 `conflict`. " +
          "Quarantined mail not released within 30 days is deleted."
      )
  )
  .middleware(Authentication)
  .annotate(OpenApi.Description, "Mail held back by quarantine filters or the attachment policy")
{}
