/**
 * Success envelopes and request-schema helpers.
 *
 * Envelopes are schema transforms, so handlers return plain values, the server encodes
 * `{success:true,data,meta?}`, the typed client decodes it back, and the OpenAPI document shows the
 * envelope. Every envelope carries its own JSON identifier: without one, effect's JSON Schema
 * generator confuses a transform over a Schema.Class with the class itself.
 */
import { Schema, SchemaAST } from "effect"

const jsonId = (id: string) => ({ [SchemaAST.JSONIdentifierAnnotationId]: id })

/**
 * The decoded side of an envelope. Encoding validates every value against the wire schema once
 * (refinements included) on its way out, and decoding validates the wire input once on its way in;
 * the decoded side only moves values between the two, so re-checking it (`Schema.typeSchema`) doubled
 * the cost of every response (a 20-item list spent about 0.3 ms in it) and caught nothing new.
 */
const trusted = <A>(identifier: string) =>
  Schema.declare((_: unknown): _ is A => true, { identifier: `${identifier}Value` })

/** `{success:true,data}`; the handler returns `A`. */
export const Ok = <A, I, R>(data: Schema.Schema<A, I, R>, identifier: string): Schema.Schema<
  A,
  { readonly success: true; readonly data: I },
  R
> =>
  Schema.transform(Schema.Struct({ success: Schema.Literal(true), data }), trusted<A>(identifier), {
    strict: false,
    decode: (e) => e.data,
    encode: (a) => ({ success: true as const, data: a })
  }).annotations({ ...jsonId(`${identifier}Response`), description: identifier }) as unknown as Schema.Schema<
    A,
    { readonly success: true; readonly data: I },
    R
  >

export const ListMeta = Schema.Struct({
  total: Schema.Int.annotations({ description: "Number of items matching the query" }),
  limit: Schema.Int.annotations({ description: "Page size used" }),
  cursor: Schema.NullOr(Schema.String).annotations({
    description: "Opaque; pass as `cursor` to fetch the next page; null means no more results"
  })
}).annotations(jsonId("ListMeta"))
export type ListMeta = typeof ListMeta.Type

export interface Page<A> {
  readonly items: ReadonlyArray<A>
  readonly meta: ListMeta
}

/** `{success:true,data:[…],meta}`; the handler returns `{items, meta}`. */
export const OkList = <A, I, R>(item: Schema.Schema<A, I, R>, identifier: string): Schema.Schema<
  Page<A>,
  { readonly success: true; readonly data: ReadonlyArray<I>; readonly meta: typeof ListMeta.Encoded },
  R
> =>
  Schema.transform(
    Schema.Struct({ success: Schema.Literal(true), data: Schema.Array(item), meta: ListMeta }),
    trusted<Page<A>>("Page"),
    {
      strict: false,
      decode: (e) => ({ items: e.data, meta: e.meta }),
      encode: (a) => ({ success: true as const, data: a.items, meta: a.meta })
    }
  ).annotations({ ...jsonId(`${identifier}ListResponse`), description: `${identifier} list` }) as unknown as Schema.Schema<
    Page<A>,
    { readonly success: true; readonly data: ReadonlyArray<I>; readonly meta: typeof ListMeta.Encoded },
    R
  >

/** The decoded side of `OkWithMeta`: the data and the endpoint's own meta. */
export interface WithMeta<A, M> {
  readonly data: A
  readonly meta: M
}

/**
 * `{success:true,data,meta}` with a meta of the endpoint's own (not a page's, e.g. how a search ran);
 * the handler returns `{data, meta}`.
 */
export const OkWithMeta = <A, I, R, M, MI, MR>(
  data: Schema.Schema<A, I, R>,
  meta: Schema.Schema<M, MI, MR>,
  identifier: string,
  description = identifier
): Schema.Schema<WithMeta<A, M>, { readonly success: true; readonly data: I; readonly meta: MI }, R | MR> =>
  Schema.transform(Schema.Struct({ success: Schema.Literal(true), data, meta }), trusted<WithMeta<A, M>>(identifier), {
    strict: false,
    decode: (e) => ({ data: e.data, meta: e.meta }),
    encode: (a) => ({ success: true as const, data: a.data, meta: a.meta })
  }).annotations({ ...jsonId(`${identifier}Response`), description }) as unknown as Schema.Schema<
    WithMeta<A, M>,
    { readonly success: true; readonly data: I; readonly meta: MI },
    R | MR
  >

/** Strict request bodies: unknown properties are rejected and every issue is reported. */
export const strict = <S extends Schema.Schema.Any>(s: S): S =>
  s.annotations({ parseOptions: { onExcessProperty: "error", errors: "all" } }) as S

/** Request parts other than bodies also report every issue (but tolerate unknown keys). */
export const allErrors = <S extends Schema.Schema.Any>(s: S): S =>
  s.annotations({ parseOptions: { errors: "all" } }) as S

/** A UUID path or body id; bad ids are 400 `validation_error`, unknown ids 404 `not_found`. */
export const Uuid = Schema.UUID.annotations({ description: "UUID" })

/** ISO 8601 date-time on the wire, `Date` in code. */
export const DateTimeString = Schema.Date.annotations({ description: "ISO 8601 date-time" })

/**
 * Earliest instant a PostgreSQL `timestamptz` holds, with a margin (its range starts in November
 * 4714 BC); JavaScript's latest date (year 275760) is inside the range, so only the start needs a bound.
 */
const EARLIEST_TIMESTAMP_MS = Date.UTC(-4712, 0, 1)

export const inTimestampRange = (d: Date) => d.getTime() >= EARLIEST_TIMESTAMP_MS

/** A date-time a request passes to a query: one PostgreSQL can compare, or 400 `validation_error`. */
export const DateTimeFilter = Schema.Date.pipe(
  Schema.filter(inTimestampRange, { message: () => "must be a date-time from year 4713 BC onward" })
).annotations({ description: "ISO 8601 date-time" })

export const IdPath = allErrors(Schema.Struct({ id: Uuid }))

/**
 * The `Idempotency-Key` header every POST accepts. The key is enforced by the platform's
 * idempotency layer before the handler runs; it is declared here so clients and the OpenAPI see it.
 */
export const IdempotencyHeaders = allErrors(Schema.Struct({
  "idempotency-key": Schema.optional(
    Schema.String.pipe(Schema.minLength(1), Schema.maxLength(255)).annotations({
      description:
        "1 to 255 characters. A retry with the same key returns the original result (24 h); without it the key is derived from the canonical body (60 s)."
    })
  )
}))
