/**
 * Plain functions that encode a value exactly as `Schema.encode` would, compiled once per schema.
 *
 * Why: a response's encoding walked Schema's general interpreter for every field of every item (a
 * union per nullable field, an Either per step), 15–20% of a list endpoint's CPU. The compiled
 * function does the same checks (types, literals, refinements' filters, declarations' guards, each
 * transformation's own `encode`) and builds the same output (declared keys only, in declared order),
 * with none of the interpreter's bookkeeping.
 *
 * It never reports an error itself: a value it cannot encode, or a part of a schema it does not
 * compile (index signatures, general unions, property-signature transformations, effectful steps …)
 * makes it give up (`undefined` from `encoderOf`'s function, or that part handed to Schema's own
 * encoder), and the caller encodes with Schema, which then produces its usual result or error.
 * `MAILROOM_CHECK_ENCODING=1` (the test suite sets it) compares every compiled result with Schema's.
 */
import { Either, Option, ParseResult, Schema, SchemaAST as AST } from "effect"
import { CHECK, type Check, type Compiled, giveUp, hasOwnOptions, leafCheck, makeCompiler, OPTIONS, runCompiled } from "./SchemaCompile.js"

/** Schema's own check of a type side (what a refinement's encoding validates first). */
const checkBySchema = (ast: AST.AST): Check => {
  const decode = ParseResult.decodeUnknownEither(Schema.make(ast))
  return (value) => Either.isRight(decode(value))
}

const typeChecks = new WeakMap<AST.AST, Check>()

/** The check of a refinement's type side: its base's check, then each filter. */
const typeCheck = (ast: AST.AST): Check => {
  const known = typeChecks.get(ast)
  if (known !== undefined) return known
  let check: Check
  const leaf = hasOwnOptions(ast) ? undefined : leafCheck(ast)
  if (leaf !== undefined) check = leaf
  else if (AST.isRefinement(ast) && !hasOwnOptions(ast)) {
    const base = typeCheck(ast.from)
    const filter = ast.filter
    check = (v) => base(v) && Option.isNone(filter(v, OPTIONS, ast))
  } else if (AST.isDeclaration(ast) && !hasOwnOptions(ast)) {
    const parse = ast.decodeUnknown(...ast.typeParameters)
    check = (v) => {
      const result = parse(v, OPTIONS, ast)
      return Either.isEither(result) && Either.isRight(result)
    }
  } else if (AST.isTupleType(ast) && ast.elements.length === 0 && ast.rest.length === 1 && !hasOwnOptions(ast)) {
    // Refinements over arrays (maxItems …) check their items' types first.
    const item = typeCheck(ast.rest[0]!.type)
    check = (v) => Array.isArray(v) && v.every((x) => item(x))
  } else if (AST.isUnion(ast) && !hasOwnOptions(ast)) {
    const members = ast.types.map(typeCheck)
    check = (v) => members.some((member) => member(v))
  } else check = checkBySchema(ast)
  typeChecks.set(ast, check)
  return check
}

const dropRefinements = (ast: AST.AST): AST.AST => AST.isRefinement(ast) ? dropRefinements(ast.from) : ast

/**
 * A union of structs told apart by one key holding a distinct literal in each (`verified: true` /
 * `verified: false`): only the member with the value's literal can encode it, so it is the one
 * Schema's encoding takes too.
 */
const discriminated = (ast: AST.Union, compile: (ast: AST.AST) => Compiled): Compiled | undefined => {
  if (!ast.types.every((m) => AST.isTypeLiteral(m) && m.indexSignatures.length === 0 && !hasOwnOptions(m))) return undefined
  const members = ast.types as ReadonlyArray<AST.TypeLiteral>
  const literalAt = (m: AST.TypeLiteral, key: PropertyKey) => {
    const ps = m.propertySignatures.find((p) => p.name === key)
    return ps !== undefined && !ps.isOptional && AST.isLiteral(ps.type) ? ps.type : undefined
  }
  for (const candidate of members[0]!.propertySignatures) {
    const key = candidate.name
    const literals = members.map((m) => literalAt(m, key))
    if (literals.some((l) => l === undefined)) continue
    const values = literals.map((l) => l!.literal)
    if (new Set(values).size !== values.length) continue
    const byValue = new Map(values.map((value, i) => [value, compile(members[i]!)]))
    return (v) => {
      if (typeof v !== "object" || v === null) return giveUp()
      const encode = byValue.get((v as Record<PropertyKey, unknown>)[key] as AST.LiteralValue)
      return encode === undefined ? giveUp() : encode(v)
    }
  }
  return undefined
}

const compile = makeCompiler(false, (ast, compile) => {
  if (AST.isRefinement(ast)) {
    // As Schema: the value must pass the whole type side (filters included), then the part below
    // the filters encodes it.
    const check = typeCheck(AST.typeAST(ast))
    const encode = compile(dropRefinements(ast.from))
    return (v) => check(v) ? encode(v) : giveUp()
  }
  // Only the unions whose choice of member cannot differ from Schema's: members that encode to
  // themselves (literals, `null`, `undefined`, keywords), plus at most one other member that none of
  // them accepts a value of (NullOr(Struct), optional(Date) …), or structs told apart by a literal.
  const leaves: Array<Check> = []
  const others: Array<AST.AST> = []
  for (const member of ast.types) {
    const check = hasOwnOptions(member) ? undefined : leafCheck(member)
    if (check !== undefined) leaves.push(check)
    else others.push(member)
  }
  if (others.length === 0) return (v) => leaves.some((check) => check(v)) ? v : giveUp()
  const nullish = ast.types.every((m) => others.includes(m) || m._tag === "UndefinedKeyword" || (AST.isLiteral(m) && m.literal === null))
  if (others.length > 1 || !nullish) return discriminated(ast, compile)
  const other = compile(others[0]!)
  return (v) => v === null || v === undefined ? (leaves.some((check) => check(v)) ? v : giveUp()) : other(v)
})

/**
 * The compiled encoder of a schema: the encoded value, or `undefined` when it gave up (encode with
 * Schema then; none of the schemas this is used for encodes anything to `undefined`).
 */
export const encoderOf = (schema: Schema.Schema.Any): (value: unknown) => unknown => {
  const encode = compile(schema.ast)
  const bySchemaOnly = CHECK ? ParseResult.encodeUnknownEither(schema as Schema.Schema<unknown, unknown, never>) : undefined
  return (value) => {
    const out = runCompiled(encode, value, undefined)
    if (bySchemaOnly !== undefined && out !== undefined) {
      const expected = bySchemaOnly(value)
      const same = Either.isRight(expected) && JSON.stringify(expected.right) === JSON.stringify(out)
      if (!same) {
        throw new Error(`compiled encoding differs from Schema's for ${String(schema.ast)}: ${JSON.stringify(out)?.slice(0, 500)}`)
      }
    }
    return out
  }
}
