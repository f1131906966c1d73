/**
 * A `tools/call` posted alone is answered here, in the POST's own fiber, by the handler the
 * McpServer registered for that tool, and written as the JSON-RPC response the RPC server would
 * write (`{"jsonrpc":"2.0","id":…,"result":{content,structuredContent?,isError}}`), the operation's
 * success body spliced in as its JSON text. This skips the RPC server's per-request machinery (a
 * client, its mailbox, a fiber and span per request, the result's schema encoding) on the one call
 * an agent makes over and over. Anything else (a batch, a notification, another method, an unknown
 * tool, malformed params, an id that is not a positive integer, which the RPC server rewrites) goes
 * to the McpServer as posted, so its answers stay the McpServer's.
 */
import type * as McpSchema from "@effect/ai/McpSchema"
import { Effect } from "effect"
import { JsonText, type Run } from "./Register.js"

const isRecord = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === "object" && !Array.isArray(v)

/** `_meta` as the McpServer decodes it: absent, or an object whose `progressToken` is absent, a string or a number. */
const metaDecodes = (meta: unknown) => {
  if (meta === undefined) return true
  if (!isRecord(meta)) return false
  const token = meta.progressToken
  return token === undefined || typeof token === "string" || typeof token === "number"
}

/** The call's answer as the JSON-RPC response text, or undefined when the McpServer is to answer. */
export const directCall = (runs: ReadonlyMap<string, Run>, posted: string): Effect.Effect<string> | undefined => {
  let message: unknown
  try {
    message = JSON.parse(posted)
  } catch {
    return undefined
  }
  if (!isRecord(message) || message.jsonrpc !== "2.0" || message.method !== "tools/call") return undefined
  const { id, params } = message
  if (typeof id !== "number" || !Number.isSafeInteger(id) || id <= 0 || !isRecord(params)) return undefined
  const { name, arguments: args, _meta } = params
  const run = typeof name === "string" ? runs.get(name) : undefined
  // What the McpServer's decoding would refuse stays its to answer (`arguments` is required there).
  if (run === undefined || !isRecord(args) || !metaDecodes(_meta)) return undefined
  return Effect.map(run(args), (result) => responseOf(id, result))
}

/** The RPC server's JSON-RPC encoding of a successful call's result (CallToolResult's field order). */
const responseOf = (id: number, result: McpSchema.CallToolResult): string => {
  const structured = result.structuredContent
  return `{"jsonrpc":"2.0","id":${id},"result":{` +
    (result._meta !== undefined ? `"_meta":${JSON.stringify(result._meta)},` : "") +
    `"content":${JSON.stringify(result.content)}` +
    (structured === undefined ? "" : `,"structuredContent":${structured instanceof JsonText ? structured.text : JSON.stringify(structured)}`) +
    (result.isError === undefined ? "" : `,"isError":${result.isError}`) +
    "}}"
}
