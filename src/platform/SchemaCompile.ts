/**
 * What the compiled encoders (SchemaEncoder.ts) and decoders (SchemaDecoder.ts) share: the
 * give-up signal, the parts that compile alike in both directions (keywords, literals,
 * declarations, transformations, arrays, structs, suspensions) and Schema's own parser for the
 * parts neither compiles. Each direction supplies its refinements and unions, where Schema's
 * rules differ.
 */
import { Either, Option, ParseResult, Schema, SchemaAST as AST } from "effect"

/** Thrown (and caught by `encoderOf` / `decoderOf`) when a compiled function gives up. */
export const GIVE_UP: unique symbol = Symbol("mailroom/SchemaCompile/giveUp")
export const giveUp = (): never => {
  throw GIVE_UP
}

export type Compiled = (value: unknown) => unknown
export type Check = (value: unknown) => boolean

export const OPTIONS = AST.defaultParseOption

/** `MAILROOM_CHECK_ENCODING=1`: every compiled result is compared with Schema's. */
export const CHECK = process.env.MAILROOM_CHECK_ENCODING === "1"

/** A step that Schema runs with parse options of its own: left to Schema, which honours them. */
export const hasOwnOptions = (ast: AST.AST) => Option.isSome(AST.getParseOptionsAnnotation(ast))

/** Encodes and decodes to itself: the value is its own result once it passes the check. */
export const leafCheck = (ast: AST.AST): Check | undefined => {
  switch (ast._tag) {
    case "StringKeyword":
      return (v) => typeof v === "string"
    case "NumberKeyword":
      return (v) => typeof v === "number"
    case "BooleanKeyword":
      return (v) => typeof v === "boolean"
    case "UndefinedKeyword":
      return (v) => v === undefined
    case "UnknownKeyword":
    case "AnyKeyword":
      return () => true
    case "Literal": {
      const literal = ast.literal
      return (v) => v === literal
    }
    default:
      return undefined
  }
}

/** Schema's own parser for a part that is not compiled. */
export const bySchema = (ast: AST.AST, isDecoding: boolean): Compiled => {
  const parse = isDecoding ? ParseResult.decodeUnknownEither(Schema.make(ast)) : ParseResult.encodeUnknownEither(Schema.make(ast))
  return (value) => {
    const result = parse(value)
    return Either.isRight(result) ? result.right : giveUp()
  }
}

/**
 * The compiler of one direction, memoised per AST node. `own` compiles the refinements and unions
 * of that direction (undefined: Schema parses the part).
 */
export const makeCompiler = (
  isDecoding: boolean,
  own: (ast: AST.Refinement | AST.Union, compile: (ast: AST.AST) => Compiled) => Compiled | undefined
) => {
  const compiled = new WeakMap<AST.AST, Compiled>()
  const compile = (ast: AST.AST): Compiled => {
    const known = compiled.get(ast)
    if (known !== undefined) return known
    const result = (hasOwnOptions(ast) ? undefined : build(ast)) ?? bySchema(ast, isDecoding)
    compiled.set(ast, result)
    return result
  }
  const build = (ast: AST.AST): Compiled | undefined => {
    const leaf = leafCheck(ast)
    if (leaf !== undefined) return (v) => leaf(v) ? v : giveUp()
    switch (ast._tag) {
      case "Refinement":
      case "Union":
        return own(ast, compile)
      case "Transformation": {
        // Decoding runs encoded side → `decode` → type side; encoding runs the other way round.
        const first = compile(isDecoding ? ast.from : ast.to)
        const last = compile(isDecoding ? ast.to : ast.from)
        const transformation = ast.transformation
        if (AST.isComposeTransformation(transformation)) return (v) => last(first(v))
        if (!AST.isFinalTransformation(transformation)) return undefined
        const step = isDecoding ? transformation.decode : transformation.encode
        return (v) => {
          const result = step(first(v), OPTIONS, ast, v)
          return Either.isEither(result) && Either.isRight(result) ? last(result.right) : giveUp()
        }
      }
      case "Declaration": {
        const parse = isDecoding ? ast.decodeUnknown(...ast.typeParameters) : ast.encodeUnknown(...ast.typeParameters)
        return (v) => {
          const result = parse(v, OPTIONS, ast)
          return Either.isEither(result) && Either.isRight(result) ? result.right : giveUp()
        }
      }
      case "TupleType": {
        if (ast.elements.length > 0 || ast.rest.length !== 1) return undefined
        const item = compile(ast.rest[0]!.type)
        return (v) => {
          if (!Array.isArray(v)) return giveUp()
          const out = new Array(v.length)
          for (let i = 0; i < v.length; i++) out[i] = item(v[i])
          return out
        }
      }
      case "TypeLiteral": {
        if (ast.indexSignatures.length > 0) return undefined
        const fields = ast.propertySignatures.map((ps) => ({ name: ps.name, optional: ps.isOptional, parse: compile(ps.type) }))
        return (v) => {
          if (typeof v !== "object" || v === null || Array.isArray(v)) return giveUp()
          const input = v as Record<PropertyKey, unknown>
          const out: Record<PropertyKey, unknown> = {}
          for (const field of fields) {
            // A missing optional key stays missing; a missing required one is parsed as `undefined`,
            // as Schema does outside exact mode (and gives up unless its type accepts it).
            if (!Object.prototype.hasOwnProperty.call(input, field.name) && field.optional) continue
            out[field.name] = field.parse(input[field.name])
          }
          return out
        }
      }
      case "Suspend": {
        let inner: Compiled | undefined
        return (v) => (inner ??= compile(ast.f()))(v)
      }
      default:
        return undefined
    }
  }
  return compile
}

/** Runs a compiled function: its result, or `onGiveUp` when it gave up. */
export const runCompiled = <G>(compiled: Compiled, value: unknown, onGiveUp: G): unknown => {
  try {
    return compiled(value)
  } catch (error) {
    if (error === GIVE_UP) return onGiveUp
    throw error
  }
}
