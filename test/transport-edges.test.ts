/**
 * Edges of the transport and of the service's own state, attacked from outside: a body over the
 * limit is answered 413 `payload_too_large` in the envelope on a connection that stays usable; a
 * path segment that is not percent-encoded UTF-8 is 400 `validation_error`; idle keep-alive
 * connections are kept long enough that a stalled client never reuses one being closed; the
 * functions state directory removed under the running service is created again.
 */
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { readdirSync, rmSync } from "node:fs"
import { connect } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Provisioning } from "../src/identity/Provisioning.js"
import { TestServer, testService } from "./support/harness.js"
import { call } from "./support/http.js"

const Env = Provisioning.Default.pipe(Layer.provideMerge(testService({ DNS_SERVER: "127.0.0.1:9" })))

const newOrg = Effect.gen(function*() {
  const p = yield* Provisioning
  const org = yield* p.createOrganization({ name: "Edges", plan: "developer" })
  return (yield* p.issueApiKey(org.id)).apiKey
})

/** Writes raw requests on one connection and collects everything the server sends until `done`. */
const onOneConnection = (port: number, requests: ReadonlyArray<string | Buffer>, done: (text: string) => boolean) =>
  Effect.async<{ text: string; closed: boolean; error: string | undefined }>((resume) => {
    const socket = connect(port, "127.0.0.1")
    let text = ""
    let finished = false
    const end = (closed: boolean, error?: string) => {
      if (finished) return
      finished = true
      socket.destroy()
      resume(Effect.succeed({ text, closed, error }))
    }
    socket.on("data", (d) => {
      text += d.toString("latin1")
      if (done(text)) end(false)
    })
    socket.on("close", () => end(true))
    socket.on("error", (e) => end(true, e.message))
    socket.on("connect", async () => {
      for (const r of requests) {
        if (!socket.write(r)) await new Promise((ok) => socket.once("drain", ok))
      }
    })
  })

layer(Env, { timeout: 120_000, excludeTestServices: true })("transport edges", (it) => {
  describe("bodies over the limit", () => {
    it.effect("2 MiB to a 1 MiB operation: 413 payload_too_large in the envelope, and the connection serves the next request", () =>
      Effect.gen(function*() {
        const server = yield* TestServer
        const token = yield* newOrg
        const body = Buffer.alloc(2 * 1024 * 1024, "x")
        const big = `POST /v1/filters HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${token}\r\n` +
          `content-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n`
        const next = "GET /v1/health HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n"
        const r = yield* onOneConnection(server.port, [big, body, next], (t) => (t.match(/HTTP\/1\.1 /g) ?? []).length >= 2 && t.includes("\"status\":\"ok\""))
        expect(r.error).toBeUndefined()
        expect(r.text).toMatch(/^HTTP\/1\.1 413 /)
        expect(r.text).toContain("\"code\":\"payload_too_large\"")
        expect(r.text).toContain("\"limit_bytes\":1048576")
        // The same connection answered the next request.
        expect(r.text).toMatch(/HTTP\/1\.1 200 [\s\S]*"status":"ok"/)
      }))

    it.effect("2 MiB sent chunked, with no length declared: 413 payload_too_large, the connection serves the next request, nothing stored", () =>
      Effect.gen(function*() {
        const server = yield* TestServer
        const token = yield* newOrg
        const json = Buffer.from(JSON.stringify({ value: "z".repeat(2 * 1024 * 1024) }))
        const chunks: Array<string | Buffer> = [
          `PUT /v1/memories/chunked HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${token}\r\n` +
          `content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n`
        ]
        for (let at = 0; at < json.length; at += 64 * 1024) {
          const part = json.subarray(at, at + 64 * 1024)
          chunks.push(`${part.length.toString(16)}\r\n`, part, "\r\n")
        }
        chunks.push("0\r\n\r\n", "GET /v1/health HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        const r = yield* onOneConnection(server.port, chunks, (t) => (t.match(/HTTP\/1\.1 /g) ?? []).length >= 2 && t.includes("\"status\":\"ok\""))
        // Before, the body was torn down past the limit: the connection was reset and no answer arrived.
        expect(r.error).toBeUndefined()
        expect(r.text).toMatch(/^HTTP\/1\.1 413 /)
        expect(r.text).toContain("\"code\":\"payload_too_large\"")
        expect(r.text).toContain("\"limit_bytes\":1048576")
        expect(r.text).toMatch(/HTTP\/1\.1 200 [\s\S]*"status":"ok"/)
        const stored = yield* call("GET", "/v1/memories/chunked", { token })
        expect(stored.status, stored.text).toBe(404)
        // Within the limit, a chunked body is read whole.
        const small = Buffer.from(JSON.stringify({ value: "s".repeat(10_000) }))
        const ok = yield* onOneConnection(server.port, [
          `PUT /v1/memories/chunked HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${token}\r\n` +
          `content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n`,
          `${small.length.toString(16)}\r\n`, small, "\r\n0\r\n\r\n"
        ], (t) => /\r\n\r\n\{[\s\S]*\}$/.test(t))
        expect(ok.text).toMatch(/^HTTP\/1\.1 20[01] /)
        const read = yield* call("GET", "/v1/memories/chunked", { token })
        expect(read.status, read.text).toBe(200)
        expect(read.body.data.value).toHaveLength(10_000)
      }))

    it.effect("a chunked body streamed on past 64 MiB over the limit: the connection is closed, not drained forever", () =>
      Effect.gen(function*() {
        const server = yield* TestServer
        const token = yield* newOrg
        const mib = Buffer.alloc(1024 * 1024, "w")
        const chunks: Array<string | Buffer> = [
          `PUT /v1/memories/endless HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${token}\r\n` +
          `content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n`
        ]
        for (let i = 0; i < 80; i++) chunks.push(`${mib.length.toString(16)}\r\n`, mib, "\r\n")
        chunks.push("0\r\n\r\n", "GET /v1/health HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        const r = yield* onOneConnection(server.port, chunks, (t) => t.includes("\"status\":\"ok\""))
        // 80 MiB read to the end would have let the next request through on the same connection.
        expect(r.closed).toBe(true)
        expect(r.text).not.toContain("\"status\":\"ok\"")
      }))

    it.effect("through fetch: 413 with the envelope, not a reset", () =>
      Effect.gen(function*() {
        const token = yield* newOrg
        const r = yield* call("POST", "/v1/memories/k", { token, raw: JSON.stringify({ value: "y".repeat(1_200_000) }) })
        expect(r.status, r.text).toBe(413)
        expect(r.body).toMatchObject({ success: false, error: { code: "payload_too_large" } })
      }))
  })

  describe("undecodable paths", () => {
    it.effect("a segment that is not percent-encoded UTF-8 is 400 validation_error, never a 405 that says GET is allowed", () =>
      Effect.gen(function*() {
        const token = yield* newOrg
        for (const path of ["/v1/memories/%FF", "/v1/registries/%FF", "/v1/emails/%C3%28", "/v1/functions/%E0%A4%A"]) {
          const r = yield* call("GET", path, { token })
          expect(r.status, `${path} ${r.text}`).toBe(400)
          expect(r.body.error.code).toBe("validation_error")
          expect(r.body.error.message).toContain("not percent-encoded UTF-8")
        }
      }))
  })

  describe("keep-alive", () => {
    it.effect("idle connections are kept 65 s, and the server says so (a stalled client's next request finds it open)", () =>
      Effect.gen(function*() {
        const r = yield* call("GET", "/v1/health")
        expect(r.headers.get("keep-alive")).toBe("timeout=65")
      }))
  })

  describe("functions state directory", () => {
    it.effect("removed under the running service: deploys and invocations (memory included) work again", () =>
      Effect.gen(function*() {
        const token = yield* newOrg
        const code = `export default { async fetch(req, env) {
          await env.MEMORY.put("seen", JSON.stringify(1));
          return new Response(await env.MEMORY.get("seen"));
        } }`
        const first = yield* call("POST", "/v1/functions", { token, body: { name: "state-1", code } })
        expect(first.status, first.text).toBe(201)
        const mine = readdirSync(tmpdir()).filter((d) => d.startsWith(`mailroom-fn-${process.pid}-`))
        expect(mine.length).toBeGreaterThan(0)
        for (const d of mine) rmSync(join(tmpdir(), d), { recursive: true, force: true })
        const second = yield* call("POST", "/v1/functions", { token, body: { name: "state-2", code } })
        expect(second.status, second.text).toBe(201)
        const ran = yield* call("POST", `/v1/functions/${second.body.data.id}/invoke`, { token, body: {} })
        expect(ran.status, ran.text).toBe(200)
        expect(ran.body.data.status, ran.body.data.error).toBe("ok")
        expect(ran.body.data.response_body).toBe("1")
      }))
  })
})
