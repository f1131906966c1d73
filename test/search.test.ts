/**
 * Search with the default in-process model: lexical (words, phrases, exclusions, `or`, typos),
 * filters and scope, organizations kept apart, semantic on paraphrases, hybrid on a mixed set, mail
 * not embedded yet still found lexically, the entitlement and request validation.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import nodemailer, { type SendMailOptions } from "nodemailer"
import { Provisioning } from "../src/identity/Provisioning.js"
import { TestServer, testService } from "./support/harness.js"
import { call } from "./support/http.js"
import { LOCAL_MIN_SIMILARITY } from "../src/search/Embedder.js"
import { CORPUS, DISTRACTORS, LEXICAL_QUERIES, PARAPHRASES, sharedWords } from "./support/searchCorpus.js"

const Env = Provisioning.Default.pipe(
  Layer.provideMerge(testService({ DNS_SERVER: "127.0.0.1:9", SEARCH_TIMEOUT: "20s" }, { embeddingBacklog: { pollMs: 50, batch: 32 } }))
)

const newOrg = (name: string, plan: "developer" | "agent" = "developer") =>
  Effect.gen(function*() {
    const p = yield* Provisioning
    const org = yield* p.createOrganization({ name, plan })
    const key = yield* p.issueApiKey(org.id)
    return { orgId: org.id, apiKey: key.apiKey, address: org.managedInboxAddress }
  })

const send = (message: SendMailOptions) =>
  Effect.flatMap(TestServer, (server) =>
    Effect.promise(async () => {
      const transport = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
      try {
        await transport.sendMail(message)
      } finally {
        transport.close()
      }
    }))

/** Waits until the backlog has embedded every document. */
const drained = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  for (let i = 0; i < 1200; i++) {
    const rows = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM search_backlog`
    if (rows[0]!.n === 0) return
    yield* Effect.sleep("50 millis")
  }
  throw new Error("the embedding backlog did not drain")
}).pipe(Effect.orDie)

interface Hit {
  readonly id: string
  readonly kind: string
  readonly subject: string
  readonly from: string
  readonly thread_id: string
  readonly score: number
  readonly matched: ReadonlyArray<string>
  readonly date: string
  readonly snippet: string
  readonly to: ReadonlyArray<string>
}

/** The per-organization API rate limit is not under test here: each search starts with a clean window. */
const resetLimits = Effect.flatMap(SqlClient.SqlClient, (sql) => sql`DELETE FROM rate_limit_windows`).pipe(Effect.orDie)

const search = (token: string, params: Record<string, string>) =>
  Effect.zipRight(resetLimits, Effect.map(call("GET", `/v1/search?${new URLSearchParams(params)}`, { token }), (r) => {
    if (r.status !== 200) throw new Error(`search ${JSON.stringify(params)}: ${r.status} ${r.text}`)
    return { results: r.body.data.results as ReadonlyArray<Hit>, meta: r.body.meta, body: r.body }
  }))

const subjects = (hits: ReadonlyArray<Hit>) => hits.map((h) => h.subject)

layer(Env, { timeout: 300_000, excludeTestServices: true })("search", (it) => {
  const state = { apiKey: "", address: "", otherKey: "", ids: new Map<string, string>() }

  it.effect("stores a mailbox (and another organization's) and embeds it all", () =>
    Effect.gen(function*() {
      const org = yield* newOrg("Searcher")
      const other = yield* newOrg("Other")
      state.apiKey = org.apiKey
      state.address = org.address
      state.otherKey = other.apiKey
      for (const m of [...CORPUS, ...DISTRACTORS]) {
        yield* send({ from: m.from, to: org.address, subject: m.subject, text: m.text, messageId: `<${m.key}@corpus.example>` })
      }
      // The other organization's mail uses the very words searched below.
      yield* send({ from: "billing@acme-consulting.com", to: other.address, subject: "Invoice #9999 for March", text: "consulting invoice Lisbon 88123" })
      const sql = yield* SqlClient.SqlClient
      const rows = yield* sql<{ id: string; message_id: string }>`SELECT id, message_id FROM emails WHERE org_id = ${org.orgId}`
      for (const r of rows) state.ids.set(r.message_id.replace(/^<|@.*$/g, ""), r.id)
      expect(state.ids.size).toBe(CORPUS.length + DISTRACTORS.length)
      yield* drained
      const vectors = yield* sql<{ n: number; dims: number }>`SELECT count(*)::int AS n, max(dims) AS dims FROM search_embeddings`
      expect(vectors[0]).toEqual({ n: CORPUS.length + DISTRACTORS.length + 1, dims: 512 })
    }))

  describe("lexical", () => {
    it.effect("finds exact words, phrases, alternatives, exclusions and misspellings, in the organization only", () =>
      Effect.gen(function*() {
        const k = state.apiKey
        const word = yield* search(k, { q: "Lisbon", mode: "lexical" })
        expect(subjects(word.results)).toEqual(["Wedding invitation"])
        expect(word.results[0]!.matched).toEqual(["lexical"])
        expect(word.results[0]).toMatchObject({ kind: "received", from: "anna@family.example", to: [state.address] })
        expect(word.results[0]!.snippet.startsWith("Anna and Tom are getting married")).toBe(true)
        expect(word.meta).toMatchObject({ mode: "lexical", embedding_model: null })
        expect(typeof word.meta.took_ms).toBe("number")

        // The subject outranks the sender: "security" is one's subject and the other's sender.
        const weighted = yield* search(k, { q: "security", mode: "lexical" })
        expect(subjects(weighted.results)).toEqual(["Security alert: new sign-in", "Your password was changed"])

        const phrase = yield* search(k, { q: "\"checkout page\"", mode: "lexical" })
        expect(subjects(phrase.results)).toEqual(["Bug in checkout page"])
        const notPhrase = yield* search(k, { q: "\"page checkout\"", mode: "lexical" })
        expect(notPhrase.results).toEqual([])

        const either = yield* search(k, { q: "Lisbon or Madrid", mode: "lexical" })
        expect(new Set(subjects(either.results))).toEqual(new Set(["Wedding invitation", "Security alert: new sign-in"]))

        // English stemming: "accountant" is found by "account".
        const all = yield* search(k, { q: "account", mode: "lexical" })
        expect(new Set(subjects(all.results))).toEqual(new Set(["Your password was changed", "Security alert: new sign-in", "Tax return documents"]))
        const excluded = yield* search(k, { q: "account -Madrid", mode: "lexical" })
        expect(new Set(subjects(excluded.results))).toEqual(new Set(["Your password was changed", "Tax return documents"]))

        const typo = yield* search(k, { q: "invoce", mode: "lexical" })
        expect(subjects(typo.results)[0]).toBe("Invoice #4411 for March")
        const typoSender = yield* search(k, { q: "lufthanza", mode: "lexical" })
        expect(subjects(typoSender.results)).toEqual(["Flight to Berlin confirmed"])
        // Exclusions bind the misspelling leg too.
        const typoExcluded = yield* search(k, { q: "invoce -consulting", mode: "lexical" })
        expect(subjects(typoExcluded.results)).not.toContain("Invoice #4411 for March")

        const nothing = yield* search(k, { q: "zeppelin", mode: "lexical" })
        expect(nothing.results).toEqual([])

        // The other organization's matching message is never returned, and it sees only its own.
        const mine = yield* search(k, { q: "88123", mode: "lexical" })
        expect(subjects(mine.results)).toEqual(["Package delivered"])
        const theirs = yield* search(state.otherKey, { q: "Lisbon", mode: "hybrid" })
        expect(subjects(theirs.results)).toEqual(["Invoice #9999 for March"])
        for (const mode of ["lexical", "semantic", "hybrid"]) {
          const r = yield* search(state.otherKey, { q: "wedding in Lisbon", mode })
          for (const h of r.results) expect(h.subject).toBe("Invoice #9999 for March")
        }
      }))

    it.effect("filters by sender, recipient, date, thread and scope", () =>
      Effect.gen(function*() {
        const k = state.apiKey
        const from = yield* search(k, { q: "account", mode: "lexical", from: "ALERTS@accounts.example" })
        expect(subjects(from.results)).toEqual(["Security alert: new sign-in"])
        const to = yield* search(k, { q: "account", mode: "lexical", to: state.address })
        expect(to.results.length).toBe(3)
        const toOther = yield* search(k, { q: "account", mode: "lexical", to: "nobody@example.com" })
        expect(toOther.results).toEqual([])
        const future = yield* search(k, { q: "account", date_from: new Date(Date.now() + 60_000).toISOString() })
        expect(future.results).toEqual([])
        const past = yield* search(k, { q: "account", mode: "lexical", date_to: new Date().toISOString() })
        expect(past.results.length).toBe(3)
        const hit = past.results[0]!
        const inThread = yield* search(k, { q: "account", thread_id: hit.thread_id })
        expect(inThread.results.map((h) => h.id)).toEqual([hit.id])
        expect([...state.ids.values()]).toContain(hit.id)
        const received = yield* search(k, { q: "account", scope: "received", mode: "lexical" })
        expect(received.results.length).toBe(3)
        const sent = yield* search(k, { q: "account", scope: "sent" })
        expect(sent.results).toEqual([])
        // A semantic search honours filters too: the flight is found among the airline's mail, and
        // among the dentist's there is nothing about a trip (nothing above the relevance floor).
        const semAirline = yield* search(k, { q: "airplane trip", mode: "semantic", from: "noreply@lufthansa.example" })
        expect(subjects(semAirline.results)).toEqual(["Flight to Berlin confirmed"])
        const semFiltered = yield* search(k, { q: "airplane trip", mode: "semantic", from: "frontdesk@smile.example" })
        expect(semFiltered.results).toEqual([])
      }))
  })

  describe("semantic and hybrid", () => {
    it.effect("the paraphrase set reaches hit@3 ≥ 16/20 with the default model, among look-alikes", () =>
      Effect.gen(function*() {
        let hits = 0
        const missed: Array<string> = []
        for (const p of PARAPHRASES) {
          const target = CORPUS.find((m) => m.key === p.key)!
          // The set is honest: no query shares a content word with the message it means.
          expect(sharedWords(p.q, target), p.q).toEqual([])
          const r = yield* search(state.apiKey, { q: p.q, mode: "semantic", limit: "3" })
          // At most 3: what falls below the relevance floor is not returned.
          expect(r.results.length).toBeLessThanOrEqual(3)
          for (const h of r.results) {
            expect(h.matched).toEqual(["semantic"])
            expect(h.score).toBeGreaterThanOrEqual(LOCAL_MIN_SIMILARITY)
            expect(h.score).toBeLessThanOrEqual(1)
          }
          expect(r.meta).toMatchObject({ mode: "semantic", embedding_model: "universal-sentence-encoder-lite-en-512" })
          if (r.results.some((h) => h.id === state.ids.get(p.key))) hits++
          else missed.push(p.q)
        }
        console.log(`semantic hit@3 on paraphrases: ${hits}/${PARAPHRASES.length}; missed: ${missed.join(" | ")}`)
        // Measured: 16/20 (USE-lite, 40 messages; "money requested for advisory work" and "income
        // numbers for the last three months" miss, "kid's celebration this weekend" (0.375) and "my
        // presentation got approved for the event" (0.414) find their message below the relevance
        // floor; 18/20 without the floor).
        expect(hits).toBeGreaterThanOrEqual(16)
      }))

    it.effect("hybrid is at least as good as the better leg on a mixed set, with the legs that matched", () =>
      Effect.gen(function*() {
        const set = [...PARAPHRASES, ...LEXICAL_QUERIES]
        const score: Record<string, number> = { lexical: 0, semantic: 0, hybrid: 0 }
        for (const mode of ["lexical", "semantic", "hybrid"] as const) {
          for (const p of set) {
            const r = yield* search(state.apiKey, { q: p.q, mode, limit: "3" })
            if (r.results.some((h) => h.id === state.ids.get(p.key))) score[mode]!++
          }
        }
        console.log(`hit@3 on ${set.length} mixed queries: ${JSON.stringify(score)}`)
        expect(score.hybrid).toBeGreaterThanOrEqual(Math.max(score.lexical!, score.semantic!))
        expect(score.lexical).toBeLessThan(set.length)

        const both = yield* search(state.apiKey, { q: "wedding invitation Lisbon" })
        expect(both.results[0]!.subject).toBe("Wedding invitation")
        expect(both.results[0]!.matched).toEqual(["lexical", "semantic"])
        expect(both.meta.mode).toBe("hybrid")
        // RRF normalised: 1/61 + 1/61 for a message first in both lists, the most there can be: 1.
        expect(both.results[0]!.score).toBeCloseTo(1, 6)
        for (const h of both.results) {
          expect(h.score).toBeGreaterThan(0)
          expect(h.score).toBeLessThanOrEqual(1)
        }
        // First in one leg only: half.
        const lexicalOnly = yield* search(state.apiKey, { q: "88123" })
        expect(lexicalOnly.results[0]).toMatchObject({ subject: "Package delivered", matched: ["lexical"] })
        expect(lexicalOnly.results[0]!.score).toBeCloseTo(0.5, 6)
        // Deterministic: the same search twice gives the same order.
        const again = yield* search(state.apiKey, { q: "wedding invitation Lisbon" })
        expect(again.results.map((h) => h.id)).toEqual(both.results.map((h) => h.id))
      }))

    it.effect("a message not embedded yet is still found, lexically", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const id = state.ids.get("garden")!
        // As if the backlog had not reached it: no vector, and not due for an hour.
        yield* sql`INSERT INTO search_backlog (id, next_at) VALUES (${id}, now() + interval '1 hour')`
        yield* sql`DELETE FROM search_embeddings WHERE id = ${id}`
        const r = yield* search(state.apiKey, { q: "tomatoes balcony" })
        expect(r.results.find((h) => h.id === id)?.matched).toEqual(["lexical"])
        const sem = yield* search(state.apiKey, { q: "tomatoes balcony", mode: "semantic" })
        expect(sem.results.map((h) => h.id)).not.toContain(id)
        yield* sql`UPDATE search_backlog SET next_at = now() WHERE id = ${id}`
        yield* drained
        const later = yield* search(state.apiKey, { q: "tomatoes balcony" })
        expect(later.results[0]!.id).toBe(id)
        expect(later.results[0]!.matched).toEqual(["lexical", "semantic"])
      }))

    it.effect("a deleted email leaves the results", () =>
      Effect.gen(function*() {
        const id = state.ids.get("party")!
        expect((yield* search(state.apiKey, { q: "Mia birthday" })).results[0]!.id).toBe(id)
        expect((yield* call("DELETE", `/v1/emails/${id}`, { token: state.apiKey })).status).toBe(200)
        for (const mode of ["lexical", "semantic", "hybrid"]) {
          const r = yield* search(state.apiKey, { q: "Mia birthday", mode })
          expect(r.results.map((h) => h.id)).not.toContain(id)
        }
      }))
  })

  describe("the stored full-text vector", () => {
    it.effect("is what stemming subject, reply text, sender and body each on its own gives, for every shape of mail", () =>
      Effect.gen(function*() {
        const org = yield* newOrg("Vectors")
        const line = "The quarterly invoices were reconciled against the ledgers yesterday.\r\n"
        // Fresh mail (reply text = body), CRLF and trailing space; a reply quoting history; a signature;
        // HTML only; no body at all.
        yield* send({ from: "Ann <ann@example.com>", to: org.address, subject: "Fresh", text: line.repeat(40) + "  \r\n" })
        yield* send({
          from: "Bob <bob@example.com>",
          to: org.address,
          subject: "Re: Fresh",
          text: "Agreed, shipping tomorrow.\r\n\r\nOn Mon, Jan 5, 2026 at 9:00 AM Ann <ann@example.com> wrote:\r\n> " + line + "> " + line
        })
        yield* send({ from: "cy@example.com", to: org.address, subject: "Signed", text: "Running late today.\n\n-- \nCy, Accounts payable\n" })
        yield* send({ from: "dee@example.com", to: org.address, subject: "Html", html: "<p>Warehouse <b>inventory</b> counted.</p><blockquote>older words quoted</blockquote>" })
        yield* send({ from: "eve@example.com", to: org.address, subject: "Empty", text: "" })
        const sql = yield* SqlClient.SqlClient
        const rows = yield* sql<{ subject: string; same_text: boolean; equal: boolean }>`
          SELECT subject, extracted = btrim(replace(body, E'\r', ''), E' \t\n') AS same_text,
                 tsv = (setweight(to_tsvector('english', coalesce(subject, '')), 'A') ||
                        setweight(to_tsvector('english', coalesce(extracted, '')), 'B') ||
                        setweight(to_tsvector('english', coalesce(from_name, '') || ' ' || coalesce(from_address, '')), 'B') ||
                        setweight(to_tsvector('english', coalesce(body, '')), 'C')) AS equal
            FROM search_documents WHERE org_id = ${org.orgId} ORDER BY subject`
        expect(rows.map((r) => r.subject)).toEqual(["Empty", "Fresh", "Html", "Re: Fresh", "Signed"])
        expect(rows.every((r) => r.equal)).toBe(true)
        // Both branches ran: the body stemmed once for fresh mail, reply text and body apart for the rest.
        expect(rows.find((r) => r.subject === "Fresh")!.same_text).toBe(true)
        expect(rows.find((r) => r.subject === "Re: Fresh")!.same_text).toBe(false)
        expect(rows.find((r) => r.subject === "Signed")!.same_text).toBe(false)
      }))
  })

  describe("relevance", () => {
    it.effect("a floor per mode: filler is not returned; scores run from 0 to 1", () =>
      Effect.gen(function*() {
        // The walkthrough's mailbox: greetings, a contract to sign, and look-alikes around them.
        const org = yield* newOrg("Relevance")
        yield* send({ from: "alice@example.com", to: org.address, subject: "Hello agent", text: "Hello from SMTP" })
        yield* send({ from: "alice@example.com", to: org.address, subject: "Hello agent", text: "Hello from SMTP" })
        yield* send({
          from: "legal@partner.example",
          to: org.address,
          subject: "NDA for signature",
          text: "Please sign the non-disclosure agreement and send the paperwork back by Friday."
        })
        const tax = CORPUS.find((m) => m.key === "tax")!
        for (const m of [tax, ...DISTRACTORS]) yield* send({ from: m.from, to: org.address, subject: m.subject, text: m.text })
        yield* drained
        const k = org.apiKey
        // The greetings share a word piece with the query ("ag…"): semantic similarity 0.40, below the floor.
        for (const mode of ["semantic", "hybrid", "lexical"]) {
          const r = yield* search(k, { q: "agreement paperwork", mode })
          expect(subjects(r.results), mode).not.toContain("Hello agent")
          for (const h of r.results) {
            expect(h.score, mode).toBeGreaterThan(0)
            expect(h.score, mode).toBeLessThanOrEqual(1)
          }
          if (mode !== "semantic") expect(subjects(r.results)[0], mode).toBe("NDA for signature")
        }
        // Nothing relevant at all: no results, not the least bad ones.
        for (const mode of ["semantic", "hybrid", "lexical"]) {
          expect((yield* search(k, { q: "zeppelin", mode })).results, mode).toEqual([])
        }
        // What is relevant is still found by meaning alone, with its cosine similarity as the score.
        const irs = yield* search(k, { q: "yearly IRS paperwork", mode: "semantic" })
        expect(subjects(irs.results)[0]).toBe("Tax return documents")
        expect(irs.results[0]!.score).toBeGreaterThan(0.6)
        expect(irs.results[0]!.score).toBeLessThanOrEqual(1)
        expect(subjects(irs.results)).not.toContain("Hello agent")
        // The greeting itself is found when asked for.
        const hello = yield* search(k, { q: "hello", mode: "semantic" })
        expect(subjects(hello.results)).toEqual(["Hello agent", "Hello agent"])
        // Lexical scores: the full-text rank as rank/(rank+1).
        const lex = yield* search(k, { q: "paperwork", mode: "lexical" })
        for (const h of lex.results) {
          expect(h.score).toBeGreaterThan(0)
          expect(h.score).toBeLessThan(1)
        }
      }))
  })

  describe("access and validation", () => {
    it.effect("needs the search entitlement and validates the query", () =>
      Effect.gen(function*() {
        const agent = yield* newOrg("Agent", "agent")
        const denied = yield* call("GET", "/v1/search?q=hello", { token: agent.apiKey })
        expect(denied.status).toBe(403)
        expect(denied.body.error.code).toBe("forbidden")
        expect(denied.body.error.details).toMatchObject({ required_plan: "developer", missing_entitlement: "search" })
        expect((yield* call("GET", "/v1/search?q=hello")).status).toBe(401)
        yield* resetLimits
        for (const bad of ["q=", "", `q=${"x".repeat(501)}`, "q=a&limit=51", "q=a&limit=0", "q=a&mode=fuzzy", "q=a&scope=outbox", "q=a&thread_id=nope", "q=a&date_from=yesterday"]) {
          const r = yield* call("GET", `/v1/search?${bad}`, { token: state.apiKey })
          expect(r.status, bad).toBe(400)
          expect(r.body.error.code).toBe("validation_error")
        }
        const limited = yield* search(state.apiKey, { q: "attached", mode: "lexical", limit: "2" })
        expect(limited.results.length).toBe(2)
        const odd = yield* search(state.apiKey, { q: "\"unclosed -\" or or -", mode: "hybrid" })
        expect(Array.isArray(odd.results)).toBe(true)
      }))
  })
})
