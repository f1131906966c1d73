/**
 * The MCP tools: each one is a name over an operation of the HttpApi declaration. Its input schema
 * is the operation's path parameters, query parameters, body and `Idempotency-Key` merged into one
 * object; its output schema is the operation's success body (the `{success:true,data,meta?}`
 * envelope); a call is that operation's request. Nothing here knows the server: the service runs a
 * call through its own router, `mailroom mcp` sends it over HTTP.
 *
 * A new tool is one line in `TOOLS` naming its group and endpoint.
 */
import type { HttpApiEndpoint } from "@effect/platform"
import { OpenApi } from "@effect/platform"
import { Context, JSONSchema, Option, Schema, SchemaAST as AST } from "effect"
import { MailroomApi } from "../Api.js"

type Json = Record<string, unknown>

export interface ToolSpec {
  readonly name: string
  readonly description: string
  readonly inputSchema: Json
  readonly outputSchema: Json
  readonly readOnly: boolean
  readonly method: string
  /** With `:name` segments, prefix included (`/v1/emails/:id`). */
  readonly path: string
  readonly pathKeys: ReadonlyArray<string>
  readonly queryKeys: ReadonlyArray<string>
  readonly hasBody: boolean
  readonly acceptsIdempotencyKey: boolean
}

/** The argument carrying the `Idempotency-Key` header of a POST operation. */
export const IDEMPOTENCY_ARGUMENT = "idempotency_key"

const propertiesOf = (schema: Schema.Schema.Any): ReadonlyArray<AST.PropertySignature> =>
  AST.getPropertySignatures(schema.ast)

/** A JSON Schema of one part of a request, its `$defs` gathered into `defs`. */
const jsonSchemaOf = (ast: AST.AST, defs: Record<string, JSONSchema.JsonSchema7>): Json =>
  JSONSchema.fromAST(ast, { definitions: defs, topLevelReferenceStrategy: "skip" }) as unknown as Json

/**
 * A query parameter arrives as text on the wire, but a tool's caller passes JSON: its schema is the
 * decoded side where JSON Schema can say it (an integer with its bounds), the wire side otherwise
 * (a date-time string).
 */
const queryParamSchema = (ps: AST.PropertySignature, defs: Record<string, JSONSchema.JsonSchema7>): Json => {
  const description = Option.getOrUndefined(AST.getDescriptionAnnotation(ps))
  let schema: Json
  try {
    schema = jsonSchemaOf(AST.typeAST(ps.type), defs)
  } catch {
    schema = jsonSchemaOf(AST.encodedAST(ps.type), defs)
  }
  return description !== undefined && schema.description === undefined ? { ...schema, description } : schema
}

/** `Schema.Unknown` carries `$id: "/schemas/unknown"` at every use; a validator refuses repeated ids. */
const withoutAnyIds = (node: unknown): unknown => {
  if (Array.isArray(node)) return node.map(withoutAnyIds)
  if (node === null || typeof node !== "object") return node
  const obj = node as Record<string, unknown>
  if (typeof obj.$id === "string" && obj.$id.startsWith("/schemas/")) {
    const { $id: _id, title: _title, ...rest } = obj
    return withoutAnyIds(rest)
  }
  return Object.fromEntries(Object.entries(obj).map(([k, v]) => [k, withoutAnyIds(v)]))
}

const endpointOf = (group: string, name: string): HttpApiEndpoint.HttpApiEndpoint.AnyWithProps => {
  const g = (MailroomApi as unknown as { groups: Record<string, { endpoints: Record<string, unknown> }> }).groups[group]
  const e = g?.endpoints[name]
  if (e === undefined) throw new Error(`MCP tool over ${group}.${name}: no such operation`)
  return e as HttpApiEndpoint.HttpApiEndpoint.AnyWithProps
}

/** A tool over the operation `group.endpoint`; its description defaults to the operation's summary. */
export const tool = (name: string, group: string, endpoint: string, description?: string): ToolSpec => {
  const e = endpointOf(group, endpoint)
  const defs: Record<string, JSONSchema.JsonSchema7> = {}
  const properties: Record<string, unknown> = {}
  const required: Array<string> = []
  const add = (key: string, schema: unknown, optional: boolean) => {
    if (key in properties) throw new Error(`MCP tool ${name}: "${key}" is both a path, query or body field`)
    properties[key] = schema
    if (!optional) required.push(key)
  }
  const pathKeys: Array<string> = []
  for (const schema of Option.toArray(e.pathSchema)) {
    const whole = jsonSchemaOf(schema.ast, defs) as { properties?: Record<string, unknown> }
    for (const ps of propertiesOf(schema)) {
      pathKeys.push(String(ps.name))
      add(String(ps.name), whole.properties?.[String(ps.name)] ?? { type: "string" }, false)
    }
  }
  const queryKeys: Array<string> = []
  for (const schema of Option.toArray(e.urlParamsSchema)) {
    for (const ps of AST.getPropertySignatures(schema.ast)) {
      queryKeys.push(String(ps.name))
      add(String(ps.name), queryParamSchema(ps, defs), ps.isOptional)
    }
  }
  let hasBody = false
  for (const schema of Option.toArray(e.payloadSchema)) {
    hasBody = true
    const body = jsonSchemaOf(schema.ast, defs) as { type?: string; properties?: Record<string, unknown>; required?: Array<string> }
    if (body.type !== "object" || body.properties === undefined) throw new Error(`MCP tool ${name}: the body is not an object`)
    for (const [key, value] of Object.entries(body.properties)) add(key, value, !(body.required ?? []).includes(key))
  }
  const acceptsIdempotencyKey = Option.exists(e.headersSchema, (h) => propertiesOf(h).some((ps) => ps.name === "idempotency-key"))
  if (acceptsIdempotencyKey) {
    const headers = jsonSchemaOf(Option.getOrThrow(e.headersSchema).ast, defs) as { properties: Record<string, unknown> }
    add(IDEMPOTENCY_ARGUMENT, headers.properties["idempotency-key"], true)
  }
  const inputSchema: Json = { type: "object", properties, required, additionalProperties: false }
  const success = jsonSchemaOf(e.successSchema.ast, defs)
  // MCP wants an object schema at the top; an operation with two success statuses is one of two objects.
  const outputSchema: Json = success.type === "object" ? success : { type: "object", ...success }
  if (Object.keys(defs).length > 0) {
    inputSchema.$defs = defs
    outputSchema.$defs = defs
  }
  const summary = Context.getOption(e.annotations, OpenApi.Summary)
  return {
    name,
    description: description ?? Option.getOrElse(summary, () => name),
    inputSchema: withoutAnyIds(inputSchema) as Json,
    outputSchema: withoutAnyIds(outputSchema) as Json,
    readOnly: e.method === "GET",
    method: e.method,
    path: e.path,
    pathKeys,
    queryKeys,
    hasBody,
    acceptsIdempotencyKey
  }
}

/**
 * Every tool of the contract.
 */
export const TOOLS: ReadonlyArray<ToolSpec> = [
  tool("get_account", "account", "get", "The caller's organization: plan, limits, entitlements, managed inbox address"),
  tool("list_inboxes", "inboxes", "list", "The organization's inboxes on the managed domain (the default one included), newest first"),
  tool(
    "create_inbox",
    "inboxes",
    "create",
    "Create an inbox on the managed domain (random username when none is given); its mail carries its inbox_id " +
      "and send_email can use its address as from"
  ),
  tool("list_emails", "emails", "list"),
  tool("get_email", "emails", "get"),
  tool("label_email", "emails", "update", "Set an email's labels (the new set, replacing the old) and/or mark it read or unread; answers the email"),
  tool("search_emails", "search", "search"),
  tool(
    "wait_for_email",
    "events",
    "waitForEmail",
    "Wait for the next received email that matches (sender, subject text, recipient), up to timeout_seconds (at most 120); " +
      "answers it as soon as it is stored, or data null when none arrived"
  ),
  tool("send_email", "sending", "send"),
  tool("reply_to_email", "sending", "reply"),
  tool("forward_email", "sending", "forward"),
  tool("list_threads", "threads", "list"),
  tool("get_thread", "threads", "get"),
  tool("list_functions", "functions", "list"),
  tool("deploy_function", "functions", "create"),
  tool("invoke_function", "functions", "invoke"),
  tool("get_memory", "memories", "get"),
  tool("put_memory", "memories", "put"),
  tool("schedule_wake", "wakes", "create"),
  tool("resolve_registry_entry", "registries", "entry"),
  tool("pay_challenge", "payments", "pay"),
  tool("list_drafts", "drafts", "list", "Sends held for a person's approval (send_approval), newest first; a person approves them")
]

export interface ToolRequest {
  readonly method: string
  /** Path and query string. */
  readonly url: string
  readonly body: string | undefined
  readonly idempotencyKey: string | undefined
}

/** A call's arguments that fit no part of the operation. */
export class ToolArgumentError extends Error {}

const queryValue = (v: unknown): ReadonlyArray<string> =>
  Array.isArray(v) ? v.flatMap(queryValue) : v === null || v === undefined ? [] : [typeof v === "string" ? v : typeof v === "object" ? JSON.stringify(v) : String(v)]

/** The operation's request for a call's arguments; the operation itself validates their values. */
export const requestOf = (spec: ToolSpec, args: Readonly<Record<string, unknown>> | undefined): ToolRequest => {
  const input = args ?? {}
  let path = spec.path
  for (const key of spec.pathKeys) {
    const v = input[key]
    if (v === undefined || v === null || v === "") throw new ToolArgumentError(`${key}: required`)
    path = path.replace(`:${key}`, encodeURIComponent(typeof v === "string" ? v : String(v)))
  }
  const query = new URLSearchParams()
  const body: Record<string, unknown> = {}
  let idempotencyKey: string | undefined
  for (const [key, value] of Object.entries(input)) {
    if (spec.pathKeys.includes(key)) continue
    if (spec.queryKeys.includes(key)) {
      for (const v of queryValue(value)) query.append(key, v)
    } else if (key === IDEMPOTENCY_ARGUMENT && spec.acceptsIdempotencyKey) {
      if (typeof value !== "string") throw new ToolArgumentError(`${IDEMPOTENCY_ARGUMENT}: must be a string`)
      idempotencyKey = value
    } else if (spec.hasBody) {
      body[key] = value
    } else {
      throw new ToolArgumentError(`${key}: not an argument of ${spec.name}`)
    }
  }
  const qs = query.toString()
  return {
    method: spec.method,
    url: qs === "" ? path : `${path}?${qs}`,
    body: spec.hasBody ? JSON.stringify(body) : undefined,
    idempotencyKey
  }
}
