/**
 * What a response's encoding costs, in one process, per endpoint: Schema's encoder (what
 * HttpApiBuilder runs; the reference) against the compiled encoder the service now uses
 * (src/platform/SchemaEncoder.ts), on the same values: a page of `--items` generated values of the
 * endpoint's own schema (fixed seed), encoded `--iterations` times each way after a warm-up. Both
 * results are compared once, so a figure is never printed for encoders that disagree. Then the same for
 * decoding a page of rows as the repositories do (src/platform/SchemaDecoder.ts against
 * `Schema.decodeUnknown`), on rows generated on the row schema's encoded side (the driver's forms).
 *
 *   npx tsx scripts/bench-encoding.ts [--items 20] [--iterations 3000]
 */
import { Arbitrary, Either, FastCheck, ParseResult, Schema, SchemaAST } from "effect"
import { MailroomApi } from "../src/Api.js"
import { SummaryRow } from "../src/emails/Repo.js"
import { decoderOf } from "../src/platform/SchemaDecoder.js"
import { encoderOf } from "../src/platform/SchemaEncoder.js"
import { arg } from "./bench-support.js"

const ITEMS = arg("items", 20)
const ITERATIONS = arg("iterations", 3000)

const SHAPES: ReadonlyArray<readonly [group: string, endpoint: string]> = [
  ["account", "get"],
  ["emails", "list"],
  ["deliveries", "list"],
  ["filters", "list"],
  ["endpoints", "list"],
  ["domains", "list"]
]

/** A value of the endpoint's success type: generated on the envelope's wire side, decoded through it. */
const valueOf = (schema: Schema.Schema.Any) => {
  const ast = schema.ast
  if (!SchemaAST.isTransformation(ast) || !SchemaAST.isFinalTransformation(ast.transformation)) throw new Error(`${String(ast)}: not an envelope`)
  const wireType = Schema.typeSchema(Schema.make(ast.from))
  const [wire] = FastCheck.sample(Arbitrary.make(wireType), { numRuns: 1, seed: 7 })
  // Lists get `--items` items: the generated page's data is replaced by generated items.
  const data = (wire as { data: unknown }).data
  const value = Array.isArray(data)
    ? {
      ...(wire as object),
      data: FastCheck.sample(Arbitrary.make(Schema.typeSchema(Schema.make((ast.from as SchemaAST.TypeLiteral).propertySignatures.find((p) => p.name === "data")!.type))), { numRuns: ITEMS, seed: 11 }).flatMap((page) => page as Array<unknown>).slice(0, ITEMS)
    }
    : wire
  const decoded = ast.transformation.decode(value, SchemaAST.defaultParseOption, ast, value)
  if (!Either.isEither(decoded) || Either.isLeft(decoded)) throw new Error("could not build a value")
  return decoded.right
}

const time = (f: () => unknown) => {
  for (let i = 0; i < Math.min(500, ITERATIONS); i++) f()
  const start = process.hrtime.bigint()
  for (let i = 0; i < ITERATIONS; i++) f()
  return Number(process.hrtime.bigint() - start) / 1000 / ITERATIONS
}

console.log(`bench-encoding: µs per response, ${ITERATIONS} encodings each after a warm-up; lists of ${ITEMS} generated items`)
console.log(`${"endpoint".padEnd(22)} ${"items".padStart(5)} ${"Schema µs".padStart(10)} ${"compiled µs".padStart(12)} ${"ratio".padStart(7)}`)
for (const [groupName, endpointName] of SHAPES) {
  const group = (MailroomApi.groups as Record<string, { readonly endpoints: Record<string, { readonly successSchema: Schema.Schema.Any }> }>)[groupName]!
  const schema = group.endpoints[endpointName]!.successSchema
  const value = valueOf(schema)
  const reference = ParseResult.encodeUnknownEither(schema as Schema.Schema<unknown, unknown, never>)
  const compiled = encoderOf(schema)
  const expected = reference(value)
  if (Either.isLeft(expected) || JSON.stringify(expected.right) !== JSON.stringify(compiled(value))) {
    throw new Error(`${groupName}.${endpointName}: the encoders disagree`)
  }
  const items = (value as { items?: ReadonlyArray<unknown> }).items?.length ?? 1
  const slow = time(() => reference(value))
  const fast = time(() => compiled(value))
  console.log(`${`${groupName}.${endpointName}`.padEnd(22)} ${String(items).padStart(5)} ${slow.toFixed(1).padStart(10)} ${fast.toFixed(1).padStart(12)} ${(fast / slow).toFixed(3).padStart(7)}`)
}

console.log(`\nrow decoding: µs per page of ${ITEMS} rows`)
console.log(`${"rows".padEnd(22)} ${"".padStart(5)} ${"Schema µs".padStart(10)} ${"compiled µs".padStart(12)} ${"ratio".padStart(7)}`)
for (const [name, row] of [["emails list (SummaryRow)", SummaryRow]] as const) {
  const page = Schema.Array(row as Schema.Schema.Any)
  const rows = FastCheck.sample(Arbitrary.make(Schema.encodedSchema(row as Schema.Schema.Any)), { numRuns: 400, seed: 3 })
  const reference = ParseResult.decodeUnknownEither(page as unknown as Schema.Schema<unknown, unknown, never>)
  const decodable = rows.filter((r) => Either.isRight(reference([r]))).slice(0, ITEMS)
  const compiled = decoderOf(page)
  const expected = reference(decodable)
  if (decodable.length < ITEMS || Either.isLeft(expected) || JSON.stringify(expected.right) !== JSON.stringify(compiled(decodable))) {
    throw new Error(`${name}: the decoders disagree (or too few decodable rows)`)
  }
  const slow = time(() => reference(decodable))
  const fast = time(() => compiled(decodable))
  console.log(`${name.padEnd(22)} ${"".padStart(5)} ${slow.toFixed(1).padStart(10)} ${fast.toFixed(1).padStart(12)} ${(fast / slow).toFixed(3).padStart(7)}`)
}
