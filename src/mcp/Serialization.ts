/**
 * @effect/ai 0.37's `Tool` has no `outputSchema` field, so the `tools/list` result it encodes drops
 * one. This wraps the JSON-RPC serialization to add each tool's output schema (by tool name) to that
 * result as it is written, over HTTP and stdio alike.
 */
import { RpcSerialization } from "@effect/rpc"

type Message = { readonly _tag?: string; readonly exit?: { readonly _tag?: string; readonly value?: unknown } }

const withSchemas = (outputs: ReadonlyMap<string, unknown>) => (message: unknown): unknown => {
  if (Array.isArray(message)) return message.map(withSchemas(outputs))
  const m = message as Message
  if (m?._tag !== "Exit" || m.exit?._tag !== "Success") return message
  const value = m.exit.value as { tools?: ReadonlyArray<{ name?: string; inputSchema?: unknown }> } | undefined
  if (!Array.isArray(value?.tools)) return message
  const tools = value.tools.map((t) => {
    const output = typeof t.name === "string" ? outputs.get(t.name) : undefined
    return output === undefined ? t : { ...t, outputSchema: output }
  })
  return { ...m, exit: { ...m.exit, value: { ...value, tools } } }
}

export const withOutputSchemas = (
  base: RpcSerialization.RpcSerialization["Type"],
  outputs: ReadonlyMap<string, unknown>
): RpcSerialization.RpcSerialization["Type"] =>
  RpcSerialization.RpcSerialization.of({
    ...base,
    unsafeMake: () => {
      const parser = base.unsafeMake()
      const add = withSchemas(outputs)
      return { decode: (data) => parser.decode(data), encode: (response) => parser.encode(add(response)) }
    }
  })
