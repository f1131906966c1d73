/**
 * Schemas of row fields as the database drivers return them, for repositories that decode their
 * rows (`allRows`, `firstRow`, and `findAll` / `findOne` / `single` as `SqlSchema` has them) instead of casting them.
 *
 * Both databases are read through node-postgres, but a column's JavaScript form still depends on its
 * type and on how the statement spells it: `timestamptz` arrives as a Date, yet as a string once it
 * went through `to_json`/`jsonb` or a text cast; `bigint` (`count(*)`) and `numeric` arrive as
 * strings; `jsonb` arrives parsed. Each schema here accepts every form a driver gives and decodes to
 * the one form the code uses, so a renamed or retyped column fails a test instead of flowing on.
 *
 * A row that does not match is a programming error, not a caller's: `orDieRows` turns the parse
 * error (and the SQL error) into a defect whose message names the statement.
 */
import { Cause, Effect, Option, ParseResult, Schema } from "effect"
import { decoderOf, NOT_DECODED } from "./SchemaDecoder.js"

/** A point in time: a Date, or the ISO/PostgreSQL text of one. Decodes to a Date. */
export const Timestamp: Schema.Schema<Date, Date | string> = Schema.Union(Schema.DateFromSelf, Schema.DateFromString)

/** A nullable point in time. */
export const NullableTimestamp = Schema.NullOr(Timestamp)

/** A count or other integer: a number, or the text PostgreSQL gives `bigint` (`count(*)`) as. */
export const Count: Schema.Schema<number, number | string> = Schema.Union(Schema.Number, Schema.NumberFromString)

/**
 * A `jsonb` column: node-postgres hands it over parsed, so its schema decodes the parsed value (a
 * JSON string value arrives as a string and must not be parsed again).
 */
export const JsonColumn = <A, I, R>(schema: Schema.Schema<A, I, R>): Schema.Schema<A, I, R> => schema

/** A `jsonb` column whose shape the reader checks itself. */
export const Json = Schema.Unknown

/** A `text[]` column. */
export const TextArray = Schema.Array(Schema.String)

/** A text column holding one of a few names (a status or kind). */
export const Enum = <const L extends ReadonlyArray<string>>(...names: L) => Schema.Literal(...names)

/**
 * The parse error of a row, or the SQL error, as a defect naming the statement: neither is
 * something a caller can handle.
 */
export const orDieRows = (what: string) =>
<A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, never, R> =>
  Effect.catchAll(self, (e) =>
    Effect.die(
      ParseResult.isParseError(e)
        ? new Error(`${what}: a row does not match its schema: ${ParseResult.TreeFormatter.formatErrorSync(e)}`)
        : e
    ))

type Decoder<A, R> = (u: unknown) => Effect.Effect<A, ParseResult.ParseError, R>

/**
 * The decoders (and request encoders) of each schema, built once. `Schema.Array(Result)` is a new
 * schema each time it is written, and decoding with a new schema compiles its parser again: done per
 * statement (as `SqlSchema.findAll` does when it is called per statement) that was a few percent of
 * the CPU of every request that reads rows. A schema written inline where a statement runs is still
 * a new object each time: row schemas belong at module level.
 */
const arrayDecoders = new WeakMap<object, unknown>()
const rowDecoders = new WeakMap<object, unknown>()
const encoders = new WeakMap<object, unknown>()

const once = (cache: WeakMap<object, unknown>, key: object, make: () => unknown): unknown => {
  if (!cache.has(key)) cache.set(key, make())
  return cache.get(key)
}

/**
 * The compiled decoder of `schema` (platform/SchemaDecoder.ts), falling back to Schema's own where it
 * gives up: Schema then decodes, or reports the error.
 */
const compiledOrSchema = <A, I, R>(schema: Schema.Schema<A, I, R>): Decoder<A, R> => {
  const fast = decoderOf(schema)
  const slow = Schema.decodeUnknown(schema)
  return (u) => {
    const out = fast(u)
    return out === NOT_DECODED ? slow(u) : Effect.succeed(out as A)
  }
}

const decodeArray = <A, I, R>(schema: Schema.Schema<A, I, R>) =>
  once(arrayDecoders, schema, () => compiledOrSchema(Schema.Array(schema))) as Decoder<ReadonlyArray<A>, R>

const decodeRow = <A, I, R>(schema: Schema.Schema<A, I, R>) =>
  once(rowDecoders, schema, () => compiledOrSchema(schema)) as Decoder<A, R>

const encodeWith = <A, I, R>(schema: Schema.Schema<A, I, R>) =>
  once(encoders, schema, () => Schema.encode(schema)) as (a: A) => Effect.Effect<I, ParseResult.ParseError, R>

/** The first of `rows` decoded with `schema`, if there is one. */
const firstDecoded = <A, I, R>(schema: Schema.Schema<A, I, R>) => (rows: ReadonlyArray<unknown>) =>
  rows.length > 0 ? Effect.asSome(decodeRow(schema)(rows[0])) : Effect.succeedNone

/**
 * Decodes rows already fetched (a statement wrapped by a helper such as `catchUnique` or
 * `pageWithTotal`), dying like `orDieRows` when one does not match.
 */
export const decodeRows = <A, I>(schema: Schema.Schema<A, I>, what: string) => (rows: ReadonlyArray<unknown>) =>
  decodeArray(schema)(rows).pipe(orDieRows(what))

/** The first of the rows, decoded; none when there are no rows. */
export const decodeFirst = <A, I>(schema: Schema.Schema<A, I>, what: string) => (rows: ReadonlyArray<unknown>) =>
  firstDecoded(schema)(rows).pipe(orDieRows(what))

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
 * Every row of a statement decoded with `Result` (what `SqlSchema.findAll` does, with the decoder
 * built once per schema); a row that does not decode dies naming `query`, while the statement's own
 * failures (SqlError) stay for the caller to handle.
 */
export const allRows = <A, I, RS>(Result: Schema.Schema<A, I, RS>, query: string) =>
<E, R>(statement: Effect.Effect<ReadonlyArray<unknown>, E, R>): Effect.Effect<ReadonlyArray<A>, E, R | RS> =>
  Effect.flatMap(statement, decodeArray(Result)).pipe(rowsOrDieOnParse(query)) as Effect.Effect<ReadonlyArray<A>, E, R | RS>

/** The first row of a statement, if any, decoded with `Result` (as `SqlSchema.findOne`); as `allRows` for failures. */
export const firstRow = <A, I, RS>(Result: Schema.Schema<A, I, RS>, query: string) =>
<E, R>(statement: Effect.Effect<ReadonlyArray<unknown>, E, R>): Effect.Effect<Option.Option<A>, E, R | RS> =>
  Effect.flatMap(statement, firstDecoded(Result)).pipe(rowsOrDieOnParse(query)) as Effect.Effect<Option.Option<A>, E, R | RS>

/** A page's rows (platform/Listing.ts selects `*`) decoded with `Result`. */
export const pageRows = <A, I>(Result: Schema.Schema<A, I>, query: string) => {
  const decode = decodeArray(Result)
  return <E, R>(page: Effect.Effect<{ readonly rows: ReadonlyArray<unknown>; readonly total: number }, E, R>) =>
    Effect.flatMap(page, ({ rows, total }) =>
      decode(rows).pipe(
        Effect.map((decoded) => ({ rows: decoded, total })),
        rowsOrDieOnParse(query)
      ))
}

interface Query<IR, II, IA, AR, AI, A, R, E> {
  readonly Request: Schema.Schema<IA, II, IR>
  readonly Result: Schema.Schema<A, AI, AR>
  readonly execute: (request: II) => Effect.Effect<ReadonlyArray<unknown>, E, R>
}

/** The rows of a `SqlSchema`-style query for `request`, not yet decoded. */
const rowsOf = <IR, II, IA, AR, AI, A, R, E>(options: Query<IR, II, IA, AR, AI, A, R, E>, request: IA) =>
  Effect.flatMap(encodeWith(options.Request)(request), options.execute)

/** `SqlSchema.findAll`, with its encoder and decoder built once per schema (see `arrayDecoders`). */
export const findAll = <IR, II, IA, AR, AI, A, R, E>(options: Query<IR, II, IA, AR, AI, A, R, E>) =>
(request: IA): Effect.Effect<ReadonlyArray<A>, E | ParseResult.ParseError, R | IR | AR> =>
  Effect.flatMap(rowsOf(options, request), decodeArray(options.Result))

/** `SqlSchema.findOne`, with its encoder and decoder built once per schema. */
export const findOne = <IR, II, IA, AR, AI, A, R, E>(options: Query<IR, II, IA, AR, AI, A, R, E>) =>
(request: IA): Effect.Effect<Option.Option<A>, E | ParseResult.ParseError, R | IR | AR> =>
  Effect.flatMap(rowsOf(options, request), firstDecoded(options.Result))

/** `SqlSchema.single`, with its encoder and decoder built once per schema. */
export const single = <IR, II, IA, AR, AI, A, R, E>(options: Query<IR, II, IA, AR, AI, A, R, E>) =>
(request: IA): Effect.Effect<A, E | ParseResult.ParseError | Cause.NoSuchElementException, R | IR | AR> =>
  Effect.flatMap(
    rowsOf(options, request),
    (rows): Effect.Effect<A, ParseResult.ParseError | Cause.NoSuchElementException, AR> =>
      rows.length > 0 ? decodeRow(options.Result)(rows[0]) : Effect.fail(new Cause.NoSuchElementException())
  )
