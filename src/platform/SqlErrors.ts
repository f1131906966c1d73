/** Expected constraint violations that repos turn into API errors; everything else stays a defect. */
import type { SqlError } from "@effect/sql/SqlError"
import { Effect } from "effect"

/** The SQLSTATE of a failed statement, when the driver reported one. */
export const sqlState = (e: SqlError): string | undefined => {
  const cause = e.cause as { code?: unknown } | undefined
  return typeof cause?.code === "string" ? cause.code : undefined
}

/** Raised by `storage_charge` (migrations/0025) when stored bytes would pass an organization's quota. */
export const STORAGE_QUOTA_SQLSTATE = "MRQ01"

/** The name of the violated unique index, when `e` is a unique violation (SQLSTATE 23505). */
export const uniqueViolation = (e: SqlError): string | undefined => {
  if (sqlState(e) !== "23505") return undefined
  const cause = e.cause as { constraint?: unknown }
  return typeof cause.constraint === "string" ? cause.constraint : ""
}

/** Maps a unique violation to `onViolation(constraint)`; any other SqlError becomes a defect. */
export const catchUnique = <A, E, R, E2>(
  effect: Effect.Effect<A, E | SqlError, R>,
  onViolation: (constraint: string) => E2
): Effect.Effect<A, Exclude<E, SqlError> | E2, R> =>
  Effect.catchIf(
    effect,
    (e): e is SqlError => typeof e === "object" && e !== null && (e as { _tag?: string })._tag === "SqlError",
    (e) => {
      const c = uniqueViolation(e)
      return c === undefined ? Effect.die(e) : Effect.fail(onViolation(c))
    }
  ) as Effect.Effect<A, Exclude<E, SqlError> | E2, R>
