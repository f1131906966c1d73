/** Handlers of drafts. Deciding needs an admin-scoped credential (src/policy/Policy.ts). */
import { Effect, Layer } from "effect"
import { MailroomApi } from "../Api.js"
import { CurrentPrincipal } from "../contract/Security.js"
import * as ApiGroup from "../platform/ApiGroup.js"
import { Approvals } from "./Approvals.js"
import { DraftsRepo } from "./Repo.js"

export const DraftsHttpLive = ApiGroup.group(MailroomApi, "drafts", (handlers) =>
  Effect.gen(function*() {
    const approvals = yield* Approvals
    const org = Effect.map(CurrentPrincipal, (p) => p.orgId)
    return handlers
      .handle("list", ({ urlParams }) => Effect.flatMap(org, (o) => approvals.list(o, urlParams.status)))
      .handle("get", ({ path }) => Effect.flatMap(org, (o) => approvals.get(o, path.id)))
      .handle("approve", ({ path }) => Effect.flatMap(org, (o) => approvals.approve(o, path.id)))
      .handle("reject", ({ path }) => Effect.flatMap(org, (o) => approvals.reject(o, path.id)))
  })).pipe(Layer.provide(Approvals.Default), Layer.provide(DraftsRepo.Default))
