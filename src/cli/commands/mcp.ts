/**
 * `mailroom mcp`: the service's MCP tools served over stdio (newline-delimited JSON-RPC) with this
 * profile's credential, on @effect/ai's McpServer. A call is the API request its tool names, sent to
 * the profile's service; the result is built from the answer as `/mcp` builds it.
 */
import * as McpServer from "@effect/ai/McpServer"
import { NodeSink, NodeStream } from "@effect/platform-node"
import { RpcSerialization, RpcServer } from "@effect/rpc"
import { Deferred, Effect, Layer, Logger } from "effect"
import { registerTools, OUTPUT_SCHEMAS, resultOf } from "../../mcp/Register.js"
import { withOutputSchemas } from "../../mcp/Serialization.js"
import { VERSION } from "../../contract/Version.js"
import { authedClient } from "../Session.js"
import type { Handler } from "../Spec.js"
import type * as S from "../Specs.js"

export const mcp: Handler<typeof S.mcp> = () =>
  Effect.gen(function*() {
    const { credential, target } = yield* authedClient
    const tools = Layer.effectDiscard(registerTools((_spec, req) =>
      Effect.tryPromise(async () => {
        const headers: Record<string, string> = { authorization: `Bearer ${credential.token}`, accept: "application/json" }
        if (req.body !== undefined) headers["content-type"] = "application/json"
        if (req.idempotencyKey !== undefined) headers["idempotency-key"] = req.idempotencyKey
        const res = await fetch(`${target.origin}${req.url}`, { method: req.method, headers, ...(req.body !== undefined ? { body: req.body } : {}) })
        return resultOf(res.status, await res.text())
      })
    ))
    const server = tools.pipe(
      Layer.provide(McpServer.layer({ name: "mailroom", version: VERSION })),
      Layer.provide(RpcServer.layerProtocolStdio({ stdin: NodeStream.stdin, stdout: NodeSink.stdout })),
      Layer.provide(Layer.succeed(RpcSerialization.RpcSerialization, withOutputSchemas(RpcSerialization.ndJsonRpc(), OUTPUT_SCHEMAS))),
      // stdout carries the protocol: logs go to stderr.
      Layer.provide(Logger.replace(Logger.defaultLogger, Logger.prettyLogger({ stderr: true, colors: false })))
    )
    const closed = yield* Deferred.make<void>()
    process.stdin.once("end", () => Deferred.unsafeDone(closed, Effect.void))
    yield* Effect.raceFirst(Layer.launch(server), Deferred.await(closed))
  })
