/** Handlers of the Registries area. */
import { Effect, Layer, Option } from "effect"
import { MailroomApi } from "../Api.js"
import { Conflict, Forbidden, NotFound } from "../contract/Errors.js"
import { decodeCursor, DEFAULT_PAGE_SIZE, pageOf } from "../contract/Paging.js"
import { CurrentPrincipal } from "../contract/Security.js"
import * as ApiGroup from "../platform/ApiGroup.js"
import { Policy } from "../policy/Policy.js"
import { type EntryPatch, type EntryRow, RegistriesRepo, type RegistryRow, toEntry, toRegistry } from "./Repo.js"

const noRegistry = (name: string) => new NotFound({ message: `no registry ${name}` })
const noEntry = (name: string, handle: string) => new NotFound({ message: `no entry ${handle} in registry ${name}` })

const ownerOnly = (registry: RegistryRow, what: string) =>
  new Forbidden({
    message: `only the owner of registry ${registry.name} can ${what}`,
    details: { registry: registry.name, reason: "not_owner" }
  })

export const RegistriesHttpLive = ApiGroup.group(MailroomApi, "registries", (handlers) =>
  Effect.gen(function*() {
    const repo = yield* RegistriesRepo
    const policy = yield* Policy
    const caller = Effect.map(CurrentPrincipal, (p) => p.orgId)

    const sendable = repo.sendable

    const registryNamed = (name: string) =>
      Effect.flatMap(repo.find(name), Option.match({ onNone: () => Effect.fail(noRegistry(name)), onSome: Effect.succeed }))

    /** The registry, which the caller must own. */
    const owned = (name: string, org: string, what: string) =>
      Effect.flatMap(registryNamed(name), (r) => (r.org_id === org ? Effect.succeed(r) : Effect.fail(ownerOnly(r, what))))

    /** An entry the caller may see: published, or pending and theirs or in their registry (otherwise 404, not 403). */
    const visibleEntry = (registry: RegistryRow, handle: string, org: string) =>
      Effect.flatMap(repo.findEntry(registry.id, handle), (found) =>
        Option.isSome(found) && (found.value.status === "published" || found.value.org_id === org || registry.org_id === org)
          ? Effect.succeed(found.value)
          : Effect.fail(noEntry(registry.name, handle)))

    const publisherOrOwner = (registry: RegistryRow, entry: EntryRow, org: string, what: string) =>
      entry.org_id === org || registry.org_id === org ? Effect.void : Effect.fail(
        new Forbidden({
          message: `only the publisher of ${entry.handle} or the owner of registry ${registry.name} can ${what}`,
          details: { registry: registry.name, handle: entry.handle, reason: "not_publisher_or_owner" }
        })
      )

    const notPending = (registry: RegistryRow, handle: string, status: string, verb: string) =>
      new Conflict({
        message: `entry ${handle} of registry ${registry.name} is ${status}: only a pending entry can be ${verb}`,
        details: { registry: registry.name, handle, status }
      })

    /** Approve or reject: the owner decides a pending entry once; a decided one is 409. */
    const decide = (
      name: string,
      handle: string,
      verb: "approved" | "rejected",
      apply: (id: string) => Effect.Effect<Option.Option<EntryRow>>
    ) =>
      Effect.gen(function*() {
        const org = yield* caller
        const registry = yield* owned(name, org, verb === "approved" ? "approve entries" : "reject entries")
        const entry = yield* visibleEntry(registry, handle, org)
        if (entry.status !== "pending") return yield* notPending(registry, handle, entry.status, verb)
        const row = yield* apply(entry.id)
        if (Option.isSome(row)) return { org, row: row.value }
        // A concurrent call decided it first: answer as if this one had come second.
        const now = yield* repo.findEntry(registry.id, handle)
        return yield* Option.isSome(now) ? notPending(registry, handle, now.value.status, verb) : noEntry(name, handle)
      })

    return handlers
      .handle("create", ({ payload }) =>
        Effect.gen(function*() {
          const org = yield* caller
          yield* policy.require(org, "registries.use")
          const row = yield* repo.insert(org, {
            name: payload.name,
            description: payload.description ?? null,
            policy: payload.publish_policy ?? "owner_only"
          })
          return toRegistry(row, org)
        }))
      .handle("list", ({ urlParams }) =>
        Effect.gen(function*() {
          const org = yield* caller
          const after = yield* decodeCursor(urlParams.cursor)
          const limit = urlParams.limit ?? DEFAULT_PAGE_SIZE
          const { rows, total } = yield* repo.list(org, urlParams.owned, limit, after)
          return pageOf(rows, limit, total, (r) => toRegistry(r, org))
        }))
      .handle("get", ({ path }) =>
        Effect.gen(function*() {
          const org = yield* caller
          return toRegistry(yield* registryNamed(path.name), org)
        }))
      .handle("update", ({ path, payload }) =>
        Effect.gen(function*() {
          const org = yield* caller
          const registry = yield* owned(path.name, org, "change it")
          const row = yield* repo.update(registry.id, payload)
          if (Option.isNone(row)) return yield* noRegistry(path.name)
          return toRegistry(row.value, org)
        }))
      .handle("remove", ({ path }) =>
        Effect.gen(function*() {
          const org = yield* caller
          const registry = yield* owned(path.name, org, "delete it")
          const row = yield* repo.remove(registry.id)
          if (Option.isNone(row)) return yield* noRegistry(path.name)
          return toRegistry(row.value, org)
        }))
      .handle("publish", ({ path, payload }) =>
        Effect.gen(function*() {
          const org = yield* caller
          yield* policy.require(org, "registries.publish")
          const registry = yield* registryNamed(path.name)
          const isOwner = registry.org_id === org
          if (!isOwner && registry.publish_policy === "owner_only") {
            return yield* new Forbidden({
              message: `registry ${registry.name} is owner_only: only its owner publishes entries`,
              details: { registry: registry.name, publish_policy: registry.publish_policy, reason: "owner_only" }
            })
          }
          const address = payload.address.trim().toLowerCase()
          yield* sendable(org, address)
          const row = yield* repo.insertEntry(registry, org, {
            handle: payload.handle,
            address,
            description: payload.description ?? null,
            capabilities: payload.capabilities ?? [],
            metadata: payload.metadata ?? {},
            status: isOwner || registry.publish_policy === "open" ? "published" : "pending"
          })
          return toEntry(row, org)
        }))
      .handle("entries", ({ path, urlParams }) =>
        Effect.gen(function*() {
          const org = yield* caller
          const registry = yield* registryNamed(path.name)
          const after = yield* decodeCursor(urlParams.cursor)
          const limit = urlParams.limit ?? DEFAULT_PAGE_SIZE
          const viewer = registry.org_id === org ? { owner: true } as const : { owner: false, orgId: org } as const
          const { rows, total } = yield* repo.entries(registry.id, viewer, urlParams.status, limit, after)
          return pageOf(rows, limit, total, (r) => toEntry(r, org))
        }))
      .handle("entry", ({ path }) =>
        Effect.gen(function*() {
          const org = yield* caller
          const registry = yield* registryNamed(path.name)
          return toEntry(yield* visibleEntry(registry, path.handle, org), org)
        }))
      .handle("updateEntry", ({ path, payload }) =>
        Effect.gen(function*() {
          const org = yield* caller
          const registry = yield* registryNamed(path.name)
          const entry = yield* visibleEntry(registry, path.handle, org)
          yield* publisherOrOwner(registry, entry, org, "change it")
          const patch: { -readonly [K in keyof EntryPatch]: EntryPatch[K] } = {}
          if (payload.address !== undefined) {
            const address = payload.address.trim().toLowerCase()
            if (address !== entry.address) {
              // The address is the publisher's claim: the owner curates the rest, never where mail goes.
              if (entry.org_id !== org) {
                return yield* new Forbidden({
                  message: `only the publisher of ${entry.handle} can change its address`,
                  details: { registry: registry.name, handle: entry.handle, reason: "not_publisher" }
                })
              }
              yield* sendable(org, address)
              patch.address = address
              // Under `request` the owner approved an address; another one waits for approval again.
              if (registry.publish_policy === "request" && registry.org_id !== org) patch.status = "pending"
            }
          }
          if (payload.description !== undefined) patch.description = payload.description
          if (payload.capabilities !== undefined) patch.capabilities = payload.capabilities
          if (payload.metadata !== undefined) patch.metadata = payload.metadata
          const row = yield* repo.updateEntry(entry.id, patch)
          if (Option.isNone(row)) return yield* noEntry(path.name, path.handle)
          return toEntry(row.value, org)
        }))
      .handle("removeEntry", ({ path }) =>
        Effect.gen(function*() {
          const org = yield* caller
          const registry = yield* registryNamed(path.name)
          const entry = yield* visibleEntry(registry, path.handle, org)
          yield* publisherOrOwner(registry, entry, org, "remove it")
          const row = yield* repo.removeEntry(entry.id)
          if (Option.isNone(row)) return yield* noEntry(path.name, path.handle)
          return toEntry(row.value, org)
        }))
      .handle("approve", ({ path }) =>
        Effect.map(decide(path.name, path.handle, "approved", repo.approve), ({ org, row }) => toEntry(row, org)))
      .handle("reject", ({ path }) =>
        Effect.map(decide(path.name, path.handle, "rejected", repo.reject), ({ org, row }) => toEntry(row, org, "rejected")))
  })).pipe(Layer.provide(RegistriesRepo.Default))
