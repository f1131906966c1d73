/** The drafts area's side of the send path's approval port (src/sending/Approval.ts): Approvals.ts holds the send. */
import { Effect, Layer } from "effect"
import { SendApproval } from "../sending/Approval.js"
import { Approvals } from "./Approvals.js"
import { DraftsRepo } from "./Repo.js"

export const SendApprovalLive = Layer.effect(
  SendApproval,
  Effect.map(Approvals, (approvals) => ({ hold: approvals.hold }))
).pipe(Layer.provide(Approvals.Default), Layer.provide(DraftsRepo.Default))
