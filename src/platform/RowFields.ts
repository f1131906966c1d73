/**
 * Field schemas for decoding database rows (with `SqlSchema` in the repositories), so a wrong or
 * renamed column fails a test instead of reaching a client.
 *
 * Both databases are read through node-postgres, which parses `timestamptz` to a Date, `jsonb` to
 * a value and `bigint`/`numeric` to a string; the schemas also accept the string forms so a
 * driver without those parsers still decodes. A row that does not decode is a defect (`rowsOrDie`).
 */
import { SqlSchema } from "@effect/sql"
import { Effect, type Option, type ParseResult, Schema } from "effect"

/** A `timestamptz` column: a Date, or its text form. */
export const Timestamp: Schema.Schema<Date, Date | string> = Schema.Union(Schema.DateFromSelf, Schema.DateFromString)

/** A nullable `timestamptz` column. */
export const NullableTimestamp = Schema.NullOr(Timestamp)

/** A `count(*)` or other integer column: a number, or the text node-postgres gives a bigint. */
export const Count: Schema.Schema<number, number | string> = Schema.Union(Schema.Number, Schema.NumberFromString)

/** A `jsonb` column, already parsed by the driver; its shape is the writer's (checked at the API). */
export const JsonColumn = Schema.Unknown

/** A `text[]` column. */
export const TextArray = Schema.Array(Schema.String)

/** Dies, naming the query, when a row does not decode; other failures (SqlError) stay typed for the caller. */
export const rowsOrDieOnParse = (query: string) =>
<A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, Exclude<E, ParseResult.ParseError>, R> =>
  Effect.catchIf(
    self,
    (e): e is Extract<E, ParseResult.ParseError> => (e as { _tag?: unknown })._tag === "ParseError",
    (e) => Effect.dieMessage(`${query}: a row does not match its schema: ${(e as ParseResult.ParseError).message}`)
  ) as Effect.Effect<A, Exclude<E, ParseResult.ParseError>, R>

/** Dies, naming the query, when a row does not decode; SQL errors die as they did before decoding. */
export const rowsOrDie = (query: string) => <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, never, R> =>
  Effect.orDie(rowsOrDieOnParse(query)(self))

/**
 * Every row of a statement decoded with `Result` (`SqlSchema.findAll`); a row that does not decode
 * dies naming `query`, while the statement's own failures (SqlError) stay for the caller to handle.
 */
export const allRows = <A, I, RS>(Result: Schema.Schema<A, I, RS>, query: string) =>
<E, R>(statement: Effect.Effect<ReadonlyArray<unknown>, E, R>): Effect.Effect<ReadonlyArray<A>, E, R | RS> =>
  SqlSchema.findAll({ Request: Schema.Void, Result, execute: () => statement })(undefined).pipe(
    rowsOrDieOnParse(query)
  ) as Effect.Effect<ReadonlyArray<A>, E, R | RS>

/** The first row of a statement, if any, decoded with `Result` (`SqlSchema.findOne`); as `allRows` for failures. */
export const firstRow = <A, I, RS>(Result: Schema.Schema<A, I, RS>, query: string) =>
<E, R>(statement: Effect.Effect<ReadonlyArray<unknown>, E, R>): Effect.Effect<Option.Option<A>, E, R | RS> =>
  SqlSchema.findOne({ Request: Schema.Void, Result, execute: () => statement })(undefined).pipe(
    rowsOrDieOnParse(query)
  ) as Effect.Effect<Option.Option<A>, E, R | RS>

/** A page's rows (platform/Listing.ts selects `*`) decoded with `Result`. */
export const pageRows = <A, I>(Result: Schema.Schema<A, I>, query: string) => {
  const decode = Schema.decodeUnknown(Schema.Array(Result))
  return <E, R>(page: Effect.Effect<{ readonly rows: ReadonlyArray<unknown>; readonly total: number }, E, R>) =>
    Effect.flatMap(page, ({ rows, total }) =>
      decode(rows).pipe(
        Effect.map((decoded) => ({ rows: decoded, total })),
        rowsOrDieOnParse(query)
      ))
}
