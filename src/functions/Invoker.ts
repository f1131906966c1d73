/**
 * One invocation of a stored function, as deliveries and the invoke operation make it: the event
 * signed like a webhook, the function's current code and secrets, the outcome recorded among the
 * function's invocations.
 */
import { Clock, Effect, Option } from "effect"
import { signatureHeaders } from "../webhooks/Signing.js"
import type { ProcessResult } from "./Process.js"
import { type FunctionRow, FunctionsRepo } from "./Repo.js"
import { FunctionRuntime, type SlotsBusy } from "./Runtime.js"

export const CONFIRMATION_HEADER = "mailroom-confirmed"

export interface InvocationOutcome extends ProcessResult {
  /** `ok`, `http_<status>`, `function_error`, `function_timeout` or `function_crashed`. */
  readonly status: string
  readonly confirmed: boolean
  readonly invocationId: string | null
}

export interface InvokeOptions {
  readonly payload: string
  readonly eventId: string | null
  readonly event: string | null
  readonly deliveryId: string | null
  /** The account's signing secrets, current first (two during a rotation's grace period). */
  readonly signingSecrets: ReadonlyArray<string>
  readonly attempt: number
  /** See RunInput.onStart. */
  readonly onStart?: Effect.Effect<boolean>
  /** See RunInput.maxWaitMs. */
  readonly maxWaitMs?: number | undefined
}

export type DeliverResult =
  | { readonly _tag: "missing" }
  | { readonly _tag: "cancelled" }
  | { readonly _tag: "ran"; readonly outcome: InvocationOutcome }

export const statusOf = (r: ProcessResult) => (r.outcome === "http" || r.outcome === "ok" ? (r.outcome === "ok" ? "ok" : `http_${r.statusCode}`) : r.outcome)

export class FunctionInvoker extends Effect.Service<FunctionInvoker>()("mailroom/FunctionInvoker", {
  effect: Effect.gen(function*() {
    const repo = yield* FunctionsRepo
    const runtime = yield* FunctionRuntime

    /** None when `onStart` cancelled it. */
    const invoke = (fn: FunctionRow, o: InvokeOptions): Effect.Effect<Option.Option<InvocationOutcome>, SlotsBusy> =>
      Effect.gen(function*() {
        const secrets = yield* repo.openSecrets(fn)
        const startedAt = new Date(yield* Clock.currentTimeMillis)
        const t = Math.floor(startedAt.getTime() / 1000)
        const headers: Record<string, string> = {
          ...signatureHeaders(o.signingSecrets, o.payload, t),
          "content-type": "application/json",
          "user-agent": "Mailroom-Functions/1.0",
          "mailroom-attempt": String(o.attempt)
        }
        if (o.eventId !== null) headers["mailroom-event-id"] = o.eventId
        if (o.event !== null) headers["mailroom-event-type"] = o.event
        if (o.deliveryId !== null) headers["mailroom-delivery-id"] = o.deliveryId
        const ran = yield* runtime.run({
          orgId: fn.org_id,
          functionId: fn.id,
          code: fn.code,
          secrets,
          webhookSecret: o.signingSecrets[0] ?? "",
          body: o.payload,
          headers,
          ...(o.onStart !== undefined ? { onStart: o.onStart } : {}),
          ...(o.maxWaitMs !== undefined ? { maxWaitMs: o.maxWaitMs } : {})
        })
        if (Option.isNone(ran)) return Option.none()
        const result = ran.value
        const status = statusOf(result)
        const confirmation = result.responseHeaders[CONFIRMATION_HEADER]
        const recorded = yield* repo.recordInvocation({
          org_id: fn.org_id,
          function_id: fn.id,
          function_version: fn.version,
          delivery_id: o.deliveryId,
          event_id: o.eventId,
          event: o.event,
          status,
          status_code: result.statusCode,
          duration_ms: result.durationMs,
          logs: result.logs,
          error: result.error,
          started_at: startedAt
        })
        return Option.some({
          ...result,
          status,
          confirmed: result.outcome === "ok" && confirmation !== undefined && confirmation.trim() !== "",
          invocationId: Option.match(recorded, { onNone: () => null, onSome: (r) => r.id })
        })
      })

    /**
     * A delivery's attempt: the function as deployed now (a redeploy applies to the next attempt).
     * `missing` when the function no longer exists, `cancelled` when `onStart` said so.
     */
    const deliver = (orgId: string, functionId: string, o: InvokeOptions): Effect.Effect<DeliverResult> =>
      Effect.flatMap(repo.find(orgId, functionId), Option.match({
        onNone: (): Effect.Effect<DeliverResult> => Effect.succeed({ _tag: "missing" }),
        onSome: (fn): Effect.Effect<DeliverResult> =>
          // A delivery sets no bound on its wait, so it is never refused a slot.
          Effect.map(Effect.orDie(invoke(fn, { ...o, maxWaitMs: undefined })), Option.match({
            onNone: (): DeliverResult => ({ _tag: "cancelled" }),
            onSome: (outcome): DeliverResult => ({ _tag: "ran", outcome })
          }))
      }))

    return { invoke, deliver } as const
  }),
  dependencies: [FunctionsRepo.Default, FunctionRuntime.Default]
}) {}
