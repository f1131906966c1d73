/**
 * When a wake fires: exactly one of `at` (a time), `in` (a delay from its creation), `every` (an
 * interval of at least a minute, first firing one interval after creation) or `cron` (5 fields, UTC,
 * stepped by Effect's Cron). A recurring wake missed while the service was down fires once and then
 * goes on from now (nextAfter).
 */
import { Cron, Duration, Either } from "effect"
import { parseDuration } from "../platform/Config.js"

export type ScheduleKind = "at" | "in" | "every" | "cron"

export interface WakeSchedule {
  readonly kind: ScheduleKind
  readonly value: string
}

export const MIN_EVERY = Duration.minutes(1)
/** The furthest a wake may be first due, and the longest interval. */
export const MAX_AHEAD = Duration.days(366)

type Checked = { readonly schedule: WakeSchedule; readonly first: Date } | { readonly field: ScheduleKind; readonly problem: string }

const cronOf = (expression: string) => {
  if (expression.trim().split(/\s+/).length !== 5) return Either.left("must have 5 fields: minute hour day-of-month month day-of-week (UTC)")
  return Either.mapLeft(Cron.parse(expression, "UTC"), (e) => e.message)
}

/** The schedule of a request body and its first due time, or what is wrong with it. */
export const checkSchedule = (
  given: { readonly at?: Date | undefined; readonly in?: string | undefined; readonly every?: string | undefined; readonly cron?: string | undefined },
  now: Date
): Checked => {
  const kinds = (["at", "in", "every", "cron"] as const).filter((k) => given[k] !== undefined)
  if (kinds.length !== 1) {
    return { field: kinds[1] ?? "at", problem: kinds.length === 0 ? "give exactly one of at, in, every or cron" : `give exactly one of at, in, every or cron (got ${kinds.join(", ")})` }
  }
  const limit = now.getTime() + Duration.toMillis(MAX_AHEAD)
  const kind = kinds[0]!
  switch (kind) {
    case "at": {
      const at = given.at!
      if (at.getTime() <= now.getTime()) return { field: "at", problem: "must be in the future" }
      if (at.getTime() > limit) return { field: "at", problem: "must be at most 366 days ahead" }
      return { schedule: { kind, value: at.toISOString() }, first: at }
    }
    case "in":
    case "every": {
      const raw = given[kind]!
      const d = parseDuration(raw)
      if (Either.isLeft(d)) return { field: kind, problem: d.left }
      const ms = Duration.toMillis(d.right)
      if (kind === "every" && ms < Duration.toMillis(MIN_EVERY)) return { field: kind, problem: "must be at least 1m" }
      if (ms <= 0) return { field: kind, problem: "must be more than 0" }
      if (now.getTime() + ms > limit) return { field: kind, problem: "must be at most 366 days" }
      return { schedule: { kind, value: raw.trim() }, first: new Date(now.getTime() + ms) }
    }
    case "cron": {
      const expression = given.cron!.trim()
      const c = cronOf(expression)
      if (Either.isLeft(c)) return { field: "cron", problem: c.left }
      return { schedule: { kind, value: expression }, first: Cron.next(c.right, now) }
    }
  }
}

/**
 * After the firing due at `scheduledFor`, done at `now`: the next due time, or undefined when the
 * wake is done. On time, `every` keeps its cadence (due + interval); late (the service was down),
 * it goes on from now, and `cron` takes its first time after now: one catch-up firing, no burst.
 */
export const nextAfter = (schedule: WakeSchedule, scheduledFor: Date, now: Date): Date | undefined => {
  switch (schedule.kind) {
    case "at":
    case "in":
      return undefined
    case "every": {
      const ms = Duration.toMillis(Either.getOrThrow(parseDuration(schedule.value)))
      const onCadence = scheduledFor.getTime() + ms
      return new Date(onCadence > now.getTime() ? onCadence : now.getTime() + ms)
    }
    case "cron":
      return Cron.next(Either.getOrThrow(Cron.parse(schedule.value, "UTC")), now.getTime() > scheduledFor.getTime() ? now : scheduledFor)
  }
}

/** The schedule as the API shows it: the one key it was given with. */
export const scheduleObject = (s: WakeSchedule) => ({ [s.kind]: s.value }) as { readonly [K in ScheduleKind]?: string }
