/** Handlers of API keys. Only an admin-scoped credential reaches them (src/policy/Policy.ts). */
import { Effect, Layer, Option } from "effect"
import { MailroomApi } from "../Api.js"
import { Forbidden, NotFound, ValidationError } from "../contract/Errors.js"
import { CurrentPrincipal, hasScope, type Principal, type Scope } from "../contract/Security.js"
import * as ApiGroup from "../platform/ApiGroup.js"
import { Credentials } from "../platform/Credentials.js"
import { noStore } from "../platform/HttpHeaders.js"
import { displayPrefix, newApiKey, sha256Hex } from "../platform/Secrets.js"
import type { ApiKey } from "./Api.js"
import { ApiKeysRepo, type KeyRow } from "./Repo.js"

const toApiKey = (r: KeyRow): ApiKey => ({
  id: r.id,
  name: r.name,
  scopes: r.scopes.split(" ").filter((s) => s !== "") as Array<Scope>,
  inbox_ids: r.inbox_ids === null ? null : r.inbox_ids.split(" ").filter((s) => s !== ""),
  created_at: r.created_at,
  last_used_at: r.last_used_at
})

export const ApiKeysHttpLive = ApiGroup.group(MailroomApi, "apiKeys", (handlers) =>
  Effect.gen(function*() {
    const repo = yield* ApiKeysRepo
    const credentials = yield* Credentials

    /**
     * The inboxes a new key is limited to: each one of the organization's (400 otherwise), and
     * never wider than its maker's own limit (a limited maker's key inherits the limit when it
     * names none). An empty list is no limit, as before inboxes had ids.
     */
    const keyInboxes = (principal: Principal, requested: ReadonlyArray<string> | undefined) =>
      Effect.gen(function*() {
        const makers = principal.inboxIds ?? null
        if (requested === undefined || requested.length === 0) return makers
        const ids = [...new Set(requested.map((id) => id.toLowerCase()))]
        const known = yield* repo.existingInboxes(principal.orgId, ids)
        const unknown = ids.filter((id) => !known.includes(id))
        if (unknown.length > 0) {
          const reason = `no inbox of this organization has the id ${unknown.join(", ")}`
          return yield* new ValidationError({ message: `inbox_ids: ${reason}`, details: { issues: [{ field: "inbox_ids", reason }] } })
        }
        const outside = makers === null ? [] : ids.filter((id) => !makers.includes(id))
        if (outside.length > 0) {
          return yield* new Forbidden({
            message: `a key cannot be given inboxes its maker is not limited to: ${outside.join(", ")}`,
            details: { inbox_ids: makers ?? [], outside }
          })
        }
        return ids
      })

    return handlers
      .handle("create", ({ payload }) =>
        Effect.gen(function*() {
          const principal = yield* CurrentPrincipal
          // A key never widens its maker's reach (kept here too, should the table open key management).
          const wider = payload.scopes.filter((s) => !hasScope(principal, s))
          if (wider.length > 0) {
            return yield* new Forbidden({
              message: `a key cannot be given scopes its maker lacks: ${wider.join(", ")}`,
              details: { missing_scope: wider[0]!, scopes: principal.scopes ?? ["admin"] }
            })
          }
          const inboxIds = yield* keyInboxes(principal, payload.inbox_ids)
          const scopes = [...new Set(payload.scopes)]
          const secret = newApiKey()
          const row = yield* repo.insert({
            orgId: principal.orgId,
            createdBy: principal.userId,
            name: payload.name,
            keyHash: sha256Hex(secret),
            keyPrefix: displayPrefix(secret),
            scopes,
            inboxIds
          })
          // A credential: never cached, never replayed under a derived idempotency key.
          yield* noStore
          return { ...toApiKey(row), api_key: secret }
        }))
      .handle("list", () =>
        Effect.gen(function*() {
          const principal = yield* CurrentPrincipal
          const rows = yield* repo.listActive(principal.orgId)
          return rows.map(toApiKey)
        }))
      .handle("revoke", ({ path }) =>
        Effect.gen(function*() {
          const principal = yield* CurrentPrincipal
          const row = yield* repo.revoke(principal.orgId, path.id)
          if (Option.isNone(row)) return yield* new NotFound({ message: `no API key ${path.id}` })
          yield* credentials.forgetApiKey(path.id)
          return toApiKey(row.value)
        }))
  })).pipe(Layer.provide(ApiKeysRepo.Default))
