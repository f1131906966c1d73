/** Contract of registries: ownable directories of agents addressed by a registry-scoped handle. */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { allErrors, DateTimeString, IdempotencyHeaders, Ok, OkList, strict } from "../contract/Envelope.js"
import { EmailAddress } from "../contract/EmailAddress.js"
import { Wire } from "../contract/Errors.js"
import { ListQuery } from "../contract/Paging.js"
import { Authentication } from "../contract/Security.js"

export const REGISTRY_NAME = /^[a-z0-9-]{3,64}$/
export const HANDLE = /^[a-z0-9._-]{1,64}$/
export const DESCRIPTION_MAX_LENGTH = 500
export const MAX_CAPABILITIES = 50
export const CAPABILITY_MAX_LENGTH = 100
export const METADATA_MAX_BYTES = 8 * 1024

export const RegistryName = Schema.String.pipe(
  Schema.pattern(REGISTRY_NAME, { message: () => "must be 3-64 characters of a-z, 0-9 and -" })
).annotations({
  description: "3-64 of [a-z0-9-], unique across the service; a name stays with the organization that first created it, " +
    "also after the registry is deleted"
})

export const Handle = Schema.String.pipe(
  Schema.pattern(HANDLE, { message: () => "must be 1-64 characters of a-z, 0-9, '.', '_' and '-'" })
).annotations({ description: "1-64 of [a-z0-9._-], unique in the registry" })

export const PublishPolicy = Schema.Literal("owner_only", "request", "open").annotations({
  description: "`owner_only`: only the owner publishes; `open`: every organization publishes at once; " +
    "`request`: other organizations' entries wait as `pending` until the owner approves or rejects them"
})
export type PublishPolicy = typeof PublishPolicy.Type

const Description = Schema.String.pipe(
  Schema.maxLength(DESCRIPTION_MAX_LENGTH, { message: () => `must be at most ${DESCRIPTION_MAX_LENGTH} characters` })
)

export const Registry = Schema.Struct({
  id: Schema.UUID,
  name: Schema.String,
  description: Schema.NullOr(Schema.String),
  publish_policy: PublishPolicy,
  is_owner: Schema.Boolean.annotations({ description: "whether the calling organization owns the registry" }),
  entry_count: Schema.Int.annotations({ description: "published entries" }),
  created_at: DateTimeString,
  updated_at: DateTimeString
}).annotations({ identifier: "Registry" })
export type Registry = typeof Registry.Type

export const CreateRegistry = strict(Schema.Struct({
  name: RegistryName,
  description: Schema.optionalWith(Schema.NullOr(Description), { exact: true }).annotations({
    description: "at most 500 characters"
  }),
  publish_policy: Schema.optionalWith(PublishPolicy, { exact: true }).annotations({ description: "default `owner_only`" })
})).annotations({ identifier: "CreateRegistry" })
export type CreateRegistry = typeof CreateRegistry.Type

export const UpdateRegistry = strict(Schema.Struct({
  description: Schema.optionalWith(Schema.NullOr(Description), { exact: true }),
  publish_policy: Schema.optionalWith(PublishPolicy, { exact: true }).annotations({
    description: "applies to later publishes; entries already pending stay pending until approved or rejected"
  })
})).pipe(
  Schema.filter((b) => Object.keys(b).length > 0 || "at least one property is required"),
  Schema.annotations({
    identifier: "UpdateRegistry",
    description: "Only the owner changes a registry. The name cannot change: handles are addressed as `registry:<name>/<handle>`."
  })
)
export type UpdateRegistry = typeof UpdateRegistry.Type

export const RegistryListQuery = allErrors(Schema.Struct({
  ...ListQuery.fields,
  owned: Schema.optionalWith(Schema.BooleanFromString, { exact: true }).annotations({
    description: "`true`: only registries the calling organization owns; `false`: only the others"
  })
}))
export type RegistryListQuery = typeof RegistryListQuery.Type

export const EntryStatus = Schema.Literal("pending", "published", "rejected").annotations({
  description: "`pending` until the owner approves an entry published under `request`; `rejected` appears only " +
    "in the answer to a reject (the entry is removed and its handle freed)"
})
export type EntryStatus = typeof EntryStatus.Type

export const Entry = Schema.Struct({
  handle: Schema.String,
  address: Schema.String.annotations({ description: "the agent's address; one the publishing organization can send from" }),
  description: Schema.NullOr(Schema.String),
  capabilities: Schema.Array(Schema.String),
  metadata: Schema.Record({ key: Schema.String, value: Schema.Unknown }),
  status: EntryStatus,
  publisher_is_you: Schema.Boolean.annotations({ description: "whether the calling organization published the entry" }),
  created_at: DateTimeString,
  updated_at: DateTimeString
}).annotations({ identifier: "RegistryEntry" })
export type Entry = typeof Entry.Type

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/

/** Whether any string (or key) in a JSON value holds half a surrogate pair, which PostgreSQL's jsonb refuses. */
export const hasLoneSurrogate = (value: unknown): boolean => {
  if (typeof value === "string") return LONE_SURROGATE.test(value)
  if (Array.isArray(value)) return value.some(hasLoneSurrogate)
  if (value !== null && typeof value === "object") {
    return Object.entries(value).some(([k, v]) => LONE_SURROGATE.test(k) || hasLoneSurrogate(v))
  }
  return false
}

const WELL_FORMED = "must be well-formed Unicode (no lone surrogate)"

const Capabilities = Schema.Array(
  Schema.String.pipe(
    Schema.minLength(1, { message: () => "must not be empty" }),
    Schema.maxLength(CAPABILITY_MAX_LENGTH, { message: () => `must be at most ${CAPABILITY_MAX_LENGTH} characters` }),
    Schema.filter((c) => !hasLoneSurrogate(c) || WELL_FORMED)
  )
).pipe(Schema.maxItems(MAX_CAPABILITIES, { message: () => `at most ${MAX_CAPABILITIES} capabilities` })).annotations({
  description: `what the agent does, e.g. ["invoices.read"]; at most ${MAX_CAPABILITIES} strings of 1-${CAPABILITY_MAX_LENGTH} characters`
})

const Metadata = Schema.Record({ key: Schema.String, value: Schema.Unknown }).pipe(
  Schema.filter((m) => {
    if (Buffer.byteLength(JSON.stringify(m), "utf8") > METADATA_MAX_BYTES) return `must be at most ${METADATA_MAX_BYTES} bytes as JSON`
    return !hasLoneSurrogate(m) || WELL_FORMED
  })
).annotations({ description: "any JSON object, at most 8 KiB serialized; a PATCH replaces it whole" })

const AddressField = EmailAddress.annotations({
  description: "the agent's address: the publishing organization's managed inbox (or its +tag form) or an address at " +
    "one of its verified domains; case is ignored"
})

export const PublishEntry = strict(Schema.Struct({
  handle: Handle,
  address: AddressField,
  description: Schema.optionalWith(Schema.NullOr(Description), { exact: true }),
  capabilities: Schema.optionalWith(Capabilities, { exact: true }),
  metadata: Schema.optionalWith(Metadata, { exact: true })
})).annotations({ identifier: "PublishEntry" })
export type PublishEntry = typeof PublishEntry.Type

export const UpdateEntry = strict(Schema.Struct({
  address: Schema.optionalWith(AddressField, { exact: true }).annotations({
    description: "only the publisher changes the address; under `request` a new address waits for approval again"
  }),
  description: Schema.optionalWith(Schema.NullOr(Description), { exact: true }),
  capabilities: Schema.optionalWith(Capabilities, { exact: true }),
  metadata: Schema.optionalWith(Metadata, { exact: true })
})).pipe(
  Schema.filter((b) => Object.keys(b).length > 0 || "at least one property is required"),
  Schema.annotations({ identifier: "UpdateEntry" })
)
export type UpdateEntry = typeof UpdateEntry.Type

export const EntryListQuery = allErrors(Schema.Struct({
  ...ListQuery.fields,
  status: Schema.optionalWith(Schema.Literal("pending", "published"), { exact: true }).annotations({
    description: "only entries in this state"
  })
}))
export type EntryListQuery = typeof EntryListQuery.Type

const RegistryRef = RegistryName.annotations({ description: "the registry's name, or its id" })
export const RegistryPath = allErrors(Schema.Struct({ name: RegistryRef }))
export const EntryPath = allErrors(Schema.Struct({ name: RegistryRef, handle: Handle }))

export class RegistriesApi extends HttpApiGroup.make("registries")
  .add(
    HttpApiEndpoint.post("create", "/registries")
      .setPayload(CreateRegistry)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Ok(Registry, "Registry"), { status: 201 })
      .addError(Wire.Forbidden)
      .addError(Wire.Conflict)
      .annotate(OpenApi.Summary, "Create a registry (its name is unique across the service and stays yours; needs `registries`)")
  )
  .add(
    HttpApiEndpoint.get("list", "/registries")
      .setUrlParams(RegistryListQuery)
      .addSuccess(OkList(Registry, "Registry"))
      .annotate(OpenApi.Summary, "Every registry, newest first (`owned=true`: only yours)")
  )
  .add(
    HttpApiEndpoint.get("get", "/registries/:name")
      .setPath(RegistryPath)
      .addSuccess(Ok(Registry, "Registry"))
      .addError(Wire.NotFound)
      .annotate(OpenApi.Summary, "A registry")
  )
  .add(
    HttpApiEndpoint.patch("update", "/registries/:name")
      .setPath(RegistryPath)
      .setPayload(UpdateRegistry)
      .addSuccess(Ok(Registry, "Registry"))
      .addError(Wire.NotFound)
      .addError(Wire.Forbidden)
      .annotate(OpenApi.Summary, "Change a registry's description or publish policy (owner only)")
  )
  .add(
    HttpApiEndpoint.del("remove", "/registries/:name")
      .setPath(RegistryPath)
      .addSuccess(Ok(Registry, "Registry"))
      .addError(Wire.NotFound)
      .addError(Wire.Forbidden)
      .annotate(OpenApi.Summary, "Delete a registry and every entry in it (owner only; the name stays reserved for you)")
  )
  .add(
    HttpApiEndpoint.post("publish", "/registries/:name/entries")
      .setPath(RegistryPath)
      .setPayload(PublishEntry)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Ok(Entry, "RegistryEntry"), { status: 201 })
      .addError(Wire.NotFound)
      .addError(Wire.Forbidden)
      .addError(Wire.CannotSendFromDomain)
      .addError(Wire.Conflict)
      .annotate(
        OpenApi.Summary,
        "Publish an agent under a handle (`owner_only`: the owner; `open`: anyone; `request`: pending until approved)"
      )
  )
  .add(
    HttpApiEndpoint.get("entries", "/registries/:name/entries")
      .setPath(RegistryPath)
      .setUrlParams(EntryListQuery)
      .addSuccess(OkList(Entry, "RegistryEntry"))
      .addError(Wire.NotFound)
      .annotate(
        OpenApi.Summary,
        "Entries, newest first: the published ones, plus every pending one for the owner and your own for a publisher"
      )
  )
  .add(
    HttpApiEndpoint.get("entry", "/registries/:name/entries/:handle")
      .setPath(EntryPath)
      .addSuccess(Ok(Entry, "RegistryEntry"))
      .addError(Wire.NotFound)
      .annotate(OpenApi.Summary, "Resolve a handle: the entry and its address (pending ones only for the owner and the publisher)")
  )
  .add(
    HttpApiEndpoint.patch("updateEntry", "/registries/:name/entries/:handle")
      .setPath(EntryPath)
      .setPayload(UpdateEntry)
      .addSuccess(Ok(Entry, "RegistryEntry"))
      .addError(Wire.NotFound)
      .addError(Wire.Forbidden)
      .addError(Wire.CannotSendFromDomain)
      .annotate(OpenApi.Summary, "Change an entry (the publisher or the registry's owner; the address only by the publisher)")
  )
  .add(
    HttpApiEndpoint.del("removeEntry", "/registries/:name/entries/:handle")
      .setPath(EntryPath)
      .addSuccess(Ok(Entry, "RegistryEntry"))
      .addError(Wire.NotFound)
      .addError(Wire.Forbidden)
      .annotate(OpenApi.Summary, "Remove an entry (the publisher or the registry's owner)")
  )
  .add(
    HttpApiEndpoint.post("approve", "/registries/:name/entries/:handle/approve")
      .setPath(EntryPath)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Ok(Entry, "RegistryEntry"))
      .addError(Wire.NotFound)
      .addError(Wire.Forbidden)
      .addError(Wire.Conflict)
      .annotate(OpenApi.Summary, "Publish a pending entry (owner only; 409 when it is not pending)")
  )
  .add(
    HttpApiEndpoint.post("reject", "/registries/:name/entries/:handle/reject")
      .setPath(EntryPath)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Ok(Entry, "RegistryEntry"))
      .addError(Wire.NotFound)
      .addError(Wire.Forbidden)
      .addError(Wire.Conflict)
      .annotate(OpenApi.Summary, "Refuse a pending entry: it is removed and its handle freed (owner only; 409 when it is not pending)")
  )
  .middleware(Authentication)
  .annotate(
    OpenApi.Description,
    "Registries: directories of agents that other agents find by handle instead of by address. Reading needs " +
      "any credential; creating registries and publishing entries need the `registries` entitlement. A published " +
      "entry also marks inbound mail: when a message's From is an entry's address and it passes DMARC (or carries " +
      "a passing DKIM signature aligned with that address's domain), its event payload carries `email.sender` " +
      "`{registry, handle, verified: true}` (a list when several entries match), and sender filters of type " +
      "`registry` admit such senders."
  )
{}
