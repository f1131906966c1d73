/**
 * `HttpApiBuilder.group` whose handlers' successes are encoded by compiled encoders
 * (platform/SchemaEncoder.ts) instead of Schema's interpreter: the same JSON, status and content
 * type as HttpApiBuilder would send, for a fraction of the CPU. HttpApiBuilder sends a handler's
 * `HttpServerResponse` as it is, so the response is built here; a value the compiled encoder gives
 * up on is handed back unchanged and HttpApiBuilder encodes it (and reports its errors) as always.
 * Every area builds its handlers with this `group`.
 */
import { HttpApiBuilder, HttpApiSchema, HttpServerResponse } from "@effect/platform"
import { Chunk, Effect, type Schema } from "effect"
import { encoderOf } from "./SchemaEncoder.js"

interface Item {
  readonly endpoint: { readonly successSchema: Schema.Schema.Any }
  readonly handler: (request: unknown) => Effect.Effect<unknown, unknown, unknown>
}

interface Handlers {
  readonly group: unknown
  readonly handlers: Chunk.Chunk<Item>
}

/** The response of a success value, or undefined where HttpApiBuilder must encode it. */
const responderOf = (success: Schema.Schema.Any): ((value: unknown) => HttpServerResponse.HttpServerResponse | undefined) | undefined => {
  const schemas = new Set<Schema.Schema.Any>()
  HttpApiSchema.deunionize(schemas, success)
  if (schemas.size !== 1) return undefined
  const [schema] = schemas
  const ast = schema!.ast
  const encoding = HttpApiSchema.getEncoding(ast)
  if (HttpApiSchema.isVoid(ast) || encoding.kind !== "Json") return undefined
  const status = HttpApiSchema.getStatusSuccessAST(ast)
  const encode = encoderOf(schema!)
  return (value) => {
    const data = encode(value)
    if (data === undefined) return undefined
    try {
      return HttpServerResponse.unsafeJson(data, { status, contentType: encoding.contentType })
    } catch {
      return undefined // not serialisable: HttpApiBuilder reports it
    }
  }
}

const withCompiledEncoding = (handlers: Handlers): Handlers => {
  const items = Chunk.map(handlers.handlers, (item): Item => {
    const respond = responderOf(item.endpoint.successSchema)
    if (respond === undefined) return item
    return {
      ...item,
      handler: (request) =>
        Effect.map(item.handler(request), (value) => HttpServerResponse.isServerResponse(value) ? value : respond(value) ?? value)
    }
  })
  // The same kind of object HttpApiBuilder made (its prototype carries `handle`), with the items replaced.
  return Object.assign(Object.create(Object.getPrototypeOf(handlers)) as Handlers, { group: handlers.group, handlers: items })
}

const compiledGroup = (api: unknown, groupName: unknown, build: (handlers: Handlers) => Handlers | Effect.Effect<Handlers, unknown, unknown>) =>
  HttpApiBuilder.group(api as never, groupName as never, ((handlers: Handlers) => {
    const built = build(handlers)
    return Effect.isEffect(built) ? Effect.map(built, withCompiledEncoding) : withCompiledEncoding(built)
  }) as never)

export const group = compiledGroup as unknown as typeof HttpApiBuilder.group
