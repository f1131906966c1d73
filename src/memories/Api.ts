/** Contract of memories: JSON items under string keys, per organization or per function. */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { allErrors, DateTimeString, Ok, OkList, strict, Uuid } from "../contract/Envelope.js"
import { Wire } from "../contract/Errors.js"
import { Authentication } from "../contract/Security.js"
import { FunctionPath, FunctionRef } from "../contract/Functions.js"

export const MemoryScopeName = Schema.Literal("org", "function")

export const Memory = Schema.Struct({
  key: Schema.String,
  value: Schema.Unknown.annotations({ description: "any JSON value" }),
  scope: MemoryScopeName,
  function_id: Schema.NullOr(Schema.UUID),
  size_bytes: Schema.Int.annotations({ description: "bytes of the serialized value" }),
  expires_at: Schema.NullOr(DateTimeString),
  created_at: DateTimeString,
  updated_at: DateTimeString
}).annotations({ identifier: "Memory" })
export type Memory = typeof Memory.Type

export const MemoryKeyInfo = Schema.Struct({
  key: Schema.String,
  size_bytes: Schema.Int,
  expires_at: Schema.NullOr(DateTimeString),
  updated_at: DateTimeString
}).annotations({ identifier: "MemoryKey" })
export type MemoryKeyInfo = typeof MemoryKeyInfo.Type

export const PutMemory = strict(Schema.Struct({
  value: Schema.Unknown.annotations({ description: "any JSON value, at most 64 KiB serialized" }),
  ttl_seconds: Schema.optionalWith(
    Schema.Int.pipe(Schema.between(1, 315_360_000)).annotations({ message: () => "must be an integer from 1 to 315360000" }),
    { exact: true }
  ).annotations({ description: "the item expires this many seconds after the write" })
})).annotations({ identifier: "PutMemory" })
export type PutMemory = typeof PutMemory.Type

export const MemoryListQuery = allErrors(Schema.Struct({
  prefix: Schema.optionalWith(Schema.String.pipe(Schema.maxLength(512)), { exact: true }).annotations({
    description: "only keys starting with this"
  }),
  limit: Schema.optionalWith(
    Schema.NumberFromString.pipe(Schema.int(), Schema.between(1, 1000)).annotations({
      message: () => "must be an integer from 1 to 1000"
    }),
    { exact: true }
  ).annotations({ description: "page size 1-1000, default 100" }),
  cursor: Schema.optionalWith(Schema.String.pipe(Schema.minLength(1), Schema.maxLength(2000)), { exact: true })
}))
export type MemoryListQuery = typeof MemoryListQuery.Type

const KeyPath = allErrors(Schema.Struct({ key: Schema.String.annotations({ description: "the key, percent-encoded" }) }))
const FunctionKeyPath = allErrors(Schema.Struct({ id: FunctionRef, key: Schema.String }))

export class MemoriesApi extends HttpApiGroup.make("memories")
  .add(
    HttpApiEndpoint.get("list", "/memories")
      .setUrlParams(MemoryListQuery)
      .addSuccess(OkList(MemoryKeyInfo, "MemoryKey"))
      .annotate(OpenApi.Summary, "Organization memory keys in byte order")
  )
  .add(
    HttpApiEndpoint.get("get", "/memories/:key")
      .setPath(KeyPath)
      .addSuccess(Ok(Memory, "Memory"))
      .addError(Wire.NotFound)
      .annotate(OpenApi.Summary, "An organization memory item")
  )
  .add(
    HttpApiEndpoint.put("put", "/memories/:key")
      .setPath(KeyPath)
      .setPayload(PutMemory)
      .addSuccess(Ok(Memory, "Memory"))
      .addSuccess(Ok(Memory, "MemoryCreated"), { status: 201 })
      .addError(Wire.Conflict)
      .annotate(OpenApi.Summary, "Store an organization memory item (201 created, 200 replaced)")
  )
  .add(
    HttpApiEndpoint.del("remove", "/memories/:key")
      .setPath(KeyPath)
      .addSuccess(Ok(Memory, "Memory"))
      .addError(Wire.NotFound)
      .annotate(OpenApi.Summary, "Delete an organization memory item")
  )
  .add(
    HttpApiEndpoint.get("listFunction", "/functions/:id/memories")
      .setPath(FunctionPath)
      .setUrlParams(MemoryListQuery)
      .addSuccess(OkList(MemoryKeyInfo, "MemoryKey"))
      .addError(Wire.NotFound)
      .addError(Wire.Forbidden)
      .annotate(OpenApi.Summary, "A function's memory keys in byte order")
  )
  .add(
    HttpApiEndpoint.get("getFunction", "/functions/:id/memories/:key")
      .setPath(FunctionKeyPath)
      .addSuccess(Ok(Memory, "Memory"))
      .addError(Wire.NotFound)
      .addError(Wire.Forbidden)
      .annotate(OpenApi.Summary, "A function memory item")
  )
  .add(
    HttpApiEndpoint.put("putFunction", "/functions/:id/memories/:key")
      .setPath(FunctionKeyPath)
      .setPayload(PutMemory)
      .addSuccess(Ok(Memory, "Memory"))
      .addSuccess(Ok(Memory, "MemoryCreated"), { status: 201 })
      .addError(Wire.NotFound)
      .addError(Wire.Forbidden)
      .addError(Wire.Conflict)
      .annotate(OpenApi.Summary, "Store a function memory item (201 created, 200 replaced)")
  )
  .add(
    HttpApiEndpoint.del("removeFunction", "/functions/:id/memories/:key")
      .setPath(FunctionKeyPath)
      .addSuccess(Ok(Memory, "Memory"))
      .addError(Wire.NotFound)
      .addError(Wire.Forbidden)
      .annotate(OpenApi.Summary, "Delete a function memory item")
  )
  .middleware(Authentication)
  .annotate(
    OpenApi.Description,
    "Memories: JSON values under string keys (1-512 bytes of UTF-8, no control characters), in the organization's " +
      "scope or one function's. Values at most 64 KiB serialized, at most 10,000 keys per scope, optional TTL; " +
      "a function reads the same items through its MEMORY and ORG_MEMORY bindings (Workers KV API)."
  )
{}
