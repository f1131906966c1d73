/**
 * The compiled response encoders (src/platform/SchemaEncoder.ts) produce exactly Schema's encoding,
 * and the compiled row decoders (src/platform/SchemaDecoder.ts) exactly Schema's decoding,
 * and give up (so Schema reports the error) wherever Schema refuses. Checked on every success schema
 * of the API with generated values of its own type, and on hand-made schemas for each shape the
 * compiler handles or hands back. (The rest of the suite runs with MAILROOM_CHECK_ENCODING=1, which
 * compares every response the service sends with Schema's encoding of it.)
 */
import { HttpApiSchema } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Arbitrary, Either, FastCheck, ParseResult, Schema, SchemaAST } from "effect"
import { MailroomApi } from "../src/Api.js"
import { Ok, OkList } from "../src/contract/Envelope.js"
import { Count, Enum, JsonColumn, NullableTimestamp, Timestamp } from "../src/platform/Rows.js"
import { decoderOf, NOT_DECODED, sameDecoded } from "../src/platform/SchemaDecoder.js"
import { encoderOf } from "../src/platform/SchemaEncoder.js"

const bySchema = (schema: Schema.Schema.Any, value: unknown) =>
  ParseResult.encodeUnknownEither(schema as Schema.Schema<unknown, unknown, never>)(value)

/** Compiled and Schema agree: the same JSON where Schema encodes, a give-up where it refuses. */
const agree = (schema: Schema.Schema.Any, value: unknown) => {
  const compiled = encoderOf(schema)(value)
  const expected = bySchema(schema, value)
  if (Either.isLeft(expected)) expect(compiled).toBeUndefined()
  else if (compiled !== undefined) expect(JSON.stringify(compiled)).toBe(JSON.stringify(expected.right))
  return compiled !== undefined
}

/** Every JSON success schema of the API, by endpoint. */
const successSchemas = () => {
  const out: Array<{ readonly name: string; readonly schema: Schema.Schema.Any }> = []
  for (const group of Object.values(MailroomApi.groups)) {
    for (const endpoint of Object.values(group.endpoints)) {
      const schemas = new Set<Schema.Schema.Any>()
      HttpApiSchema.deunionize(schemas, endpoint.successSchema)
      for (const schema of schemas) {
        if (HttpApiSchema.isVoid(schema.ast) || HttpApiSchema.getEncoding(schema.ast).kind !== "Json") continue
        out.push({ name: `${group.identifier}.${endpoint.name}`, schema })
      }
    }
  }
  return out
}

/**
 * Values of a success schema's type. The envelopes' decoded side is a bare declaration with nothing
 * to generate from, so values are made on the wire side's type and decoded through the envelope's
 * own transformation.
 */
const valuesOf = (schema: Schema.Schema.Any, count: number): Array<unknown> | undefined => {
  const ast = schema.ast
  const source = SchemaAST.isTransformation(ast) && SchemaAST.isDeclaration(ast.to) ? ast.from : ast
  let samples: Array<unknown>
  try {
    samples = FastCheck.sample(Arbitrary.make(Schema.typeSchema(Schema.make(source))), { numRuns: count, seed: 42 })
  } catch {
    return undefined // no arbitrary for some declaration inside
  }
  if (source === ast || !SchemaAST.isTransformation(ast) || !SchemaAST.isFinalTransformation(ast.transformation)) return samples
  const decode = ast.transformation.decode
  return samples.map((wire) => {
    const result = decode(wire, SchemaAST.defaultParseOption, ast, wire)
    return Either.isEither(result) && Either.isRight(result) ? result.right : undefined
  })
}

describe("compiled response encoders", () => {
  it("encode every success schema of the API as Schema does", () => {
    const schemas = successSchemas()
    expect(schemas.length).toBeGreaterThan(100)
    let tried = 0
    let compiled = 0
    const skipped: Array<string> = []
    for (const { name, schema } of schemas) {
      const values = valuesOf(schema, 10)
      if (values === undefined) {
        skipped.push(name)
        continue
      }
      for (const value of values) {
        tried++
        if (agree(schema, value)) compiled++
      }
    }
    // Most endpoints have values to try, and the compiled path takes (nearly) all of them: a
    // give-up is correct but slow, so a drop here is a lost speed-up, not a wrong answer.
    expect(skipped.length, `no values for ${skipped.join(", ")}`).toBeLessThan(schemas.length / 10)
    expect(compiled / tried).toBeGreaterThan(0.95)
  })

  const Item = Schema.Struct({
    id: Schema.UUID,
    name: Schema.NullOr(Schema.String),
    count: Schema.Int,
    at: Schema.Date,
    when: Schema.optional(Schema.Date),
    kind: Schema.Literal("a", "b"),
    tags: Schema.Array(Schema.String),
    nested: Schema.NullOr(Schema.Struct({ ok: Schema.Boolean }))
  })
  const good = {
    id: "0b8f7c7e-8d27-4c1f-9f5e-2a7e8d1c3b4a",
    name: null,
    count: 3,
    at: new Date("2026-11-28T12:00:00.000Z"),
    kind: "a",
    tags: ["x"],
    nested: { ok: true, extra: "dropped" },
    internal: "dropped"
  }

  it("builds Schema's output: declared keys in order, dates as ISO strings, missing optionals left out", () => {
    const out = encoderOf(Item)(good)
    expect(out).toEqual({
      id: good.id,
      name: null,
      count: 3,
      at: "2026-11-28T12:00:00.000Z",
      kind: "a",
      tags: ["x"],
      nested: { ok: true }
    })
    expect(agree(Item, good)).toBe(true)
    expect(agree(Item, { ...good, when: new Date(0) })).toBe(true)
  })

  it("gives up wherever Schema refuses: wrong type, failed refinement, invalid date, unknown literal, missing key", () => {
    const bad: Array<unknown> = [
      { ...good, count: 1.5 },
      { ...good, id: "not-a-uuid" },
      { ...good, at: new Date(Number.NaN) },
      { ...good, kind: "c" },
      { ...good, tags: "x" },
      { ...good, nested: { ok: "yes" } },
      (({ name: _, ...rest }) => rest)(good),
      null,
      [good]
    ]
    for (const value of bad) {
      expect(Either.isLeft(bySchema(Item, value))).toBe(true)
      expect(encoderOf(Item)(value)).toBeUndefined()
    }
  })

  it("encodes the envelopes, and hands shapes it does not compile to Schema", () => {
    expect(encoderOf(Ok(Item, "Item"))(good)).toEqual({ success: true, data: encoderOf(Item)(good) })
    const page = { items: [good, good], meta: { total: 2, limit: 20, cursor: null } }
    expect(agree(OkList(Item, "Item"), page)).toBe(true)
    // A union of two structs and an index signature are Schema's: same output, errors as Schema's.
    const Either2 = Schema.Union(Schema.Struct({ a: Schema.String }), Schema.Struct({ b: Schema.Number }))
    expect(agree(Either2, { b: 1, a: 2 })).toBe(true)
    expect(agree(Either2, { c: 1 })).toBe(false)
    const Record = Schema.Record({ key: Schema.String, value: Schema.Date })
    expect(agree(Record, { x: new Date(0) })).toBe(true)
    expect(encoderOf(Record)({ x: new Date(0) })).toEqual({ x: "1970-01-01T00:00:00.000Z" })
  })
})

describe("compiled row decoders", () => {
  const Row = Schema.Struct({
    id: Schema.String,
    created_at: Timestamp,
    finished_at: NullableTimestamp,
    total: Count,
    status: Enum("pending", "delivered"),
    labels: JsonColumn(Schema.Array(Schema.String)),
    score: Schema.NullOr(Schema.Number),
    auth: Schema.NullOr(Schema.Struct({ spf: Schema.String }))
  })

  const agreeDecoding = (schema: Schema.Schema.Any, value: unknown) => {
    const compiled = decoderOf(schema)(value)
    const expected = ParseResult.decodeUnknownEither(schema as Schema.Schema<unknown, unknown, never>)(value)
    if (Either.isLeft(expected)) expect(compiled).toBe(NOT_DECODED)
    else if (compiled !== NOT_DECODED) expect(sameDecoded(compiled, expected.right)).toBe(true)
    return compiled !== NOT_DECODED
  }

  it("decode every form a driver gives as Schema does: Dates and their text, bigint text, jsonb, nulls", () => {
    const rows = FastCheck.sample(Arbitrary.make(Schema.encodedSchema(Row)), { numRuns: 300, seed: 5 })
    // The compiled decoder takes every row Schema decodes (the encoded side's arbitrary also
    // makes rows Schema refuses: text that is no number or date).
    const decodable = rows.filter((row) => Either.isRight(ParseResult.decodeUnknownEither(Row)(row)))
    expect(decodable.length).toBeGreaterThan(100)
    for (const row of rows) agreeDecoding(Row, row)
    expect(decodable.filter((row) => agreeDecoding(Row, row)).length).toBe(decodable.length)
    const row = {
      id: "a",
      created_at: "2026-11-28 12:00:00+00",
      finished_at: new Date(0),
      total: "42",
      status: "pending",
      labels: ["x"],
      score: null,
      auth: { spf: "pass", extra: 1 },
      other: "dropped"
    }
    expect(decoderOf(Row)(row)).toEqual({
      id: "a",
      created_at: new Date("2026-11-28T12:00:00Z"),
      finished_at: new Date(0),
      total: 42,
      status: "pending",
      labels: ["x"],
      score: null,
      auth: { spf: "pass" }
    })
  })

  it("give up wherever Schema refuses, so Schema reports the row", () => {
    const good = { id: "a", created_at: new Date(0), finished_at: null, total: 1, status: "pending", labels: [], score: 1, auth: null }
    const bad: Array<unknown> = [
      { ...good, total: "many" },
      { ...good, status: "lost" },
      { ...good, labels: "x" },
      { ...good, created_at: 5 },
      { ...good, auth: { spf: 1 } },
      (({ id: _, ...rest }) => rest)(good),
      "row"
    ]
    for (const value of bad) {
      expect(agreeDecoding(Row, value)).toBe(false)
    }
  })
})
