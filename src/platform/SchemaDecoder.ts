/**
 * Plain functions that decode a value exactly as `Schema.decodeUnknown` would, compiled once per
 * schema: the row decoders of platform/Rows.ts. Decoding a page of rows through Schema's
 * interpreter was about a tenth of a list endpoint's CPU.
 *
 * As with the encoders (platform/SchemaEncoder.ts), the compiled function never reports an error:
 * on a value it cannot decode, or a schema part it does not compile, it gives up (`NOT_DECODED`)
 * and the caller decodes with Schema, which gives its usual result or error. Unions are compiled
 * only where the member Schema would take is certain: members that decode to themselves, a member
 * beside `null`/`undefined`, or members without literal-keyed fields tried in order (first success,
 * as Schema does when no member is keyed by a literal: `Timestamp`, `Count`).
 * `MAILROOM_CHECK_ENCODING=1` compares every compiled result with Schema's.
 */
import { Either, Option, ParseResult, type Schema, SchemaAST as AST } from "effect"
import { CHECK, type Compiled, giveUp, GIVE_UP, hasOwnOptions, leafCheck, makeCompiler, OPTIONS, runCompiled } from "./SchemaCompile.js"

export const NOT_DECODED: unique symbol = Symbol("mailroom/SchemaDecoder/notDecoded")

/** Parts that never pick a union member by a literal field (Schema tries them in order). */
const unkeyed = (ast: AST.AST): boolean => {
  if (leafCheck(ast) !== undefined) return true
  switch (ast._tag) {
    case "Declaration":
      return Option.isNone(AST.getSurrogateAnnotation(ast))
    case "Refinement":
      return unkeyed(ast.from)
    case "Transformation":
      return unkeyed(ast.from)
    case "Union":
      return true // a union member is never keyed by a literal (Schema looks into structs only)
    default:
      return false
  }
}

const compile = makeCompiler(true, (ast, compile): Compiled | undefined => {
  if (AST.isRefinement(ast)) {
    const from = compile(ast.from)
    const filter = ast.filter
    return (v) => {
      const a = from(v)
      return Option.isNone(filter(a, OPTIONS, ast)) ? a : giveUp()
    }
  }
  const members = ast.types
  const leaves = members.map((m) => hasOwnOptions(m) ? undefined : leafCheck(m))
  if (leaves.every((l) => l !== undefined)) return (v) => leaves.some((check) => check!(v)) ? v : giveUp()
  if (!members.every(unkeyed)) return undefined
  const tries = members.map(compile)
  return (v) => {
    for (const attempt of tries) {
      try {
        return attempt(v)
      } catch (error) {
        if (error !== GIVE_UP) throw error
      }
    }
    return giveUp()
  }
})

/** Deep equality for decoded values, where two invalid Dates are the same value (Node's is not). */
export const sameDecoded = (a: unknown, b: unknown): boolean => {
  if (a instanceof Date || b instanceof Date) {
    return a instanceof Date && b instanceof Date && Object.is(a.getTime(), b.getTime())
  }
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return Object.is(a, b)
  if (Array.isArray(a) !== Array.isArray(b) || Object.getPrototypeOf(a) !== Object.getPrototypeOf(b)) return false
  const keys = Reflect.ownKeys(a)
  const other = Reflect.ownKeys(b)
  if (keys.length !== other.length) return false
  return keys.every((k, i) => k === other[i] && sameDecoded((a as Record<PropertyKey, unknown>)[k], (b as Record<PropertyKey, unknown>)[k]))
}

/** The compiled decoder of a schema: the decoded value, or `NOT_DECODED` (decode with Schema then). */
export const decoderOf = (schema: Schema.Schema.Any): (value: unknown) => unknown => {
  const decode = compile(schema.ast)
  const bySchemaOnly = CHECK ? ParseResult.decodeUnknownEither(schema as Schema.Schema<unknown, unknown, never>) : undefined
  return (value) => {
    const out = runCompiled(decode, value, NOT_DECODED)
    if (bySchemaOnly !== undefined && out !== NOT_DECODED) {
      const expected = bySchemaOnly(value)
      if (!Either.isRight(expected) || !sameDecoded(expected.right, out)) {
        throw new Error(`compiled decoding differs from Schema's for ${String(schema.ast).slice(0, 200)}`)
      }
    }
    return out
  }
}
