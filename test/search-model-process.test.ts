/**
 * The built-in embedding model in its own process: the service's RSS does not hold it, a burst of
 * queries is answered in order from one batch, a killed process is started again after its delay
 * (requests meanwhile fail at once, not hang), and the embedding backlog, durable in the database,
 * drains across a kill with semantic search working afterwards.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { readdirSync, readFileSync } from "node:fs"
import nodemailer from "nodemailer"
import { Provisioning } from "../src/identity/Provisioning.js"
import { startModelHost } from "../src/search/ModelProcess.js"
import { TestServer, testService } from "./support/harness.js"
import { call } from "./support/http.js"

/** Child processes of this process (any thread) running the model's entry. */
const modelProcesses = (): Array<number> =>
  readdirSync(`/proc/${process.pid}/task`).flatMap((tid) => {
    try {
      return readFileSync(`/proc/${process.pid}/task/${tid}/children`, "utf8").split(" ").filter((p) => p.length > 0).map(Number)
    } catch {
      return []
    }
  }).filter((pid) => {
    try {
      return readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("ModelWorker.cjs")
    } catch {
      return false
    }
  })

const rssKb = (pid: number) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? 0)

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))
const dot = (a: Float32Array, b: Float32Array) => a.reduce((s, x, i) => s + x * b[i]!, 0)

describe("the model process", () => {
  it("answers a burst of queries in order, and is started again after a kill", async () => {
    const lines: Array<string> = []
    const host = startModelHost({ log: (_, m) => lines.push(m), firstDelayMs: 300 })
    try {
      const [single] = await host.embed(["invoice overdue"], "query").promise
      const pid = host.pid()!
      expect(pid).not.toBe(process.pid)
      // The model's memory is the model process's own.
      expect(rssKb(pid)).toBeGreaterThan(100 * 1024)

      const texts = ["meeting agenda tomorrow", "invoice overdue", "flight hotel booking", "server outage rollback"]
      const burst = await Promise.all([
        host.embed(texts.slice(0, 1), "query").promise,
        host.embed(texts.slice(1, 3), "query").promise,
        host.embed(texts.slice(3), "backlog").promise
      ])
      expect(burst.map((v) => v.length)).toEqual([1, 2, 1])
      // The second request's first text is the one embedded alone before: same vector, in its place.
      expect(dot(burst[1]![0]!, single!)).toBeCloseTo(1, 4)
      expect(dot(burst[0]![0]!, single!)).toBeLessThan(0.9)

      process.kill(pid, "SIGKILL")
      for (let i = 0; i < 100 && host.pid() === pid; i++) await sleep(10)
      // Until it is back, a request fails at once rather than waiting.
      await expect(host.embed(["anything"], "query").promise).rejects.toThrow(/restarting/)
      expect(lines.join("\n")).toMatch(/exited with signal SIGKILL .*starting it again in 300 ms/)
      for (let i = 0; i < 300 && host.pid() === undefined; i++) await sleep(10)
      const again = host.pid()
      expect(again).toBeDefined()
      expect(again).not.toBe(pid)
      const [after] = await host.embed(["invoice overdue"], "query").promise
      expect(dot(after!, single!)).toBeCloseTo(1, 4)
    } finally {
      await host.close()
    }
    expect(host.pid()).toBeUndefined()
  }, 120_000)
})

const Env = Provisioning.Default.pipe(
  Layer.provideMerge(testService({ DNS_SERVER: "127.0.0.1:9", SEARCH_TIMEOUT: "20s" }, {
    embeddingBacklog: { pollMs: 50, batch: 8, maxRetryDelayMs: 300, dutyCycle: 1, busyAbove: 1 }
  }))
)

const pending = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql<{ pending: number; done: number }>`
    SELECT (SELECT count(*) FROM search_backlog)::int AS pending, (SELECT count(*) FROM search_embeddings)::int AS done`).pipe(Effect.map((r) => r[0]!), Effect.orDie)

const until = <A>(what: string, check: Effect.Effect<A, never, SqlClient.SqlClient>, ok: (a: A) => boolean, ms = 150_000) =>
  Effect.gen(function*() {
    const end = Date.now() + ms
    while (Date.now() < end) {
      const a = yield* check
      if (ok(a)) return a
      yield* Effect.sleep("20 millis")
    }
    throw new Error(`timed out waiting for ${what}`)
  })

layer(Env, { timeout: 240_000, excludeTestServices: true })("the service with the model in its own process", (it) => {
  it.effect("a killed model process is started again and the backlog drains; semantic search works after", () =>
    Effect.gen(function*() {
      const p = yield* Provisioning
      const org = yield* p.createOrganization({ name: "Model process", plan: "developer" })
      const key = yield* p.issueApiKey(org.id)
      const server = yield* TestServer
      yield* Effect.promise(async () => {
        const transport = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
        try {
          await transport.sendMail({ from: "a@example.com", to: org.managedInboxAddress, subject: "Quarterly budget review", text: "revenue forecast and expenses spreadsheet" })
        } finally {
          transport.close()
        }
      })
      const sql = yield* SqlClient.SqlClient
      yield* sql`WITH docs AS (INSERT INTO search_documents (id, org_id, kind, subject, body)
                 SELECT gen_random_uuid(), ${org.id}::uuid, 'received', 'Filler ' || g, 'a note about lunch and the weather, number ' || g
                   FROM generate_series(1, 80) g RETURNING id)
                 INSERT INTO search_backlog (id) SELECT id FROM docs`
      // Part-way: some embedded, some not. Then the model process is killed.
      yield* until("a first batch", pending, (c) => c.done >= 8)
      const before = modelProcesses()
      expect(before.length).toBe(1)
      process.kill(before[0]!, "SIGKILL")
      const stalled = yield* pending
      expect(stalled.pending).toBeGreaterThan(0)

      yield* until("the backlog to drain", pending, (c) => c.pending === 0)
      const after = modelProcesses()
      expect(after.length).toBe(1)
      expect(after[0]).not.toBe(before[0])

      const r = yield* call("GET", `/v1/search?${new URLSearchParams({ q: "finance numbers for the quarter", mode: "semantic" })}`, { token: key.apiKey })
      expect(r.status).toBe(200)
      expect(r.body.data.results[0].subject).toBe("Quarterly budget review")
    }))
})
