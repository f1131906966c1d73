/**
 * Registers every tool of `TOOLS` with an McpServer, each answered by `call`: the service runs the
 * operation's request through its own router, `mailroom mcp` sends it over HTTP. Either way the
 * result is built from the operation's status and body here, the same way.
 */
import * as McpSchema from "@effect/ai/McpSchema"
import * as McpServer from "@effect/ai/McpServer"
import { Cause, Effect } from "effect"
import { envelopeOf, InternalError, ValidationError } from "../contract/Errors.js"
import { requestOf, ToolArgumentError, type ToolRequest, TOOLS, type ToolSpec } from "./Tools.js"

/** Each tool's output schema by name (see Serialization.ts). */
export const OUTPUT_SCHEMAS: ReadonlyMap<string, unknown> = new Map(TOOLS.map((t) => [t.name, t.outputSchema]))

const text = (s: string) => ({ type: "text" as const, text: s })

/** A failed call: `isError` with the error envelope (`{success:false,error:{code,message,…}}`) as its text. */
export const failure = (envelope: unknown) => new McpSchema.CallToolResult({ isError: true, content: [text(JSON.stringify(envelope))] })

/** The operation's answer as a tool result: its body as structured content, or `isError` with its error envelope. */
export const resultOf = (status: number, body: string | undefined) => {
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
  return new McpSchema.CallToolResult({ isError: false, structuredContent: parsed, content: [text(body!)] })
}

export type Call<R> = (spec: ToolSpec, request: ToolRequest) => Effect.Effect<McpSchema.CallToolResult, unknown, R>

export const registerTools = <R>(call: Call<R>) =>
  Effect.gen(function*() {
    const server = yield* McpServer.McpServer
    const context = yield* Effect.context<R>()
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
  })
