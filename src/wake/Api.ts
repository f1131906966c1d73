/** Contract of wakes: scheduled, typed commands for the organization's own functions, fired as signed email. */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { allErrors, DateTimeString, IdempotencyHeaders, IdPath, Ok, OkList, strict, Uuid } from "../contract/Envelope.js"
import { Wire } from "../contract/Errors.js"
import { ListQuery } from "../contract/Paging.js"
import { Authentication } from "../contract/Security.js"
import { FunctionPath } from "../contract/Functions.js"

export const PAYLOAD_MAX_BYTES = 16 * 1024
export const MAX_ALLOWED_SENDERS = 100

export const CommandType = Schema.String.pipe(
  Schema.pattern(/^[a-z0-9_.-]{1,64}$/, { message: () => "must be 1-64 characters of a-z, 0-9, _, . and -" })
)

export const WakeCommand = Schema.Struct({
  type: CommandType,
  payload: Schema.optionalWith(Schema.Unknown, { exact: true }).annotations({ description: "any JSON, at most 16 KiB" })
}).annotations({ identifier: "WakeCommand" })

export const WakeScheduleObject = Schema.Struct({
  at: Schema.optionalWith(Schema.String, { exact: true }),
  in: Schema.optionalWith(Schema.String, { exact: true }),
  every: Schema.optionalWith(Schema.String, { exact: true }),
  cron: Schema.optionalWith(Schema.String, { exact: true })
}).annotations({ identifier: "WakeSchedule", description: "the one schedule key the wake was created with" })

export const WakeStatus = Schema.Literal("scheduled", "completed", "canceled")

export const Wake = Schema.Struct({
  id: Schema.UUID,
  function_id: Schema.UUID,
  command: Schema.Struct({ type: Schema.String, payload: Schema.Unknown }),
  schedule: WakeScheduleObject,
  status: WakeStatus,
  next_run_at: Schema.NullOr(DateTimeString),
  last_run_at: Schema.NullOr(DateTimeString),
  run_count: Schema.Int,
  thread_id: Schema.NullOr(Schema.UUID).annotations({
    description: "a thread watch's thread (POST /threads/{id}/watch); null for other wakes"
  }),
  created_at: DateTimeString
}).annotations({ identifier: "Wake" })
export type Wake = typeof Wake.Type

export const CreateWake = strict(Schema.Struct({
  function_id: Uuid,
  command: strict(WakeCommand),
  at: Schema.optionalWith(DateTimeString, { exact: true }).annotations({ description: "fire once at this time (≤ 366 days ahead)" }),
  in: Schema.optionalWith(Schema.String, { exact: true }).annotations({ description: "fire once after this delay, e.g. 15m, 2h, 1d" }),
  every: Schema.optionalWith(Schema.String, { exact: true }).annotations({ description: "fire every interval (at least 1m), first one interval from now" }),
  cron: Schema.optionalWith(Schema.String, { exact: true }).annotations({ description: "5-field cron expression, UTC, e.g. `0 8 * * *`" })
})).annotations({ identifier: "CreateWake", description: "exactly one of at, in, every, cron" })
export type CreateWake = typeof CreateWake.Type

export const ThreadWatch = Schema.Struct({
  id: Schema.UUID.annotations({ description: "the watch's wake: GET /wakes/{id} shows it, DELETE /wakes/{id} cancels it" }),
  thread_id: Schema.UUID,
  function_id: Schema.UUID,
  command: Schema.Struct({ type: Schema.String, payload: Schema.Unknown }),
  within: Schema.String.annotations({ description: "as given, e.g. 48h" }),
  due_at: DateTimeString.annotations({ description: "when it fires unless received mail joins the thread first" }),
  status: Schema.Literal("active", "fired", "canceled"),
  canceled_reason: Schema.NullOr(Schema.Literal("replied", "thread_deleted", "canceled")).annotations({
    description: "replied: received mail joined the thread in time; thread_deleted: its last message was deleted; " +
      "canceled: DELETE /wakes/{id}. Deleting the function deletes its watches."
  }),
  created_at: DateTimeString
}).annotations({ identifier: "ThreadWatch" })
export type ThreadWatch = typeof ThreadWatch.Type

export const CreateThreadWatch = strict(Schema.Struct({
  within: Schema.String.annotations({ description: "how long to wait for received mail to join the thread: 30m, 48h, 7d (at most 366 days)" }),
  wake: strict(Schema.Struct({
    function_id: Uuid,
    command: strict(WakeCommand)
  })).annotations({ description: "the wake to fire on silence: one of your functions and the command it gets" })
})).annotations({ identifier: "CreateThreadWatch" })
export type CreateThreadWatch = typeof CreateThreadWatch.Type

export const WakeListQuery = allErrors(Schema.Struct({
  ...ListQuery.fields,
  function_id: Schema.optionalWith(Uuid, { exact: true }),
  status: Schema.optionalWith(WakeStatus, { exact: true })
}))

/** An address (`ops@acme.com`) or every address of a domain (`@acme.com`). */
export const AllowedSender = Schema.String.pipe(
  Schema.pattern(/^([^\s@<>(),;:"\\[\]]+)?@[a-zA-Z0-9.-]+\.[a-zA-Z0-9-]+$/, {
    message: () => "must be an address (ops@acme.com) or a domain (@acme.com)"
  }),
  Schema.maxLength(254)
)

export const WakeAllowlist = Schema.Struct({
  function_id: Schema.UUID,
  wake_address: Schema.String.annotations({ description: "fn-<function id>@<managed inbox domain>" }),
  senders: Schema.Array(Schema.String).annotations({ description: "lowercased, sorted" }),
  updated_at: Schema.NullOr(DateTimeString)
}).annotations({ identifier: "WakeAllowlist" })
export type WakeAllowlist = typeof WakeAllowlist.Type

export const PutWakeAllowlist = strict(Schema.Struct({
  senders: Schema.Array(AllowedSender).pipe(Schema.maxItems(MAX_ALLOWED_SENDERS))
})).annotations({ identifier: "PutWakeAllowlist" })

export class WakesApi extends HttpApiGroup.make("wakes")
  .add(
    HttpApiEndpoint.post("create", "/wakes")
      .setPayload(CreateWake)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Ok(Wake, "Wake"), { status: 201 })
      .addError(Wire.NotFound)
      .addError(Wire.Forbidden)
      .addError(Wire.Conflict)
      .annotate(OpenApi.Summary, "Schedule a typed command for one of your functions (exactly one of at, in, every, cron)")
  )
  .add(
    HttpApiEndpoint.get("list", "/wakes")
      .setUrlParams(WakeListQuery)
      .addSuccess(OkList(Wake, "Wake"))
      .addError(Wire.Forbidden)
      .annotate(OpenApi.Summary, "Wakes, newest first")
  )
  .add(
    HttpApiEndpoint.get("get", "/wakes/:id")
      .setPath(IdPath)
      .addSuccess(Ok(Wake, "Wake"))
      .addError(Wire.NotFound)
      .addError(Wire.Forbidden)
      .annotate(OpenApi.Summary, "A wake")
  )
  .add(
    HttpApiEndpoint.del("cancel", "/wakes/:id")
      .setPath(IdPath)
      .addSuccess(Ok(Wake, "Wake"))
      .addError(Wire.NotFound)
      .addError(Wire.Forbidden)
      .addError(Wire.Conflict)
      .annotate(OpenApi.Summary, "Cancel a wake (it never fires again)")
  )
  .add(
    HttpApiEndpoint.post("run", "/wakes/:id/run")
      .setPath(IdPath)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Ok(Wake, "Wake"))
      .addError(Wire.NotFound)
      .addError(Wire.Forbidden)
      .addError(Wire.Conflict)
      .annotate(OpenApi.Summary, "Fire a wake now (its schedule is unchanged)")
  )
  .add(
    HttpApiEndpoint.post("watchThread", "/threads/:id/watch")
      .setPath(IdPath)
      .setPayload(CreateThreadWatch)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Ok(ThreadWatch, "ThreadWatch"), { status: 201 })
      .addError(Wire.NotFound)
      .addError(Wire.Forbidden)
      .addError(Wire.Conflict)
      .annotate(OpenApi.Summary, "Wake a function if no received mail joins the thread within a time (cancels itself when one does)")
  )
  .add(
    HttpApiEndpoint.get("getAllowlist", "/functions/:id/wake-allowlist")
      .setPath(FunctionPath)
      .addSuccess(Ok(WakeAllowlist, "WakeAllowlist"))
      .addError(Wire.NotFound)
      .addError(Wire.Forbidden)
      .annotate(OpenApi.Summary, "Who may mail commands to the function's wake address")
  )
  .add(
    HttpApiEndpoint.put("putAllowlist", "/functions/:id/wake-allowlist")
      .setPath(FunctionPath)
      .setPayload(PutWakeAllowlist)
      .addSuccess(Ok(WakeAllowlist, "WakeAllowlist"))
      .addError(Wire.NotFound)
      .addError(Wire.Forbidden)
      .addError(Wire.Conflict)
      .annotate(OpenApi.Summary, "Replace the senders allowed to mail commands to the function's wake address")
  )
  .middleware(Authentication)
  .annotate(
    OpenApi.Description,
    "A wake fires as a real email from wake@<managed domain> to the function's wake address " +
      "fn-<function id>@<managed domain>: the command as an application/json part, signed with the account's " +
      "webhook secret in Mailroom-Wake-Signature (t=…,v1=… over `t.<json>`), stored like received mail and " +
      "delivered to the function as event `wake.command` with `wake: {id, type, payload, scheduled_for, fired_at, " +
      "thread_id, sender, verified}`. A thread watch (POST /threads/{id}/watch) is a wake that fires only if no " +
      "received mail joins the thread in time. Senders on the function's wake allowlist may mail commands too (verified only when " +
      "signed); anyone else is refused at RCPT. Needs the `functions` entitlement."
  )
{}
