/**
 * The HTTP embedder against a loopback OpenAI-compatible service: what it sends, the backlog
 * embedding through it, its failures (mail still accepted and found lexically, the backlog retrying
 * and catching up when it returns) and its slowness (504 search_timeout on time).
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import { createHash } from "node:crypto"
import { createServer } from "node:http"
import nodemailer, { type SendMailOptions } from "nodemailer"
import { Provisioning } from "../src/identity/Provisioning.js"
import { TestServer, testService } from "./support/harness.js"
import { call } from "./support/http.js"

const DIMS = 64

/** Feature hashing of words: texts sharing words get close vectors (enough to check ranking). */
const hashEmbed = (text: string) => {
  const v = new Array<number>(DIMS).fill(0)
  for (const w of text.toLowerCase().split(/[^a-z0-9]+/).filter((x) => x.length > 2)) {
    const h = createHash("sha256").update(w).digest()
    v[h[0]! % DIMS]! += h[1]! % 2 === 0 ? 1 : -1
  }
  return v
}

interface StubState {
  mode: "ok" | "fail" | "malformed"
  delayMs: number
  readonly requests: Array<{ at: number; authorization: string | undefined; body: { model: string; input: Array<string>; encoding_format: string } }>
  readonly url: string
}

class Stub extends Context.Tag("test/EmbeddingsStub")<Stub, StubState>() {}

const startStub = Effect.acquireRelease(
  Effect.async<StubState & { close: () => void }>((resume) => {
    const server = createServer((req, res) => {
      const chunks: Array<Buffer> = []
      req.on("data", (c: Buffer) => chunks.push(c))
      req.on("end", () => {
        const body = JSON.parse(Buffer.concat(chunks).toString("utf8"))
        state.requests.push({ at: Date.now(), authorization: req.headers.authorization, body })
        const answer = () => {
          if (req.url !== "/v1/embeddings" || state.mode === "fail") {
            res.writeHead(500, { "content-type": "application/json" })
            return res.end(JSON.stringify({ error: { message: "model overloaded" } }))
          }
          res.writeHead(200, { "content-type": "application/json" })
          const data = (body.input as Array<string>).map((t, index) => ({
            object: "embedding",
            index,
            embedding: state.mode === "malformed" ? "not a vector" : hashEmbed(t)
          }))
          // Out of order on purpose: clients must sort by index.
          res.end(JSON.stringify({ object: "list", data: data.reverse(), model: body.model }))
        }
        if (state.delayMs > 0) setTimeout(answer, state.delayMs)
        else answer()
      })
    })
    const state: StubState & { close: () => void } = {
      mode: "ok",
      delayMs: 0,
      requests: [],
      url: "",
      close: () => server.close()
    }
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      ;(state as { url: string }).url = `http://127.0.0.1:${port}/v1`
      resume(Effect.succeed(state))
    })
  }),
  (s) => Effect.sync(() => s.close())
)

const Env = Provisioning.Default.pipe(
  Layer.provideMerge(Layer.unwrapScoped(Effect.gen(function*() {
    const stub = yield* startStub
    return testService({
      DNS_SERVER: "127.0.0.1:9",
      EMBEDDINGS_URL: stub.url,
      EMBEDDINGS_API_KEY: "sk-test-123",
      EMBEDDINGS_MODEL: "stub-embed-64",
      SEARCH_TIMEOUT: "600ms"
    }, { embeddingBacklog: { pollMs: 50, maxRetryDelayMs: 200 } }).pipe(Layer.merge(Layer.succeed(Stub, stub)))
  })))
)

const send = (message: SendMailOptions) =>
  Effect.flatMap(TestServer, (server) =>
    Effect.promise(async () => {
      const transport = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
      try {
        return (await transport.sendMail(message)).response
      } finally {
        transport.close()
      }
    }))

const pending = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql<{ n: number; attempts: number; error: string | null }>`
    SELECT count(*)::int AS n, coalesce(max(attempts), 0) AS attempts, max(error) AS error
      FROM search_backlog`).pipe(Effect.map((r) => r[0]!), Effect.orDie)

const until = <A, R>(what: string, check: Effect.Effect<A, never, R>, ok: (a: A) => boolean) =>
  Effect.gen(function*() {
    for (let i = 0; i < 400; i++) {
      const a = yield* check
      if (ok(a)) return a
      yield* Effect.sleep("25 millis")
    }
    throw new Error(`timed out waiting for ${what}`)
  })

const newOrg = Effect.gen(function*() {
  const p = yield* Provisioning
  const org = yield* p.createOrganization({ name: "Embedder", plan: "developer" })
  const key = yield* p.issueApiKey(org.id)
  return { id: org.id, apiKey: key.apiKey, address: org.managedInboxAddress }
})

const search = (token: string, params: Record<string, string>) =>
  call("GET", `/v1/search?${new URLSearchParams(params)}`, { token })

layer(Env, { timeout: 120_000, excludeTestServices: true })("search with the HTTP embedder", (it) => {
  describe("an OpenAI-compatible service", () => {
    it.effect("embeds the backlog and the query through it, with the configured model and key", () =>
      Effect.gen(function*() {
        const stub = yield* Stub
        const org = yield* newOrg
        yield* send({ from: "a@example.com", to: org.address, subject: "Quarterly budget review", text: "numbers spreadsheet finance" })
        yield* send({ from: "b@example.com", to: org.address, subject: "Holiday photos", text: "beach sunset mountains" })
        yield* until("the backlog", pending, (p) => p.n === 0)
        const first = stub.requests[0]!
        expect(first.authorization).toBe("Bearer sk-test-123")
        expect(first.body.model).toBe("stub-embed-64")
        expect(first.body.encoding_format).toBe("float")
        const sql = yield* SqlClient.SqlClient
        const dims = yield* sql<{ dims: number; model: string }>`SELECT DISTINCT dims, model FROM search_embeddings`
        expect(dims).toEqual([{ dims: DIMS, model: "stub-embed-64" }])

        const r = yield* search(org.apiKey, { q: "finance spreadsheet", mode: "semantic" })
        expect(r.status).toBe(200)
        expect(r.body.meta).toMatchObject({ mode: "semantic", embedding_model: "stub-embed-64" })
        expect(r.body.data.results[0].subject).toBe("Quarterly budget review")
        expect(stub.requests.at(-1)!.body.input).toEqual(["finance spreadsheet"])
      }))

    it.effect("when it fails, mail is still accepted and found lexically; the backlog retries and catches up when it returns", () =>
      Effect.gen(function*() {
        const stub = yield* Stub
        const org = yield* newOrg
        stub.mode = "fail"
        const response = yield* send({ from: "c@example.com", to: org.address, subject: "Server migration plan", text: "cutover weekend checklist" })
        expect(response).toMatch(/^250 /)
        const failing = yield* until("retries", pending, (p) => p.n === 1 && p.attempts >= 3)
        expect(failing.error).toContain("500")

        const hybrid = yield* search(org.apiKey, { q: "migration checklist" })
        expect(hybrid.status).toBe(200)
        expect(hybrid.body.data.results.map((h: { subject: string }) => h.subject)).toEqual(["Server migration plan"])
        expect(hybrid.body.data.results[0].matched).toEqual(["lexical"])
        const semantic = yield* search(org.apiKey, { q: "migration checklist", mode: "semantic" })
        expect(semantic.status).toBe(503)
        expect(semantic.body.error.code).toBe("service_unavailable")

        stub.mode = "malformed"
        const malformed = yield* search(org.apiKey, { q: "migration checklist", mode: "semantic" })
        expect(malformed.status).toBe(503)
        expect(malformed.body.error.message).toContain("malformed")

        stub.mode = "ok"
        yield* until("the backlog to catch up", pending, (p) => p.n === 0)
        const later = yield* search(org.apiKey, { q: "migration checklist" })
        expect(later.body.data.results[0].matched).toEqual(["lexical", "semantic"])
      }))

    it.effect("the backlog is background work: after each batch it rests as long as the batch took", () =>
      Effect.gen(function*() {
        const stub = yield* Stub
        const org = yield* newOrg
        const sql = yield* SqlClient.SqlClient
        stub.delayMs = 300
        const from = stub.requests.length
        // 64 documents pending at once: four full batches of 16, each taking the model 300 ms.
        yield* sql`WITH docs AS (INSERT INTO search_documents (id, org_id, kind, subject, body)
                   SELECT gen_random_uuid(), ${org.id}::uuid, 'received', 'Paced ' || g, 'document number ' || g
                     FROM generate_series(1, 64) g RETURNING id)
                   INSERT INTO search_backlog (id) SELECT id FROM docs`
        yield* until("the backlog", pending, (p) => p.n === 0)
        stub.delayMs = 0
        const batches = stub.requests.slice(from).filter((r) => r.body.input.length === 16)
        expect(batches.length).toBe(4)
        // Flat out, the next batch would start ~300 ms (the call) after the last; resting doubles it.
        for (let i = 1; i < batches.length; i++) expect(batches[i]!.at - batches[i - 1]!.at).toBeGreaterThanOrEqual(570)
      }).pipe(Effect.orDie))

    it.effect("when it is slow, the search answers 504 search_timeout on time", () =>
      Effect.gen(function*() {
        const stub = yield* Stub
        const org = yield* newOrg
        yield* send({ from: "d@example.com", to: org.address, subject: "Slow day", text: "nothing happens" })
        yield* until("the backlog", pending, (p) => p.n === 0)
        stub.delayMs = 5_000
        for (const mode of ["hybrid", "semantic"]) {
          const started = Date.now()
          const r = yield* search(org.apiKey, { q: "slow day", mode })
          const took = Date.now() - started
          expect(r.status).toBe(504)
          expect(r.body.error.code).toBe("search_timeout")
          expect(r.body.error.details).toMatchObject({ timeout_ms: 600, mode })
          // The budget is 600 ms; the service answered long before the embedder would have.
          expect(took).toBeGreaterThanOrEqual(550)
          expect(took).toBeLessThan(2_500)
        }
        // Lexical search embeds nothing: unaffected.
        const lexical = yield* search(org.apiKey, { q: "slow day", mode: "lexical" })
        expect(lexical.status).toBe(200)
        expect(lexical.body.data.results[0].subject).toBe("Slow day")
        stub.delayMs = 0
      }))
  })
})
