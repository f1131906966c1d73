/**
 * The reference of `bench-api`: a bare Effect HttpApi hello-world (one GET endpoint answering a small
 * JSON body through HttpApiBuilder on the Node HTTP server), with none of the service's pipeline,
 * database or logging. `PORT` picks the port.
 */
import { HttpApi, HttpApiBuilder, HttpApiEndpoint, HttpApiGroup, HttpMiddleware } from "@effect/platform"
import { NodeHttpServer, NodeRuntime } from "@effect/platform-node"
import { Effect, Layer, Schema } from "effect"
import { createServer } from "node:http"

const Hello = Schema.Struct({ success: Schema.Boolean, data: Schema.Struct({ status: Schema.String }) })

class HelloApi extends HttpApi.make("hello").add(
  HttpApiGroup.make("hello").add(HttpApiEndpoint.get("hello", "/hello").addSuccess(Hello))
) {}

const HelloLive = HttpApiBuilder.group(HelloApi, "hello", (h) =>
  h.handle("hello", () => Effect.succeed({ success: true, data: { status: "ok" } })))

HttpApiBuilder.serve().pipe(
  // As the service does: the request span's attributes are computed even for a no-op span.
  HttpMiddleware.withTracerDisabledWhen(() => true),
  Layer.provide(HttpApiBuilder.api(HelloApi).pipe(Layer.provide(HelloLive))),
  Layer.provide(NodeHttpServer.layer(createServer, { port: Number(process.env.PORT ?? 3000), host: "127.0.0.1" })),
  Layer.launch,
  NodeRuntime.runMain
)
