/** Handlers of the Webhook deliveries area. */
import { Clock, Effect, Layer, Option } from "effect"
import { WebhookSecrets } from "../account/WebhookSecret.js"
import { MailroomApi } from "../Api.js"
import { NotFound } from "../contract/Errors.js"
import { decodeCursor, DEFAULT_PAGE_SIZE, pageOf } from "../contract/Paging.js"
import { CurrentPrincipal } from "../contract/Security.js"
import * as ApiGroup from "../platform/ApiGroup.js"
import { diagnose, eventIdOf } from "../webhooks/Diagnosis.js"
import type { WebhookDelivery } from "./Api.js"
import { DeliveryReplay } from "./Replay.js"
import { DeliveriesRepo, type ListedRow } from "./Repo.js"

const toDelivery = (r: ListedRow): WebhookDelivery => ({
  id: r.id,
  email_id: r.email_id,
  endpoint_id: r.endpoint_id,
  endpoint_url: r.endpoint_kind === "function" ? `function://${r.function_id}` : (r.endpoint_url ?? ""),
  status: r.status,
  attempt_count: r.attempt_count,
  duration_ms: r.duration_ms,
  last_error: r.last_error ?? "",
  last_error_code: r.last_error_code ?? "",
  created_at: r.created_at,
  updated_at: r.updated_at,
  email: { sender: r.email_sender, recipient: r.email_recipient, subject: r.email_subject },
  event_id: r.event_id,
  event_type: r.event_type,
  next_attempt_at: r.status === "pending" ? r.next_attempt_at : null,
  replay_of: r.replay_of
})

export const DeliveriesHttpLive = ApiGroup.group(MailroomApi, "deliveries", (handlers) =>
  Effect.gen(function*() {
    const repo = yield* DeliveriesRepo
    const replays = yield* DeliveryReplay
    const secrets = yield* WebhookSecrets
    const notFound = new NotFound({ message: "delivery not found" })

    return handlers
      .handle("list", ({ urlParams: q }) =>
        Effect.gen(function*() {
          const { orgId } = yield* CurrentPrincipal
          const limit = q.limit ?? DEFAULT_PAGE_SIZE
          const after = yield* decodeCursor(q.cursor)
          const { rows, total } = yield* repo.list({
            orgId,
            status: q.status,
            emailId: q.email_id,
            dateFrom: q.date_from,
            dateTo: q.date_to,
            limit,
            after
          })
          return pageOf(rows, limit, total, toDelivery)
        }))
      .handle("get", ({ path }) =>
        Effect.gen(function*() {
          const { orgId } = yield* CurrentPrincipal
          const row = yield* Effect.flatten(repo.find(orgId, path.id)).pipe(Effect.mapError(() => notFound))
          return toDelivery(row)
        }))
      .handle("replay", ({ path }) => Effect.flatMap(CurrentPrincipal, ({ orgId }) => replays.replay(orgId, path.id)))
      .handle("debugSignature", ({ payload }) =>
        Effect.gen(function*() {
          const { orgId } = yield* CurrentPrincipal
          const known = yield* Effect.flatten(secrets.known(orgId)).pipe(
            Effect.mapError(() => new NotFound({ message: "account not found" }))
          )
          const headerEventId = Object.entries(payload.headers)
            .find(([k]) => k.trim().toLowerCase() === "mailroom-event-id")?.[1]?.trim()
          const eventId = eventIdOf(payload.body) ?? (headerEventId !== undefined && headerEventId !== "" ? headerEventId : null)
          const delivered = eventId === null ? Option.none() : yield* repo.firstPayloadOf(orgId, eventId)
          const now = yield* Clock.currentTimeMillis
          return diagnose({
            headers: payload.headers,
            body: payload.body,
            nowSeconds: Math.floor(now / 1000),
            secrets: {
              current: known.current,
              previous: Option.getOrNull(known.previous)
            },
            eventId,
            delivered: Option.getOrNull(delivered)
          })
        }))
  })).pipe(Layer.provide(DeliveryReplay.Default), Layer.provide([DeliveriesRepo.Default, WebhookSecrets.Default]))

