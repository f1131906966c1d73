/**
 * Input that used to reach SQL or the error formatter and come back as a 500, and refusals that
 * say what to do: U+0000 anywhere, dates outside PostgreSQL's range (filters and cursors), very deep
 * JSON, a JSON body without `Content-Type: application/json` (415), a known path with the wrong
 * method (405 + Allow), `GET /`, and the webhook URL refusal that names WEBHOOK_ALLOW_PRIVATE_URLS.
 */
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { Provisioning } from "../src/identity/Provisioning.js"
import { TestServer, testService } from "./support/harness.js"
import { call, fetchReply, type Reply } from "./support/http.js"

const Env = Provisioning.Default.pipe(
  Layer.provideMerge(testService({ DNS_SERVER: "127.0.0.1:9", WEBHOOK_ALLOW_PRIVATE_URLS: "false" }))
)

const apiKey = Effect.gen(function*() {
  const p = yield* Provisioning
  const org = yield* p.createOrganization({ name: "Screen", plan: "pro" })
  return (yield* p.issueApiKey(org.id)).apiKey
})

const expectInvalid = (reply: Reply, message: string) => {
  expect(reply.status, reply.text).toBe(400)
  expect(reply.body.success).toBe(false)
  expect(reply.body.error.code).toBe("validation_error")
  expect(reply.body.error.message).toBe(message)
}

const NUL = "must not contain NUL characters"

const cursorAt = (iso: string) =>
  Buffer.from(JSON.stringify([iso, "00000000-0000-4000-8000-000000000000"]), "utf8").toString("base64url")

/** A raw request with the method, body and headers given, nothing added. */
const send = (method: string, path: string, init: { body?: string; headers?: Record<string, string> } = {}) =>
  Effect.flatMap(TestServer, (server) =>
    Effect.promise(async () => {
      const res = await fetch(`${server.baseUrl}${path}`, {
        method,
        headers: init.headers ?? {},
        ...(init.body !== undefined ? { body: init.body } : {}),
        redirect: "manual"
      })
      const text = await res.text()
      let body: unknown
      try {
        body = JSON.parse(text)
      } catch {
        body = undefined
      }
      return { status: res.status, headers: res.headers, text, body } as Reply
    }))

layer(Env, { timeout: 120_000, excludeTestServices: true })("input screen", (it) => {
  describe("NUL characters", () => {
    it.effect("in JSON fields, nested metadata and keys answer 400 naming the field", () =>
      Effect.gen(function*() {
        expectInvalid(
          yield* call("POST", "/v1/agent/accounts", { body: { terms_accepted: true, device_name: "a\u0000b" } }),
          `device_name: ${NUL}`
        )
        expectInvalid(
          yield* call("POST", "/v1/cli/login/start", { body: { metadata: { host: ["ok", "x\u0000"] } } }),
          `metadata.host[1]: ${NUL}`
        )
        expectInvalid(
          yield* call("POST", "/v1/cli/login/start", { body: { metadata: { "k\u0000": "v" } } }),
          `metadata: ${NUL}`
        )
        expectInvalid(
          yield* call("POST", "/v1/agent/signup/start", { body: { email: "a\u0000@example.com", terms_accepted: true } }),
          `email: ${NUL}`
        )
        const token = yield* apiKey
        expectInvalid(
          yield* call("POST", "/v1/endpoints", { token, body: { url: "https://example.com/\u0000" } }),
          `url: ${NUL}`
        )
        // An escaped backslash followed by "u0000" is not a NUL: it goes on to the field's own checks.
        const notNul = yield* call("POST", "/v1/agent/accounts", { raw: '{"terms_accepted":true,"device_name":"a\\\\u0000"}' })
        expect(notNul.status, notNul.text).toBe(200)
        expect(notNul.body.data.api_key).toMatch(/^mr_live_/)
      }))

    it.effect("in query filters and path parameters answer 400 naming the parameter", () =>
      Effect.gen(function*() {
        const token = yield* apiKey
        for (const filter of ["recipient", "sender", "event_type", "cursor"]) {
          expectInvalid(yield* call("GET", `/v1/emails?${filter}=a%00b`, { token }), `${filter}: ${NUL}`)
        }
        expectInvalid(yield* call("GET", "/v1/webhooks/deliveries?status=%00", { token }), `status: ${NUL}`)
        expectInvalid(yield* call("GET", "/v1/emails/%00", { token }), `id: ${NUL}`)
        expectInvalid(yield* call("DELETE", "/v1/domains/x%00y/", { token }), `id: ${NUL}`)
        expectInvalid(yield* call("POST", "/v1/domains/x%00y/verify", { token }), `id: ${NUL}`)
        // Without a credential too: the screen runs before authentication would look the value up.
        expectInvalid(yield* call("GET", "/v1/emails?sender=%00"), `sender: ${NUL}`)
      }))

    it.effect("in /device form posts and query answer 400, never 500", () =>
      Effect.gen(function*() {
        const form = { "content-type": "application/x-www-form-urlencoded" }
        for (const [path, body, field] of [
          ["/device/send-code", "user_code=BCDF-GHJK&email=a%00b%40example.com&csrf=x", "email"],
          ["/device/sign-in", "user_code=BCDF-GHJK&code=12%0034&csrf=x", "code"],
          ["/device/decision", "user_code=BC%00DF&decision=approve&csrf=x", "user_code"]
        ] as const) {
          expectInvalid(yield* send("POST", path, { body, headers: form }), `${field}: ${NUL}`)
        }
        expectInvalid(yield* send("GET", "/device?user_code=BCDF%00GHJK"), `user_code: ${NUL}`)
      }))
  })

  describe("dates outside PostgreSQL's range", () => {
    it.effect("in date_from/date_to filters answer 400; in-range extremes still work", () =>
      Effect.gen(function*() {
        const token = yield* apiKey
        for (const list of ["/v1/emails", "/v1/webhooks/deliveries"]) {
          for (const param of ["date_from", "date_to"]) {
            expectInvalid(
              yield* call("GET", `${list}?${param}=-010000-01-01T00:00:00Z`, { token }),
              `${param}: must be a date-time from year 4713 BC onward`
            )
            for (const ok of ["-004000-01-01T00:00:00Z", "+275760-09-13T00:00:00Z", "0001-01-01T00:00:00Z"]) {
              const reply = yield* call("GET", `${list}?${param}=${encodeURIComponent(ok)}`, { token })
              expect(reply.status, `${list} ${param}=${ok}: ${reply.text}`).toBe(200)
            }
          }
        }
      }))

    it.effect("inside a cursor answer 400 on every cursor-paged list", () =>
      Effect.gen(function*() {
        const token = yield* apiKey
        for (const list of ["/v1/emails", "/v1/webhooks/deliveries", "/v1/domains", "/v1/endpoints", "/v1/filters", "/v1/routes"]) {
          expectInvalid(
            yield* call("GET", `${list}?cursor=${cursorAt("-010000-01-01T00:00:00.000Z")}`, { token }),
            "cursor: not a cursor returned by this list"
          )
          const ok = yield* call("GET", `${list}?cursor=${cursorAt("-004000-01-01T00:00:00.000Z")}`, { token })
          expect(ok.status, `${list}: ${ok.text}`).toBe(200)
        }
      }))
  })

  describe("cursors that decode to what no key can be", () => {
    it.effect("a NUL or a lone surrogate inside a memories cursor answers 400", () =>
      Effect.gen(function*() {
        const token = yield* apiKey
        for (const position of ["a\u0000b", "\ud800"]) {
          const cursor = Buffer.from(JSON.stringify(["k", position]), "utf8").toString("base64url")
          expectInvalid(yield* call("GET", `/v1/memories?cursor=${cursor}`, { token }), "cursor: not a cursor returned by this list")
        }
        const fine = Buffer.from(JSON.stringify(["k", "a"]), "utf8").toString("base64url")
        expect((yield* call("GET", `/v1/memories?cursor=${fine}`, { token })).status).toBe(200)
      }))
  })

  describe("deep JSON", () => {
    it.effect("100,000 levels answer 400 (no stack overflow); 64 levels reach the field checks", () =>
      Effect.gen(function*() {
        const token = yield* apiKey
        const deep = "[".repeat(100_000) + "]".repeat(100_000)
        for (const [path, raw] of [
          ["/v1/endpoints", deep],
          ["/v1/endpoints", `{"url":"https://example.com","rules":${deep}}`],
          ["/v1/cli/login/start", `{"metadata":${"{\"a\":".repeat(100_000)}1${"}".repeat(100_000)}}`]
        ] as const) {
          expectInvalid(yield* call("POST", path, { token, raw }), "body: nested deeper than 64 levels of arrays and objects")
        }
        // Brackets inside strings are not nesting.
        const inString = yield* call("POST", "/v1/agent/accounts", {
          body: { terms_accepted: true, device_name: "[".repeat(100) }
        })
        expect(inString.status).not.toBe(500)
        expect(inString.body.error?.message ?? "").not.toContain("nested deeper")
        const sixtyFour = yield* call("POST", "/v1/endpoints", { token, raw: "[".repeat(64) + "]".repeat(64) })
        expect(sixtyFour.status).toBe(400)
        expect(sixtyFour.body.error.message).not.toContain("nested deeper")
      }))
  })

  describe("415 unsupported_media_type", () => {
    it.effect("a JSON body without Content-Type: application/json names the header", () =>
      Effect.gen(function*() {
        const token = yield* apiKey
        const body = JSON.stringify({ url: "https://93.184.216.34/hook" })
        for (const contentType of ["application/x-www-form-urlencoded", "text/plain", undefined]) {
          const reply = yield* send("POST", "/v1/endpoints", {
            body,
            headers: { authorization: `Bearer ${token}`, ...(contentType !== undefined ? { "content-type": contentType } : {}) }
          })
          expect(reply.status, reply.text).toBe(415)
          expect(reply.body.error.code).toBe("unsupported_media_type")
          expect(reply.body.error.message).toContain("Content-Type: application/json")
          expect(reply.body.error.details.expected).toBe("application/json")
        }
        const patched = yield* send("PATCH", "/v1/account", {
          body: "{}",
          headers: { authorization: `Bearer ${token}`, "content-type": "text/plain" }
        })
        expect(patched.status).toBe(415)
        // A body-optional operation: empty without a Content-Type is fine, a form body is not.
        const empty = yield* send("POST", "/v1/cli/login/start")
        expect(empty.status, empty.text).toBe(201)
        const formBody = yield* send("POST", "/v1/cli/login/start", { body: "device_name=x" })
        expect(formBody.status).toBe(415)
        // Parameters and +json are JSON.
        for (const contentType of ["application/json; charset=utf-8", "Application/JSON", "application/merge-patch+json"]) {
          const ok = yield* send("POST", "/v1/cli/login/start", { body: "{}", headers: { "content-type": contentType } })
          expect(ok.status, `${contentType}: ${ok.text}`).toBe(201)
        }
      }))

    it.effect("is not replayed under its Idempotency-Key: the corrected retry runs", () =>
      Effect.gen(function*() {
        const token = yield* apiKey
        const body = JSON.stringify({ url: "https://93.184.216.34/retry" })
        const headers = { authorization: `Bearer ${token}`, "idempotency-key": "fix-the-header" }
        const first = yield* send("POST", "/v1/endpoints", { body, headers: { ...headers, "content-type": "text/plain" } })
        expect(first.status).toBe(415)
        const retry = yield* send("POST", "/v1/endpoints", { body, headers: { ...headers, "content-type": "application/json" } })
        expect(retry.status, retry.text).toBe(201)
        expect(retry.headers.get("idempotent-replayed")).toBeNull()
      }))
  })

  describe("405 method_not_allowed", () => {
    it.effect("a known path with another method lists the path's methods in Allow", () =>
      Effect.gen(function*() {
        const token = yield* apiKey
        const id = "00000000-0000-4000-8000-000000000000"
        for (const [method, path, allow] of [
          ["DELETE", "/v1/health", "GET"],
          ["POST", "/v1/health", "GET"],
          ["PUT", `/v1/emails/${id}`, "DELETE, GET, PATCH"],
          ["PATCH", "/v1/emails", "GET"],
          ["GET", "/v1/cli/login/start", "POST"],
          ["DELETE", "/v1/endpoints", "GET, POST"]
        ] as const) {
          const reply = yield* send(method, path, { headers: { authorization: `Bearer ${token}` } })
          expect(reply.status, `${method} ${path}: ${reply.text}`).toBe(405)
          expect(reply.headers.get("allow")).toBe(allow)
          expect(reply.body.error.code).toBe("method_not_allowed")
          expect(reply.body.error.details.allow).toEqual(allow.split(", "))
          expect(reply.body.error.message).toContain(allow)
        }
        const unknown = yield* send("GET", "/v1/no-such-thing", { headers: { authorization: `Bearer ${token}` } })
        expect(unknown.status).toBe(404)
        expect(unknown.body.error.code).toBe("not_found")
      }))
  })

  describe("GET /", () => {
    it.effect("points at the reference, discovery, auth and OpenAPI documents, each reachable", () =>
      Effect.gen(function*() {
        const server = yield* TestServer
        const reply = yield* send("GET", "/")
        expect(reply.status).toBe(200)
        expect(reply.headers.get("content-type")).toContain("application/json")
        expect(reply.body).toMatchObject({
          docs: `${server.baseUrl}/docs`,
          discovery: `${server.baseUrl}/v1/discovery`,
          auth: `${server.baseUrl}/auth.md`,
          openapi: `${server.baseUrl}/v1/openapi.json`
        })
        for (const url of [reply.body.docs, reply.body.discovery, reply.body.auth, reply.body.openapi] as Array<string>) {
          const linked = yield* Effect.promise(() => fetchReply(url, "GET"))
          expect(linked.status, url).toBe(200)
        }
      }))
  })

  describe("webhook URL refusals", () => {
    it.effect("http and private URLs name WEBHOOK_ALLOW_PRIVATE_URLS in the message and details.hint", () =>
      Effect.gen(function*() {
        const token = yield* apiKey
        for (const [url, reason] of [
          ["http://127.0.0.1:8765/hook", "must use https (got http)"],
          ["https://10.1.2.3/hook", "must be publicly reachable (10.1.2.3 is a private address)"],
          ["https://localhost/hook", "must be publicly reachable (localhost resolves to a loopback address)"]
        ] as const) {
          const reply = yield* call("POST", "/v1/endpoints", { token, body: { url } })
          expect(reply.status, reply.text).toBe(400)
          expect(reply.body.error.code).toBe("validation_error")
          expect(reply.body.error.message).toMatch(new RegExp(`^url: ${reason.replace(/[()]/g, "\\$&")}; `))
          expect(reply.body.error.message).toContain("WEBHOOK_ALLOW_PRIVATE_URLS=true")
          expect(reply.body.error.details.hint).toContain("WEBHOOK_ALLOW_PRIVATE_URLS=true")
          expect(reply.body.error.details.issues).toEqual([{ field: "url", reason }])
        }
        // Not a private-URL matter: no hint.
        const ftp = yield* call("POST", "/v1/endpoints", { token, body: { url: "ftp://example.com/hook" } })
        expect(ftp.body.error.message).toBe("url: must use https (got ftp)")
        expect(ftp.body.error.details.hint).toBeUndefined()
      }))
  })
})
