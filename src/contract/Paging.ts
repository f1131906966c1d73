/**
 * Keyset pagination shared by the resource lists (domains, endpoints, filters, routes): newest
 * first by (created_at, id); `cursor` is the opaque position after the last item of a page.
 */
import { Effect, Either, Schema } from "effect"
import type { ListMeta } from "./Envelope.js"
import { allErrors, inTimestampRange } from "./Envelope.js"
import { ValidationError } from "./Errors.js"

export const DEFAULT_PAGE_SIZE = 50

export const ListQuery = allErrors(Schema.Struct({
  limit: Schema.optionalWith(
    Schema.NumberFromString.pipe(Schema.int(), Schema.between(1, 100)).annotations({
      description: "page size 1-100, default 50",
      message: () => "must be an integer from 1 to 100"
    }),
    { exact: true }
  ),
  cursor: Schema.optionalWith(
    Schema.String.pipe(Schema.minLength(1), Schema.maxLength(200)).annotations({
      description: "the previous page's meta.cursor"
    }),
    { exact: true }
  )
}))
export type ListQuery = typeof ListQuery.Type

export interface Position {
  readonly createdAt: Date
  readonly id: string
}

export const encodeCursor = (p: Position) =>
  Buffer.from(JSON.stringify([p.createdAt.toISOString(), p.id]), "utf8").toString("base64url")

const badCursor = () =>
  new ValidationError({
    message: "cursor: not a cursor returned by this list",
    details: { issues: [{ field: "cursor", reason: "not a cursor returned by this list" }] }
  })

const Decoded = Schema.parseJson(Schema.Tuple(Schema.String, Schema.UUID))

export const decodeCursor = (cursor: string | undefined): Effect.Effect<Position | undefined, ValidationError> => {
  if (cursor === undefined) return Effect.succeed(undefined)
  const parsed = Schema.decodeUnknownEither(Decoded)(Buffer.from(cursor, "base64url").toString("utf8"))
  if (Either.isLeft(parsed)) return Effect.fail(badCursor())
  const createdAt = new Date(parsed.right[0])
  if (Number.isNaN(createdAt.getTime()) || !inTimestampRange(createdAt)) return Effect.fail(badCursor())
  return Effect.succeed({ createdAt, id: parsed.right[1] })
}

/** Builds a page from `limit + 1` rows fetched newest first. */
export const pageOf = <R extends { readonly created_at: Date; readonly id: string }, A>(
  rows: ReadonlyArray<R>,
  limit: number,
  total: number,
  toItem: (r: R) => A
): { items: ReadonlyArray<A>; meta: ListMeta } => {
  const page = rows.slice(0, limit)
  const last = page[page.length - 1]
  return {
    items: page.map(toItem),
    meta: {
      total,
      limit,
      cursor: rows.length > limit && last !== undefined ? encodeCursor({ createdAt: last.created_at, id: last.id }) : null
    }
  }
}
