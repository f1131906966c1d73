/**
 * The demo and the real operations apply one set of rules: the emails and deliveries lists over the
 * demo's rows given inline (as the demo runs them) give the same pages, totals and cursors as the real
 * lists over the same rows stored, for every filter the demo accepts; the demo's
 * messages stored as an organization's search documents (with the same vectors) are found by the
 * real search in the same order, with the same scores and legs, as the demo's search finds them.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { randomUUID } from "node:crypto"
import { decodeCursor, pageOf } from "../src/contract/Paging.js"
import { DeliveriesRepo, type DeliveryFilter, type ListedRow } from "../src/deliveries/Repo.js"
import { DEMO_ENDPOINT_URL, DEMO_INBOX, demoListedDeliveries, demoSummaryRows } from "../src/demo/Dataset.js"
import { DemoSearch, demoDocuments } from "../src/demo/Search.js"
import { Provisioning } from "../src/identity/Provisioning.js"
import { type EmailListParams, WAKE_EVENT_TYPE } from "../src/emails/Api.js"
import { toSummaryPage } from "../src/emails/Present.js"
import { emailListQuery, EmailsRepo, type SummaryRow } from "../src/emails/Repo.js"
import type { SearchMode, SearchResult } from "../src/search/Api.js"
import { embeddingText } from "../src/mail/SearchDocument.js"
import { Embedder, normalise } from "../src/search/Embedder.js"
import { SearchRepo } from "../src/search/Repo.js"
import { Search } from "../src/search/Search.js"
import { toBytes, VectorIndex } from "../src/search/Vectors.js"
import { testDatabase } from "./support/harness.js"

/** A deterministic bag-of-words embedding: texts sharing words are near, so the semantic leg has an order. */
const DIMS = 64
const vectorOf = (text: string) => {
  const v = new Array<number>(DIMS).fill(0)
  for (const w of text.toLowerCase().match(/[a-z0-9]+/g) ?? []) {
    let h = 0
    for (const c of w) h = (h * 31 + c.charCodeAt(0)) >>> 0
    v[h % DIMS]! += 1
  }
  v[0]! += 0.01
  return normalise(v)
}
const MODEL = "parity-words"
const StubEmbedder = Layer.succeed(Embedder, {
  model: MODEL,
  minSimilarity: 0.05,
  embed: (texts) => Effect.succeed(texts.map(vectorOf))
})

const Env = Layer.mergeAll(
  Provisioning.Default,
  EmailsRepo.Default,
  DeliveriesRepo.Default,
  Search.Default.pipe(Layer.provide([SearchRepo.Default, VectorIndex.Default])),
  DemoSearch.Default
).pipe(Layer.provideMerge(StubEmbedder), Layer.provideMerge(testDatabase()))

/** What both searches know of a hit (thread, inbox and recipients come from the stored message, absent here). */
const shown = (r: SearchResult) => ({
  id: r.id,
  kind: r.kind,
  subject: r.subject,
  from: r.from,
  date: r.date.toISOString(),
  snippet: r.snippet,
  score: r.score,
  matched: r.matched
})

layer(Env, { timeout: 120_000, excludeTestServices: true })("demo parity", (it) => {
  describe("lists", () => {
    it.effect("the emails list over the demo's rows given inline answers what the real list answers over them stored, for every filter, page by page", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const repo = yield* EmailsRepo
        const org = yield* (yield* Provisioning).createOrganization({ name: "Demo parity emails", plan: "developer" })
        const [inbox] = yield* sql<{ id: string }>`
          INSERT INTO inboxes (org_id, address) VALUES (${org.id}, ${`parity-${randomUUID()}@demo.example`}) RETURNING id`
        // The demo's rows, varied so every filter selects something and something not (fresh ids:
        // a database may hold an earlier run's rows); a copy at the same time as another (the id
        // breaks the tie) and a wake firing (left out unless asked for).
        const varied = demoSummaryRows.map((r, i): SummaryRow => ({
          ...r,
          id: randomUUID(),
          inbox_id: i % 3 === 0 ? null : inbox!.id,
          labels: i % 2 === 0 ? ["invoice"] : [],
          read: i % 3 === 1
        }))
        const rows: ReadonlyArray<SummaryRow> = [
          ...varied,
          { ...varied[1]!, id: randomUUID() },
          { ...varied[2]!, id: randomUUID(), event_type: WAKE_EVENT_TYPE, received_at: new Date("2026-01-06T12:00:00.000Z") }
        ]
        for (const r of rows) {
          yield* sql`INSERT INTO emails ${sql.insert({
            ...r,
            org_id: org.id,
            to_addresses: JSON.stringify(r.to_addresses),
            cc_addresses: JSON.stringify(r.cc_addresses),
            attachments: JSON.stringify(r.attachments),
            auth: JSON.stringify(r.auth),
            trust: JSON.stringify(r.trust),
            labels: JSON.stringify(r.labels)
          })}`
        }
        const source = repo.inlineEmails(rows)
        const filters: ReadonlyArray<typeof EmailListParams.Type> = [
          {},
          { recipient: DEMO_INBOX.toUpperCase() },
          { recipient: "nobody@demo.example" },
          { sender: "MARIA@northwind.example" },
          { event_type: "email.received" },
          { event_type: WAKE_EVENT_TYPE },
          { include: "wake" },
          { status: "rejected" },
          { status: "accepted", unread: true },
          { unread: false },
          { label: "invoice" },
          { inbox_id: inbox!.id },
          { date_from: new Date("2026-01-06T14:03:00.000Z") },
          { date_to: new Date("2026-01-07T03:01:00.000Z") },
          { date_from: new Date("2026-01-06T00:00:00.000Z"), date_to: new Date("2026-01-08T00:00:00.000Z"), label: "invoice", include: "wake" }
        ]
        let listed = 0
        for (const f of filters) {
          for (const limit of [1, 3, 50]) {
            let cursor: string | null = null
            let pages = 0
            do {
              const q = emailListQuery(f, limit, yield* decodeCursor(cursor ?? undefined))
              const real = toSummaryPage(yield* repo.list(org.id, q), limit)
              const demo = toSummaryPage(yield* repo.listOver(source, q), limit)
              expect(demo, `${JSON.stringify(f)} limit ${limit}, page ${pages}`).toEqual(real)
              listed += real.items.length
              cursor = real.meta.cursor
              pages++
            } while (cursor !== null)
          }
        }
        expect(listed).toBeGreaterThan(100)
      }))

    it.effect("the deliveries list over the demo's rows given inline answers what the real list answers over them stored, for every filter, page by page", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const repo = yield* DeliveriesRepo
        const org = yield* (yield* Provisioning).createOrganization({ name: "Demo parity deliveries", plan: "developer" })
        const [endpoint] = yield* sql<{ id: string }>`
          INSERT INTO endpoints (org_id, kind, url, enabled) VALUES (${org.id}, 'http', ${DEMO_ENDPOINT_URL}, false) RETURNING id`
        // Deliveries point at stored emails: the demo's, under fresh ids.
        const emailIds = new Map<string, string>()
        for (const r of demoSummaryRows) {
          const id = randomUUID()
          emailIds.set(r.id, id)
          yield* sql`INSERT INTO emails ${sql.insert({
            id, org_id: org.id, recipient: r.recipient, size_bytes: r.size_bytes, event_type: r.event_type,
            status: r.status, received_at: r.received_at
          })}`
        }
        const varied = demoListedDeliveries.map((d, i): ListedRow => ({
          ...d,
          id: randomUUID(),
          email_id: emailIds.get(d.email_id!)!,
          endpoint_id: endpoint!.id,
          status: i === 2 ? "failed" : d.status
        }))
        const rows: ReadonlyArray<ListedRow> = [...varied, { ...varied[1]!, id: randomUUID() }]
        for (const d of rows) {
          const { endpoint_kind: _k, endpoint_url: _u, function_id: _f, ...stored } = d
          yield* sql`INSERT INTO deliveries ${sql.insert({ ...stored, org_id: org.id, payload: "{}" })}`
        }
        const source = repo.inlineDeliveries(rows)
        const filters: ReadonlyArray<Omit<DeliveryFilter, "orgId" | "limit" | "after">> = [
          {},
          { status: "pending" },
          { status: "delivered" },
          { status: "failed" },
          { emailId: rows[1]!.email_id! },
          { emailId: rows[1]!.email_id!, dateFrom: new Date("2026-01-09T00:00:00.000Z") },
          { dateFrom: new Date("2026-01-06T14:03:00.000Z") },
          { dateTo: new Date("2026-01-07T03:01:00.000Z") },
          // Partial hours at both ends: the real total reads the kept hourly counts and the edges.
          { dateFrom: new Date("2026-01-05T10:30:00.000Z"), dateTo: new Date("2026-01-08T10:20:00.000Z") },
          { dateFrom: new Date("2026-01-06T14:10:00.000Z"), dateTo: new Date("2026-01-06T15:30:00.000Z"), status: "delivered" }
        ]
        let listed = 0
        for (const f of filters) {
          for (const limit of [1, 3, 50]) {
            let cursor: string | null = null
            let pages = 0
            do {
              const q: DeliveryFilter = { ...f, orgId: org.id, limit, after: yield* decodeCursor(cursor ?? undefined) }
              const real = yield* repo.list(q)
              const demo = yield* repo.listOver(source, q)
              const a = pageOf(real.rows, limit, real.total, (r) => r)
              expect(pageOf(demo.rows, limit, demo.total, (r) => r), `${JSON.stringify(f)} limit ${limit}, page ${pages}`).toEqual(a)
              listed += a.items.length
              cursor = a.meta.cursor
              pages++
            } while (cursor !== null)
          }
        }
        expect(listed).toBeGreaterThan(50)
      }))
  })

  describe("search", () => {
    it.effect("the real search over the demo's messages answers what the demo's search answers, in every mode", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const org = yield* (yield* Provisioning).createOrganization({ name: "Demo parity", plan: "developer" })
        yield* sql`DELETE FROM search_documents WHERE org_id = ${org.id}`
        for (const d of demoDocuments) {
          yield* sql`INSERT INTO search_documents ${sql.insert({
            id: d.inline.id,
            org_id: org.id,
            kind: d.hit.kind,
            email_id: null,
            at: d.inline.at,
            from_address: d.inline.from_address,
            from_name: d.inline.from_name,
            recipients: JSON.stringify(d.recipients),
            subject: d.inline.subject,
            body: d.inline.body,
            extracted: d.inline.extracted
          })}`
          yield* sql`INSERT INTO search_embeddings ${sql.insert({
            id: d.inline.id,
            org_id: org.id,
            model: MODEL,
            dims: DIMS,
            vector: toBytes(vectorOf(embeddingText(d.inline.subject, d.inline.body)))
          })}`
        }
        const search = yield* Search
        const demo = yield* DemoSearch
        // The demo's vectors are computed in the background after its first search.
        for (let i = 0; i < 100; i++) {
          const r = yield* demo.search({ q: "invoice", mode: "semantic" })
          if (r.data.results.length > 0) break
          yield* Effect.sleep("50 millis")
        }
        const queries = ["invoice", "invoce", "invoice -purchase", "friday call slides", "\"purchase order\"", "latency or interview", "payment received"]
        const modes: ReadonlyArray<SearchMode> = ["lexical", "semantic", "hybrid"]
        let found = 0
        for (const q of queries) {
          for (const mode of modes) {
            for (const limit of [2, 20]) {
              const real = yield* search.search({ orgId: org.id, q, mode, limit, filters: { scope: "all" } })
              const ours = yield* demo.search({ q, mode, limit })
              expect(ours.data.results.map(shown), `${mode} ${q} ${limit}`).toEqual(real.results.map(shown))
              found += real.results.length
            }
          }
        }
        // The comparison means something: the queries do find messages, in every leg.
        expect(found).toBeGreaterThan(40)
      }))
  })
})
