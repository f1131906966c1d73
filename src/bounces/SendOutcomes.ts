/**
 * The bounce area's side of the send path's port (src/sending/Outcomes.ts): outcome events through
 * Outcomes.ts, suppressions from the suppression list.
 */
import { Effect, Layer } from "effect"
import { SendOutcomes } from "../sending/Outcomes.js"
import { Outcomes } from "./Outcomes.js"
import { SuppressionsRepo } from "./Repo.js"

export const SendOutcomesLive = Layer.effect(
  SendOutcomes,
  Effect.gen(function*() {
    const outcomes = yield* Outcomes
    const suppressions = yield* SuppressionsRepo
    return { sentWithin: outcomes.sentWithin, relayDelayed: outcomes.relayDelayed, suppressedColumn: suppressions.suppressedColumn }
  })
).pipe(Layer.provide(Outcomes.Default), Layer.provide(SuppressionsRepo.Default))
