/**
 * The embedding backlog yields to a busy machine: while the machine's cores are nearly all busy it
 * claims a batch only every `maxWaitMs` (so it is never starved for good), and once the machine is
 * idle again it drains at once. The machine's CPU times come from the test, so "busy" is exact.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import { createServer } from "node:http"
import nodemailer from "nodemailer"
import { Provisioning } from "../src/identity/Provisioning.js"
import { type CpuTimes, idleShare } from "../src/search/Backlog.js"
import { TestServer, testService } from "./support/harness.js"
import { eventually } from "./support/hooks.js"

const MAX_WAIT_MS = 2_000

/** A machine whose idle share is what the test says: each look advances 100 ms of CPU time. */
const machine = { busy: true, idle: 0, total: 0 }
const cpuTimes = (): CpuTimes => {
  machine.total += 100
  if (!machine.busy) machine.idle += 100
  return { idle: machine.idle, total: machine.total }
}

interface StubState {
  readonly requests: Array<{ at: number; texts: number }>
  url: string
}
class Stub extends Context.Tag("test/BacklogYieldStub")<Stub, StubState>() {}

const startStub = Effect.acquireRelease(
  Effect.async<StubState & { close: () => void }>((resume) => {
    const state: StubState & { close: () => void } = { requests: [], url: "", close: () => server.close() }
    const server = createServer((req, res) => {
      const chunks: Array<Buffer> = []
      req.on("data", (c: Buffer) => chunks.push(c))
      req.on("end", () => {
        const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as { input: Array<string> }
        state.requests.push({ at: Date.now(), texts: body.input.length })
        res.writeHead(200, { "content-type": "application/json" })
        res.end(JSON.stringify({ object: "list", data: body.input.map((_, index) => ({ object: "embedding", index, embedding: [1, 0, 0, 0] })) }))
      })
    })
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      state.url = `http://127.0.0.1:${typeof address === "object" && address !== null ? address.port : 0}/v1`
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
      EMBEDDINGS_MODEL: "stub-embed-4"
    }, {
      embeddingBacklog: { pollMs: 50, batch: 2, dutyCycle: 1, busyAbove: 1, idleBelow: 0.1, maxWaitMs: MAX_WAIT_MS, cpuTimes }
    }).pipe(Layer.merge(Layer.succeed(Stub, stub)))
  })))
)

const pending = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql<{ n: number }>`SELECT count(*)::int AS n FROM search_backlog`).pipe(
    Effect.map((r) => r[0]!.n),
    Effect.orDie
  )

/** Polls a database check (`eventually` polls plain values). */
const until = <A, R>(what: string, check: Effect.Effect<A, never, R>, ok: (a: A) => boolean, ms = 20_000) =>
  Effect.gen(function*() {
    const end = Date.now() + ms
    while (Date.now() < end) {
      const a = yield* check
      if (ok(a)) return a
      yield* Effect.sleep("25 millis")
    }
    throw new Error(`timed out waiting for ${what}`)
  })

layer(Env, { timeout: 60_000, excludeTestServices: true })("the embedding backlog on a busy machine", (it) => {
  describe("idle share", () => {
    it("is the idle part of the CPU time between two readings", () => {
      expect(idleShare({ idle: 100, total: 400 }, { idle: 150, total: 600 })).toBe(0.25)
      expect(idleShare({ idle: 100, total: 400 }, { idle: 100, total: 400 })).toBe(1)
    })
  })

  it.effect("claims a batch only every maxWaitMs while the machine is busy, and drains once it is idle", () =>
    Effect.gen(function*() {
      const stub = yield* Stub
      const server = yield* TestServer
      const org = yield* Effect.flatMap(Provisioning, (p) => p.createOrganization({ name: "Busy", plan: "developer" }))
      yield* Effect.promise(async () => {
        const transport = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
        try {
          for (let i = 0; i < 8; i++) {
            await transport.sendMail({ from: "a@example.com", to: org.managedInboxAddress, subject: `busy ${i}`, text: `message number ${i}` })
          }
        } finally {
          transport.close()
        }
      })
      // Every message has its document (a batch may already have been claimed meanwhile).
      const sql = yield* SqlClient.SqlClient
      expect((yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM search_documents`.pipe(Effect.orDie))[0]!.n).toBe(8)

      // Busy: two batches, at least maxWaitMs apart, and nothing in between.
      yield* eventually(() => stub.requests.length >= 2, 3 * MAX_WAIT_MS + 5_000, "two batches while busy")
      const [first, second] = stub.requests
      // Any two batches while busy are maxWaitMs apart (the slack is for the embedder's own answer
      // time on a loaded machine; without the wait they would be a 50 ms poll apart).
      expect(second!.at - first!.at).toBeGreaterThanOrEqual(MAX_WAIT_MS - 500)
      expect(stub.requests.length).toBe(2)
      // (A batch claimed while the messages were still arriving may have held fewer than two.)
      const left = 8 - first!.texts - second!.texts
      expect(left).toBeGreaterThanOrEqual(4)
      expect(yield* until("the second batch stored", pending, (n) => n === left, 2_000)).toBe(left)

      // Idle: the rest at once, batch after batch.
      machine.busy = false
      const idleFrom = Date.now()
      yield* until("the backlog drained", pending, (n) => n === 0, 5_000)
      expect(Date.now() - idleFrom).toBeLessThan(MAX_WAIT_MS)
      const rest = stub.requests.slice(2)
      expect(rest.reduce((n, r) => n + r.texts, 0)).toBe(left)
      expect(rest.length).toBeGreaterThanOrEqual(2)
    }))
})
