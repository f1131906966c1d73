/** Contract of the Domains area: claim, verify (DNS TXT + MX), list, update, delete. */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { SpamThreshold } from "../account/Api.js"
import { DateTimeString, IdempotencyHeaders, IdPath, Ok, OkList, strict } from "../contract/Envelope.js"
import { Wire } from "../contract/Errors.js"
import { ListQuery } from "../contract/Paging.js"
import { Authentication } from "../contract/Security.js"
import { isDomainName } from "../mail/SenderPatterns.js"

export const DomainName = Schema.String.pipe(
  Schema.maxLength(253),
  Schema.filter((s) => isDomainName(s.trim().toLowerCase().replace(/\.$/, "")) || "must be a domain name such as acme.com")
).annotations({ description: "a domain name such as acme.com (case-insensitive)" })

export const DnsRecord = Schema.Struct({
  type: Schema.Literal("TXT", "MX"),
  name: Schema.String,
  value: Schema.String,
  priority: Schema.NullOr(Schema.Int),
  purpose: Schema.Literal("verification", "inbound", "dkim").annotations({
    description: "`verification`: proves the claim; `inbound`: routes the domain's mail here; `dkim`: the public key outgoing mail is signed with"
  })
}).annotations({ identifier: "DnsRecord" })

export const VerificationReport = Schema.Struct({
  txt: Schema.Literal("ok", "missing", "lookup_failed"),
  mx: Schema.Literal("ok", "missing", "other_provider_confirmed", "lookup_failed"),
  message: Schema.String
}).annotations({ identifier: "DomainVerificationReport" })

const common = {
  id: Schema.UUID,
  org_id: Schema.UUID,
  domain: Schema.String,
  created_at: DateTimeString,
  updated_at: DateTimeString,
  verification: Schema.optionalWith(VerificationReport, { exact: true }).annotations({
    description: "only in the verify response: what the DNS check found"
  })
}

export const VerifiedDomain = Schema.Struct({
  ...common,
  verified: Schema.Literal(true),
  verified_at: DateTimeString,
  is_active: Schema.Boolean,
  spam_threshold: Schema.NullOr(Schema.Number),
  dns_records: Schema.Array(DnsRecord).annotations({ description: "records to keep published (the DKIM key signs outgoing mail)" })
}).annotations({ identifier: "VerifiedDomain" })

export const UnverifiedDomain = Schema.Struct({
  ...common,
  verified: Schema.Literal(false),
  verification_token: Schema.String,
  dns_records: Schema.Array(DnsRecord).annotations({ description: "records to publish, then call verify" })
}).annotations({ identifier: "UnverifiedDomain" })

export const Domain = Schema.Union(VerifiedDomain, UnverifiedDomain).annotations({ identifier: "Domain" })
export type Domain = typeof Domain.Type

export const ClaimDomain = strict(Schema.Struct({
  domain: DomainName,
  confirmed: Schema.optionalWith(Schema.Boolean, { exact: true }).annotations({
    description: "true: take mail over even though the domain's MX points at another mailbox provider"
  })
})).annotations({ identifier: "ClaimDomain" })

export const VerifyDomain = strict(Schema.Struct({
  confirmed: Schema.optionalWith(Schema.Boolean, { exact: true })
})).annotations({ identifier: "VerifyDomain" })

export const UpdateDomain = strict(Schema.Struct({
  is_active: Schema.optionalWith(Schema.Boolean, { exact: true }),
  spam_threshold: Schema.optionalWith(Schema.NullOr(SpamThreshold), { exact: true }).annotations({
    description: "paid plans only; null uses the account's threshold"
  })
})).pipe(
  Schema.filter((b) => Object.keys(b).length > 0 || "at least one property is required"),
  Schema.annotations({ identifier: "UpdateDomain" })
)

export class DomainsApi extends HttpApiGroup.make("domains")
  .add(
    HttpApiEndpoint.post("claim", "/domains")
      .setPayload(ClaimDomain)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Ok(Domain, "Domain"), { status: 201 })
      .addError(Wire.Forbidden)
      .addError(Wire.Conflict)
      .addError(Wire.MxConflict)
      .addError(Wire.RateLimitExceeded)
      .annotate(OpenApi.Summary, "Claim a domain; publish its dns_records, then verify")
  )
  .add(
    HttpApiEndpoint.post("verify", "/domains/:id/verify")
      .setPath(IdPath)
      .setPayload(Schema.NullOr(VerifyDomain).annotations({ description: "optional; an empty body is allowed" }))
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Ok(Domain, "Domain"))
      .addError(Wire.NotFound)
      .addError(Wire.Conflict)
      .addError(Wire.MxConflict)
      .addError(Wire.RateLimitExceeded)
      .annotate(OpenApi.Summary, "Check the TXT token and MX records; verified when the token is published")
  )
  .add(
    HttpApiEndpoint.get("list", "/domains")
      .setUrlParams(ListQuery)
      .addSuccess(OkList(Domain, "Domain"))
      .annotate(OpenApi.Summary, "Verified and unverified domains, newest first")
  )
  .add(
    HttpApiEndpoint.get("get", "/domains/:id")
      .setPath(IdPath)
      .addSuccess(Ok(Domain, "Domain"))
      .addError(Wire.NotFound)
      .annotate(OpenApi.Summary, "A domain with the DNS records to publish (verification, MX, and its DKIM key)")
  )
  .add(
    HttpApiEndpoint.patch("update", "/domains/:id")
      .setPath(IdPath)
      .setPayload(UpdateDomain)
      .addSuccess(Ok(Domain, "Domain"))
      .addError(Wire.NotFound)
      .addError(Wire.Forbidden)
      .addError(Wire.Conflict)
      .annotate(OpenApi.Summary, "Turn a verified domain on or off; set its spam threshold (paid plans)")
  )
  .add(
    HttpApiEndpoint.del("remove", "/domains/:id")
      .setPath(IdPath)
      .addSuccess(Ok(Domain, "Domain"))
      .addError(Wire.NotFound)
      .annotate(OpenApi.Summary, "Remove a domain; its endpoints are deactivated, its routes and filters deleted")
  )
  .middleware(Authentication)
  .annotate(OpenApi.Description, "Claim, verify and manage email domains")
{}
