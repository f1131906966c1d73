/** Handlers of memories, in the organization's scope and in one function's. */
import { HttpApp, HttpServerResponse } from "@effect/platform"
import { Effect, Layer, Option } from "effect"
import { MailroomApi } from "../Api.js"
import { NotFound, ValidationError } from "../contract/Errors.js"
import { CurrentPrincipal } from "../contract/Security.js"
import * as ApiGroup from "../platform/ApiGroup.js"
import type { Memory, MemoryKeyInfo, MemoryListQuery, PutMemory } from "./Api.js"
import { keyProblem, type MemoryRow, type MemoryScope, MemoriesRepo, VALUE_MAX_BYTES } from "./Repo.js"
import { MemoryScopes } from "./Scopes.js"

export const DEFAULT_MEMORY_PAGE = 100

export const toMemory = (r: MemoryRow): Memory => ({
  key: r.key,
  value: JSON.parse(r.value) as unknown,
  scope: r.function_id === null ? "org" : "function",
  function_id: r.function_id,
  size_bytes: r.size_bytes,
  expires_at: r.expires_at,
  created_at: r.created_at,
  updated_at: r.updated_at
})

const toKeyInfo = (r: MemoryRow): MemoryKeyInfo => ({
  key: r.key,
  size_bytes: r.size_bytes,
  expires_at: r.expires_at,
  updated_at: r.updated_at
})

const invalid = (field: string, reason: string) =>
  new ValidationError({ message: `${field}: ${reason}`, details: { issues: [{ field, reason }] } })

/** A list cursor is the last key of the previous page. */
const encodeKeyCursor = (key: string) => Buffer.from(JSON.stringify(["k", key]), "utf8").toString("base64url")
const decodeKeyCursor = (cursor: string | undefined): Effect.Effect<string | undefined, ValidationError> => {
  if (cursor === undefined) return Effect.succeed(undefined)
  try {
    const v = JSON.parse(Buffer.from(cursor, "base64url").toString("utf8")) as unknown
    // The position is a key: one that no key could be (NUL, lone surrogates) is not a cursor of ours.
    if (Array.isArray(v) && v.length === 2 && v[0] === "k" && typeof v[1] === "string" && keyProblem(v[1]) === undefined) {
      return Effect.succeed(v[1])
    }
  } catch { /* reported below */ }
  return Effect.fail(invalid("cursor", "not a cursor returned by this list"))
}

export const checkedKey = (key: string) => {
  const problem = keyProblem(key)
  return problem === undefined ? Effect.succeed(key) : Effect.fail(invalid("key", problem))
}

/** The value as stored: its JSON text, within the size limit. */
export const serializedValue = (value: unknown): Effect.Effect<string, ValidationError> => {
  const text = JSON.stringify(value)
  if (text === undefined) return Effect.fail(invalid("value", "must be a JSON value"))
  if (Buffer.byteLength(text, "utf8") > VALUE_MAX_BYTES) {
    return Effect.fail(invalid("value", `must be at most ${VALUE_MAX_BYTES} bytes serialized`))
  }
  return Effect.succeed(text)
}

const created201 = HttpApp.appendPreResponseHandler((_req, res) =>
  Effect.succeed(res.status === 200 ? HttpServerResponse.setStatus(res, 201) : res)
)

export const MemoriesHttpLive = ApiGroup.group(MailroomApi, "memories", (handlers) =>
  Effect.gen(function*() {
    const repo = yield* MemoriesRepo
    const scopes = yield* MemoryScopes
    const orgScope = Effect.map(CurrentPrincipal, (p): MemoryScope => ({ orgId: p.orgId, functionId: null }))

    /** A function's scope: the organization must hold the entitlement and the function. */
    const functionScope = (ref: string) =>
      Effect.flatMap(CurrentPrincipal, ({ orgId }) => scopes.functionScope(orgId, ref))

    const list = (scope: MemoryScope, q: MemoryListQuery) =>
      Effect.gen(function*() {
        const after = yield* decodeKeyCursor(q.cursor)
        const limit = q.limit ?? DEFAULT_MEMORY_PAGE
        const { rows, total } = yield* repo.list(scope, { prefix: q.prefix ?? "", after, limit })
        const page = rows.slice(0, limit)
        const last = page[page.length - 1]
        return {
          items: page.map(toKeyInfo),
          meta: { total, limit, cursor: rows.length > limit && last !== undefined ? encodeKeyCursor(last.key) : null }
        }
      })

    const get = (scope: MemoryScope, key: string) =>
      Effect.gen(function*() {
        const k = yield* checkedKey(key)
        const row = yield* repo.get(scope, k)
        if (Option.isNone(row)) return yield* new NotFound({ message: `no memory ${JSON.stringify(k)}` })
        return toMemory(row.value)
      })

    const put = (scope: MemoryScope, key: string, payload: PutMemory) =>
      Effect.gen(function*() {
        const k = yield* checkedKey(key)
        const text = yield* serializedValue(payload.value)
        const { row, created } = yield* repo.put(scope, k, text, payload.ttl_seconds)
        if (created) yield* created201
        return toMemory(row)
      })

    const remove = (scope: MemoryScope, key: string) =>
      Effect.gen(function*() {
        const k = yield* checkedKey(key)
        const row = yield* repo.remove(scope, k)
        if (Option.isNone(row)) return yield* new NotFound({ message: `no memory ${JSON.stringify(k)}` })
        return toMemory(row.value)
      })

    return handlers
      .handle("list", ({ urlParams }) => Effect.flatMap(orgScope, (s) => list(s, urlParams)))
      .handle("get", ({ path }) => Effect.flatMap(orgScope, (s) => get(s, path.key)))
      .handle("put", ({ path, payload }) => Effect.flatMap(orgScope, (s) => put(s, path.key, payload)))
      .handle("remove", ({ path }) => Effect.flatMap(orgScope, (s) => remove(s, path.key)))
      .handle("listFunction", ({ path, urlParams }) => Effect.flatMap(functionScope(path.id), (s) => list(s, urlParams)))
      .handle("getFunction", ({ path }) => Effect.flatMap(functionScope(path.id), (s) => get(s, path.key)))
      .handle("putFunction", ({ path, payload }) => Effect.flatMap(functionScope(path.id), (s) => put(s, path.key, payload)))
      .handle("removeFunction", ({ path }) => Effect.flatMap(functionScope(path.id), (s) => remove(s, path.key)))
  })).pipe(Layer.provide(MemoryScopes.Default), Layer.provide(MemoriesRepo.Default))
