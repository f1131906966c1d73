/** Handlers of Search. */
import { Effect, Layer } from "effect"
import { MailroomApi } from "../Api.js"
import { CurrentPrincipal } from "../contract/Security.js"
import * as ApiGroup from "../platform/ApiGroup.js"
import { inboxesOf } from "../platform/InboxLimit.js"
import { Policy } from "../policy/Policy.js"
import { DEFAULT_SEARCH_LIMIT } from "./Api.js"
import { SearchRepo } from "./Repo.js"
import { Search } from "./Search.js"
import { VectorIndex } from "./Vectors.js"

export const SearchHttpLive = ApiGroup.group(MailroomApi, "search", (handlers) =>
  Effect.gen(function*() {
    const search = yield* Search
    const policy = yield* Policy
    return handlers.handle("search", ({ urlParams: p }) =>
      Effect.gen(function*() {
        const principal = yield* CurrentPrincipal
        const orgId = principal.orgId
        yield* policy.require(orgId, "search.use")
        const mode = p.mode ?? "hybrid"
        const { meta, results } = yield* search.search({
          orgId,
          q: p.q,
          mode,
          limit: p.limit ?? DEFAULT_SEARCH_LIMIT,
          filters: {
            scope: p.scope ?? "all",
            from: p.from,
            to: p.to,
            dateFrom: p.date_from,
            dateTo: p.date_to,
            threadId: p.thread_id,
            inboxId: p.inbox_id,
            inboxIds: inboxesOf(principal)
          }
        })
        return { data: { results }, meta }
      }))
  })).pipe(Layer.provide(Search.Default), Layer.provide([SearchRepo.Default, VectorIndex.Default]))
