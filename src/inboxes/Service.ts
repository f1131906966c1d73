/**
 * Inboxes for the HTTP handlers and the MCP tools: creation under the plan's `inboxes_max`, renames
 * and deletion that never strand a route, and a 409 for an address any organization already has.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Option } from "effect"
import { Conflict, Forbidden, NotFound } from "../contract/Errors.js"
import { LIMITS, type Plan, upgradeHint } from "../contract/Plans.js"
import { decodeCursor, DEFAULT_PAGE_SIZE, pageOf } from "../contract/Paging.js"
import { AppConfig } from "../platform/Config.js"
import { type OrgScope, orgOf } from "../platform/InboxLimit.js"
import { randomToken } from "../platform/Secrets.js"
import { sqlState } from "../platform/SqlErrors.js"
import type { CreateInbox, UpdateInbox } from "./Api.js"
import { type InboxRow, InboxesRepo, type InboxUsers, toInbox } from "./Repo.js"

const ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"

/** The next plan with more inboxes, for `details.required_plan`. */
const nextPlan = (plan: Plan): Plan | undefined =>
  (["agent", "developer", "pro"] as const).find((p) => LIMITS[p].inboxes_max > LIMITS[plan].inboxes_max)

const inUse = (what: string, users: InboxUsers) =>
  new Conflict({
    message: `${what}: routes use this inbox (${users.routes.join(", ")}); change or delete them first`,
    details: { routes: users.routes, functions: users.functions }
  })

export class InboxesService extends Effect.Service<InboxesService>()("mailroom/InboxesService", {
  effect: Effect.gen(function*() {
    const repo = yield* InboxesRepo
    const sql = yield* SqlClient.SqlClient
    const domain = (yield* AppConfig).managedInboxDomain.toLowerCase()

    const randomUsername = () => {
      let local = "inbox-"
      for (const ch of randomToken(10).toLowerCase()) local += ALPHABET.includes(ch) ? ch : "x"
      return local
    }

    const taken = (address: string) => new Conflict({ message: `${address} is taken`, details: { address } })
    const notFound = (id: string) => new NotFound({ message: `no inbox ${id}` })

    const found = (scope: OrgScope, id: string) =>
      Effect.flatMap(Effect.orDie(repo.find(scope, id)), Option.match({
        onNone: () => Effect.fail(notFound(id)),
        onSome: (r) => Effect.succeed(r)
      }))

    const list = (scope: OrgScope, q: { readonly limit?: number | undefined; readonly cursor?: string | undefined }) =>
      Effect.gen(function*() {
        const after = yield* decodeCursor(q.cursor)
        const limit = q.limit ?? DEFAULT_PAGE_SIZE
        const { rows, total } = yield* Effect.orDie(repo.list(scope, limit, after))
        return pageOf(rows, limit, total, toInbox)
      })

    const create = (orgId: string, input: CreateInbox) =>
      Effect.gen(function*() {
        const { n, plan } = yield* repo.lockCount(orgId)
        const max = LIMITS[plan].inboxes_max
        if (n >= max) {
          const required = nextPlan(plan)
          return yield* new Forbidden({
            message: `the ${plan} plan allows ${max} inbox${max === 1 ? "" : "es"}, the default one included`,
            details: {
              feature: "inboxes_max",
              limit: max,
              current_plan: plan,
              ...(required === undefined ? {} : { required_plan: required, hint: upgradeHint(plan, required) })
            }
          })
        }
        const displayName = input.display_name ?? null
        if (input.username !== undefined) {
          const address = `${input.username.toLowerCase()}@${domain}`
          return yield* Effect.flatMap(repo.insert(orgId, address, displayName), Option.match({
            onNone: () => Effect.fail(taken(address)),
            onSome: Effect.succeed
          }))
        }
        for (let attempt = 0; attempt < 8; attempt++) {
          const row = yield* repo.insert(orgId, `${randomUsername()}@${domain}`, displayName)
          if (Option.isSome(row)) return row.value
        }
        return yield* Effect.dieMessage("no free inbox address after 8 attempts")
      }).pipe(sql.withTransaction, Effect.catchTag("SqlError", Effect.die), Effect.map(toInbox))

    const update = (scope: OrgScope, id: string, input: UpdateInbox) =>
      Effect.gen(function*() {
        const orgId = orgOf(scope)
        const current: InboxRow = yield* found(scope, id)
        let address = current.address
        if (input.username !== undefined && `${input.username.toLowerCase()}@${domain}` !== current.address) {
          address = `${input.username.toLowerCase()}@${domain}`
          if (current.is_default) {
            return yield* new Conflict({
              message: "the default inbox's address is the account's managed_inbox_address and cannot be renamed; " +
                "create another inbox instead",
              details: { inbox_id: id }
            })
          }
          const users = yield* Effect.orDie(repo.users(orgId, id))
          if (users.routes.length > 0) return yield* inUse("cannot change the address", users)
        }
        const displayName = input.display_name === undefined ? current.display_name : input.display_name
        return yield* repo.update(orgId, id, { address, displayName }).pipe(
          Effect.catchIf((e) => sqlState(e) === "23505", () => Effect.fail(taken(address))),
          Effect.catchTag("SqlError", Effect.die),
          Effect.flatMap(Option.match({ onNone: () => Effect.fail(notFound(id)), onSome: Effect.succeed }))
        )
      }).pipe(Effect.map(toInbox))

    const remove = (scope: OrgScope, id: string) =>
      Effect.gen(function*() {
        const orgId = orgOf(scope)
        const current = yield* found(scope, id)
        if (current.is_default) {
          return yield* new Conflict({
            message: "the default inbox cannot be deleted: it is the account's managed_inbox_address",
            details: { inbox_id: id }
          })
        }
        const users = yield* Effect.orDie(repo.users(orgId, id))
        if (users.routes.length > 0) return yield* inUse("cannot delete the inbox", users)
        // A route laid on the inbox since the check holds it by foreign key (SQLSTATE 23503).
        const removed = yield* repo.remove(orgId, id).pipe(
          Effect.catchIf((e) => sqlState(e) === "23503", () =>
            Effect.flatMap(Effect.orDie(repo.users(orgId, id)), (u) => Effect.fail(inUse("cannot delete the inbox", u)))),
          Effect.catchTag("SqlError", Effect.die)
        )
        return yield* Option.match(removed, {
          onNone: () => Effect.fail(notFound(id)),
          onSome: (r) => Effect.succeed(toInbox(r))
        })
      })

    const get = (scope: OrgScope, id: string) => Effect.map(found(scope, id), toInbox)

    return { list, get, create, update, remove } as const
  }),
  dependencies: [InboxesRepo.Default]
}) {}
