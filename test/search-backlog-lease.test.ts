/**
 * The embedding backlog's own table (migration 0196): a search document is written once and only
 * read by the backlog; a batch finishes only the documents it still holds under its lease, so a
 * message whose content is discarded while the model runs is embedded again without its body, and
 * the vector of the discarded body is never stored.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer, Queue } from "effect"
import { randomUUID } from "node:crypto"
import { uuid7 } from "../src/mail/Threading.js"
import { Provisioning } from "../src/identity/Provisioning.js"
import { EmbeddingBacklogLive } from "../src/search/Backlog.js"
import { Embedder, normalise } from "../src/search/Embedder.js"
import { testDatabase } from "./support/harness.js"

const MODEL = "test-model-4"

const Env = Provisioning.Default.pipe(Layer.provideMerge(testDatabase()))

layer(Env, { timeout: 60_000, excludeTestServices: true })("embedding backlog table", (it) => {
  describe("a document pending in search_backlog", () => {
    it.scoped("is embedded without rewriting its document; a discard while the model runs wins over the batch", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const org = yield* (yield* Provisioning).createOrganization({ name: "Backlog", plan: "developer" })
        // The model answers when the test lets it: each call is reported, then waits for a permit.
        const calls = yield* Queue.unbounded<ReadonlyArray<string>>()
        const permits = yield* Queue.unbounded<void>()
        const embedder = Layer.succeed(Embedder, {
          model: MODEL,
          minSimilarity: 0,
          embed: (texts) =>
            Effect.zipRight(Queue.offer(calls, texts), Queue.take(permits)).pipe(
              Effect.as(texts.map(() => normalise([1, 0, 0, 0])))
            )
        })

        const stored = (subject: string, body: string) =>
          Effect.gen(function*() {
            const id = randomUUID()
            yield* sql`INSERT INTO emails ${sql.insert({
              id, org_id: org.id, thread_id: uuid7(), recipient: "agent@example.test", from_address: "a@example.test",
              subject, size_bytes: body.length, event_type: "email.received", status: "accepted",
              message_id: `<${id}@example.test>`, to_addresses: JSON.stringify(["agent@example.test"])
            })}`
            yield* sql`INSERT INTO email_contents ${sql.insert({ email_id: id, raw: Buffer.from(body), text_body: body })}`
            yield* sql`WITH doc AS (INSERT INTO search_documents ${sql.insert({
              id, org_id: org.id, kind: "received", email_id: id, recipients: "[]", subject, body
            })} RETURNING id) INSERT INTO search_backlog (id) SELECT id FROM doc`
            return id
          })
        const versionOf = (id: string) =>
          Effect.map(sql<{ v: string }>`SELECT xmin::text AS v FROM search_documents WHERE id = ${id}`, (r) => r[0]!.v)
        const vectors = (id: string) =>
          Effect.map(sql<{ n: number }>`SELECT count(*)::int AS n FROM search_embeddings WHERE id = ${id}`, (r) => r[0]!.n)
        const pending = (id: string) =>
          Effect.map(sql<{ n: number; lease: boolean }>`
            SELECT count(*)::int AS n, bool_or(lease_until IS NOT NULL) AS lease FROM search_backlog WHERE id = ${id}`, (r) => r[0]!)
        const settled = (id: string) =>
          Effect.gen(function*() {
            for (let i = 0; i < 200; i++) {
              if ((yield* pending(id)).n === 0) return
              yield* Effect.sleep("20 millis")
            }
            expect.fail(`document ${id} still pending`)
          })

        const plain = yield* stored("Quarterly numbers", "Revenue grew in the third quarter.")
        const before = yield* versionOf(plain)
        yield* Layer.build(EmbeddingBacklogLive({ pollMs: 20, dutyCycle: 1, busyAbove: 1, idleBelow: 0 }).pipe(Layer.provide(embedder)))

        // Finished: the vector stored, the backlog row gone, the document's row version untouched.
        expect(yield* Queue.take(calls)).toEqual(["Quarterly numbers\nRevenue grew in the third quarter."])
        expect(yield* pending(plain)).toEqual({ n: 1, lease: true })
        yield* Queue.offer(permits, undefined)
        yield* settled(plain)
        expect(yield* vectors(plain)).toBe(1)
        expect(yield* versionOf(plain)).toBe(before)

        // Discarded while the model embeds its body: the batch's result is dropped, the row queued
        // again without a lease, and the next claim embeds the subject alone.
        const secret = yield* stored("Contract draft", "The secret terms are attached.")
        expect(yield* Queue.take(calls)).toEqual(["Contract draft\nThe secret terms are attached."])
        yield* sql`UPDATE emails SET content_discarded_at = now() WHERE id = ${secret}`
        expect(yield* pending(secret)).toEqual({ n: 1, lease: false })
        yield* Queue.offer(permits, undefined)
        expect(yield* Queue.take(calls)).toEqual(["Contract draft"])
        expect(yield* vectors(secret)).toBe(0)
        const discarded = yield* versionOf(secret)
        yield* Queue.offer(permits, undefined)
        yield* settled(secret)
        expect(yield* vectors(secret)).toBe(1)
        expect(yield* versionOf(secret)).toBe(discarded)
      }))
  })
})
