/**
 * The loop guard of automated sends (an automation is a function's MAILROOM binding): at most
 * LOOP_THREAD_PER_HOUR automated sends to one thread per hour, and at most LOOP_IN_A_ROW in a row to
 * one counterpart since the thread's last message from a person. A person's send is never counted
 * against it. `check` runs under the organization's quota lock (the caller's transaction), so
 * concurrent automated sends never pass the budgets; a refusal is a 429 `loop_detected` after a
 * `send.loop_detected` event (`refuse`).
 */
import { Effect, Option } from "effect"
import { LoopDetected } from "../contract/Errors.js"
import type { OrgEvents } from "../events/OrgEvents.js"
import { setHeader } from "../platform/HttpHeaders.js"
import { addressOf } from "../mail/Addresses.js"
import type { SendingRepo } from "./Repo.js"
import { HOUR_S, type SendInput } from "./Validate.js"

/** Who sends when an automation does (a function's MAILROOM binding): its mail is automatic. */
export interface Automation {
  readonly functionId: string
}

/** The loop guard: automated sends to one thread per hour, and in a row to one counterpart without a person's message. */
export const LOOP_THREAD_PER_HOUR = 10
export const LOOP_IN_A_ROW = 5

/** RFC 3834: a reply is `auto-replied`, anything else an automation sends `auto-generated`. */
export const autoSubmittedValue = (kind: SendInput["kind"]) => (kind === "reply" ? "auto-replied" : "auto-generated")

export interface LoopRefusal {
  readonly rule: "thread_hourly" | "counterpart_in_a_row"
  readonly limit: number
  readonly windowSeconds: number | null
  readonly retryAfter: number | null
  readonly counterpart: string | null
}

/** The loop guard over the send path's repository and the organization's event log. */
export const loopGuard = (deps: { readonly repo: SendingRepo; readonly orgEvents: OrgEvents }) => {
  const { orgEvents, repo } = deps

  /**
   * The loop guard's budgets for an automated send to `threadId` (none for a person's send): at most
   * LOOP_THREAD_PER_HOUR automated sends to the thread per hour, and at most LOOP_IN_A_ROW in a row to
   * one counterpart since the thread's last message from a person.
   */
  const check = (orgId: string, threadId: string, recipients: ReadonlyArray<string>, at: Date) =>
    Effect.gen(function*() {
      const hour = yield* repo.automatedInThread(threadId, new Date(at.getTime() - HOUR_S * 1000))
      if (hour.n >= LOOP_THREAD_PER_HOUR) {
        const resetMs = (hour.oldest?.getTime() ?? at.getTime()) + HOUR_S * 1000
        return Option.some<LoopRefusal>({
          rule: "thread_hourly",
          limit: LOOP_THREAD_PER_HOUR,
          windowSeconds: HOUR_S,
          retryAfter: Math.max(1, Math.ceil((resetMs - at.getTime()) / 1000)),
          counterpart: null
        })
      }
      const rows = yield* repo.automatedSinceLastPerson(orgId, threadId)
      const counts = new Map<string, number>()
      for (const r of rows) {
        for (const a of new Set([...r.to_addresses, ...r.cc_addresses, ...r.bcc_addresses].map(addressOf))) {
          counts.set(a, (counts.get(a) ?? 0) + 1)
        }
      }
      const counterpart = [...new Set(recipients)].find((a) => (counts.get(a) ?? 0) >= LOOP_IN_A_ROW)
      if (counterpart === undefined) return Option.none<LoopRefusal>()
      return Option.some<LoopRefusal>({ rule: "counterpart_in_a_row", limit: LOOP_IN_A_ROW, windowSeconds: null, retryAfter: null, counterpart })
    })

  /** 429 `loop_detected` for a refused automated send, after its `send.loop_detected` event. */
  const refuse = (orgId: string, automation: Automation, threadId: string, r: LoopRefusal, what: {
    readonly from: string
    readonly to: ReadonlyArray<string>
    readonly subject: string
  }, at: Date) =>
    Effect.gen(function*() {
      yield* orgEvents.emit({
        orgId,
        eventType: "send.loop_detected",
        createdAt: at,
        data: {
          loop: {
            rule: r.rule,
            thread_id: threadId,
            function_id: automation.functionId,
            limit: r.limit,
            window_seconds: r.windowSeconds,
            retry_after: r.retryAfter,
            counterpart: r.counterpart,
            from: what.from,
            to: what.to,
            subject: what.subject
          }
        }
      }).pipe(Effect.catchAllCause((cause) => Effect.logWarning("send.loop_detected was not recorded", cause)))
      if (r.retryAfter !== null) yield* setHeader("retry-after", String(r.retryAfter))
      return yield* new LoopDetected({
        message: r.rule === "thread_hourly"
          ? `loop guard: at most ${r.limit} automated sends to one thread per hour; retry in ${r.retryAfter} s`
          : `loop guard: at most ${r.limit} automated sends in a row to ${r.counterpart} without a message from a person ` +
            "in between; a person's message in the thread lifts it",
        details: {
          thread_id: threadId,
          rule: r.rule,
          limit: r.limit,
          window_seconds: r.windowSeconds,
          retry_after: r.retryAfter,
          ...(r.counterpart !== null ? { counterpart: r.counterpart } : {})
        }
      })
    })

  return { check, refuse } as const
}
