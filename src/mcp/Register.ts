/**
 * Registers every tool of `TOOLS` with an McpServer, each answered by `call`: the service runs the
 * operation's request through its own router, `mailroom mcp` sends it over HTTP. Either way the
 * result is built from the operation's status and body here, the same way. A success keeps the
 * body's JSON text (`JsonText`): it is parsed only if a serializer asks for its value, and the direct
 * path (Direct.ts) writes it into the answer as it came.
 */
import * as McpSchema from "@effect/ai/McpSchema"
import * as McpServer from "@effect/ai/McpServer"
import { Cause, Effect } from "effect"
import { envelopeOf, InternalError, ValidationError } from "../contract/Errors.js"
import { requestOf, ToolArgumentError, type ToolRequest, TOOLS, type ToolSpec } from "./Tools.js"

/** Each tool's output schema by name (see Serialization.ts). */
export const OUTPUT_SCHEMAS: ReadonlyMap<string, unknown> = new Map(TOOLS.map((t) => [t.name, t.outputSchema]))

const text = (s: string) => ({ type: "text" as const, text: s })

/**
 * An operation's success body as its JSON text. Serialized (`toJSON`) it is that JSON's value, so
 * any serializer writes the same `structuredContent`; the direct path splices the text itself.
 */
export class JsonText {
  constructor(readonly text: string) {}
  toJSON(): unknown {
    return JSON.parse(this.text)
  }
}

// The results built here have a fixed shape: the class's constructor check is skipped.
const callToolResult = (fields: ConstructorParameters<typeof McpSchema.CallToolResult>[0]) => new McpSchema.CallToolResult(fields, true)

/** A failed call: `isError` with the error envelope (`{success:false,error:{code,message,…}}`) as its text. */
export const failure = (envelope: unknown) => callToolResult({ isError: true, content: [text(JSON.stringify(envelope))] })

/** How every success envelope the API encodes begins (see src/contract/Envelope.ts). */
const SUCCESS_ENVELOPE = /^\{"success":true[,}]/

/** The operation's answer as a tool result: its body as structured content, or `isError` with its error envelope. */
export const resultOf = (status: number, body: string | undefined) => {
  if (status < 400 && body !== undefined && SUCCESS_ENVELOPE.test(body)) {
    return callToolResult({ isError: false, structuredContent: new JsonText(body), content: [text(body)] })
  }
  let parsed: { success?: boolean } | undefined
  try {
    parsed = body === undefined || body === "" ? undefined : JSON.parse(body)
  } catch {
    parsed = undefined
  }
  if (parsed === undefined || parsed === null || typeof parsed !== "object") {
    return failure(envelopeOf(new InternalError({ message: `the operation answered ${status} without a JSON body` })))
  }
  if (status >= 400 || parsed.success !== true) return failure(parsed)
  return callToolResult({ isError: false, structuredContent: parsed, content: [text(body!)] })
}

export type Call<R> = (spec: ToolSpec, request: ToolRequest) => Effect.Effect<McpSchema.CallToolResult, unknown, R>

/** A registered tool's handler, by the call's arguments; it never fails. */
export type Run = (args: Record<string, unknown> | undefined) => Effect.Effect<McpSchema.CallToolResult>

/** Registers every tool; answers the handlers it registered, by tool name. */
export const registerTools = <R>(call: Call<R>) =>
  Effect.gen(function*() {
    const server = yield* McpServer.McpServer
    const context = yield* Effect.context<R>()
    const runs = new Map<string, Run>()
    for (const spec of TOOLS) {
      const run = (args: Record<string, unknown> | undefined) =>
        Effect.suspend(() => {
          try {
            return call(spec, requestOf(spec, args))
          } catch (e) {
            if (!(e instanceof ToolArgumentError)) throw e
            const [field, reason] = e.message.split(": ", 2) as [string, string]
            return Effect.succeed(failure(envelopeOf(new ValidationError({ message: e.message, details: { issues: [{ field, reason }] } }))))
          }
        }).pipe(
          Effect.catchAllCause((cause) =>
            Cause.isInterruptedOnly(cause)
              ? Effect.interrupt
              : Effect.as(
                Effect.logError(`MCP tool ${spec.name} failed`, cause),
                failure(envelopeOf(new InternalError({ message: "internal error" })))
              )
          ),
          // The service's handler also sees the POST's own context (its request, its resolved credential).
          Effect.provide(context)
        )
      runs.set(spec.name, run as Run)
      yield* server.addTool({
        tool: new McpSchema.Tool({
          name: spec.name,
          description: spec.description,
          inputSchema: spec.inputSchema,
          annotations: new McpSchema.ToolAnnotations({
            readOnlyHint: spec.readOnly,
            destructiveHint: false,
            idempotentHint: spec.readOnly || spec.method === "PUT",
            openWorldHint: spec.name === "send_email" || spec.name === "reply_to_email" || spec.name === "forward_email"
          })
        }),
        handle: (args) => run(args as Record<string, unknown> | undefined) as Effect.Effect<McpSchema.CallToolResult>
      })
    }
    return runs as ReadonlyMap<string, Run>
  })
