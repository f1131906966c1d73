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
import { Either, Option, ParseResult, Schema, SchemaAST as AST } from "effect"
import { CHECK, GIVE_UP, giveUp, hasOwnOptions, leafCheck, OPTIONS } from "./SchemaEncoder.js"

type Decode = (value: unknown) => unknown

export const NOT_DECODED: unique symbol = Symbol("mailroom/SchemaDecoder/notDecoded")

const bySchema = (ast: AST.AST): Decode => {
  const decode = ParseResult.decodeUnknownEither(Schema.make(ast))
  return (value) => {
    const result = decode(value)
    return Either.isRight(result) ? result.right : giveUp()
  }
}

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

const compiled = new WeakMap<AST.AST, Decode>()

const compile = (ast: AST.AST): Decode => {
  const known = compiled.get(ast)
  if (known !== undefined) return known
  const decode = hasOwnOptions(ast) ? bySchema(ast) : build(ast)
  compiled.set(ast, decode)
  return decode
}

const build = (ast: AST.AST): Decode => {
  const leaf = leafCheck(ast)
  if (leaf !== undefined) return (v) => leaf(v) ? v : giveUp()
  switch (ast._tag) {
    case "Refinement": {
      const from = compile(ast.from)
      const filter = ast.filter
      return (v) => {
        const a = from(v)
        return Option.isNone(filter(a, OPTIONS, ast)) ? a : giveUp()
      }
    }
    case "Transformation": {
      const from = compile(ast.from)
      const to = compile(ast.to)
      const transformation = ast.transformation
      if (AST.isComposeTransformation(transformation)) return (v) => to(from(v))
      if (!AST.isFinalTransformation(transformation)) return bySchema(ast)
      return (v) => {
        const result = transformation.decode(from(v), OPTIONS, ast, v)
        return Either.isEither(result) && Either.isRight(result) ? to(result.right) : giveUp()
      }
    }
    case "Declaration": {
      const parse = ast.decodeUnknown(...ast.typeParameters)
      return (v) => {
        const result = parse(v, OPTIONS, ast)
        return Either.isEither(result) && Either.isRight(result) ? result.right : giveUp()
      }
    }
    case "TupleType": {
      if (ast.elements.length > 0 || ast.rest.length !== 1) return bySchema(ast)
      const item = compile(ast.rest[0]!.type)
      return (v) => {
        if (!Array.isArray(v)) return giveUp()
        const out = new Array(v.length)
        for (let i = 0; i < v.length; i++) out[i] = item(v[i])
        return out
      }
    }
    case "TypeLiteral": {
      if (ast.indexSignatures.length > 0) return bySchema(ast)
      const fields = ast.propertySignatures.map((ps) => ({ name: ps.name, optional: ps.isOptional, decode: compile(ps.type) }))
      return (v) => {
        if (typeof v !== "object" || v === null || Array.isArray(v)) return giveUp()
        const input = v as Record<PropertyKey, unknown>
        const out: Record<PropertyKey, unknown> = {}
        for (const field of fields) {
          if (!Object.prototype.hasOwnProperty.call(input, field.name) && field.optional) continue
          out[field.name] = field.decode(input[field.name])
        }
        return out
      }
    }
    case "Union": {
      const members = ast.types
      const leaves = members.map((m) => hasOwnOptions(m) ? undefined : leafCheck(m))
      if (leaves.every((l) => l !== undefined)) return (v) => leaves.some((check) => check!(v)) ? v : giveUp()
      if (members.every(unkeyed)) {
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
      }
      return bySchema(ast)
    }
    case "Suspend": {
      let inner: Decode | undefined
      return (v) => (inner ??= compile(ast.f()))(v)
    }
    default:
      return bySchema(ast)
  }
}

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
    let out: unknown
    try {
      out = decode(value)
    } catch (error) {
      if (error === GIVE_UP) return NOT_DECODED
      throw error
    }
    if (bySchemaOnly !== undefined) {
      const expected = bySchemaOnly(value)
      if (!Either.isRight(expected) || !sameDecoded(expected.right, out)) {
        throw new Error(`compiled decoding differs from Schema's for ${String(schema.ast).slice(0, 200)}`)
      }
    }
    return out
  }
}
