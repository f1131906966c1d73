/**
 * `extracted_text`: the new text of a message without quoted history or signature, end to end. Each
 * reply of the corpus in test/fixtures/replies/ (Gmail, Outlook desktop and web, Apple Mail, text
 * and HTML-only, a signature, a message that is no reply) is sent over real SMTP; the API and the
 * webhook payload show exactly the text in its `.expected.txt`. Sent mail has it too, the OpenAPI
 * `webhooks` section documents it, and search ranks a message whose own words match above one that
 * only quotes them.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import nodemailer, { type SendMailOptions } from "nodemailer"
import { Provisioning } from "../src/identity/Provisioning.js"
import { TestServer, testService } from "./support/harness.js"
import { call } from "./support/http.js"
import { startReceiver } from "./support/receiver.js"

const Env = Provisioning.Default.pipe(Layer.provideMerge(testService({ DNS_SERVER: "127.0.0.1:9", SEARCH_TIMEOUT: "20s" })))

const CORPUS = join(__dirname, "fixtures/replies")

const corpus = readdirSync(CORPUS).filter((f) => f.endsWith(".eml")).sort().map((file) => {
  const raw = readFileSync(join(CORPUS, file), "utf8")
  return {
    name: file.replace(/\.eml$/, ""),
    raw,
    messageId: /^Message-I[dD]: (<[^>]+>)$/m.exec(raw)![1]!,
    expected: readFileSync(join(CORPUS, file.replace(/\.eml$/, ".expected.txt")), "utf8").trim()
  }
})

const newOrg = (name = "Reply text") =>
  Effect.gen(function*() {
    const p = yield* Provisioning
    const org = yield* p.createOrganization({ name, plan: "developer" })
    const key = yield* p.issueApiKey(org.id)
    return { orgId: org.id, apiKey: key.apiKey, address: org.managedInboxAddress! }
  })

const smtp = (message: SendMailOptions) =>
  Effect.flatMap(TestServer, (server) =>
    Effect.promise(async () => {
      const transport = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
      try {
        await transport.sendMail(message)
      } finally {
        transport.close()
      }
    }))

/** The email with this Message-ID, as `GET /v1/emails/{id}` shows it. */
const emailByMessageId = (apiKey: string, messageId: string) =>
  Effect.gen(function*() {
    const list = yield* call("GET", "/v1/emails?limit=100", { token: apiKey })
    const found = list.body.data.find((e: { message_id: string }) => e.message_id === messageId)
    expect(found, messageId).toBeDefined()
    const one = yield* call("GET", `/v1/emails/${found.id}`, { token: apiKey })
    expect(one.status).toBe(200)
    return one.body.data
  })

layer(Env, { timeout: 180_000, excludeTestServices: true })("extracted_text", (it) => {
  describe("the reply corpus over SMTP", () => {
    it("holds every kind of message the brief names", () => {
      expect(corpus.map((c) => c.name)).toEqual(expect.arrayContaining([
        "gmail-reply", "gmail-html-only", "outlook-desktop", "outlook-original-message", "outlook-web-html-only",
        "apple-mail", "apple-mail-html-only", "signature", "non-reply"
      ]))
    })

    it.scoped("the API and the webhook payload show each reply's own text, nothing quoted, no signature", () =>
      Effect.gen(function*() {
        const hooks = yield* startReceiver
        const org = yield* newOrg()
        const endpoint = yield* call("POST", "/v1/endpoints", { token: org.apiKey, body: { url: hooks.url("/replies") } })
        expect(endpoint.status).toBe(201)

        for (const c of corpus) yield* smtp({ envelope: { from: "sender@example.net", to: [org.address] }, raw: c.raw })

        for (const c of corpus) {
          const email = yield* emailByMessageId(org.apiKey, c.messageId)
          expect(email.extracted_text, c.name).toBe(c.expected)
          // The full bodies are still there: extraction only adds a field.
          expect(email.text ?? email.html, c.name).not.toBeNull()
        }

        for (let i = 0; i < 400 && hooks.received.length < corpus.length; i++) yield* Effect.sleep("25 millis")
        const payloads = hooks.received.map((r) => JSON.parse(r.body))
        for (const c of corpus) {
          const payload = payloads.find((p) => p.email.message_id === c.messageId)
          expect(payload, c.name).toBeDefined()
          expect(payload.email.extracted_text, c.name).toBe(c.expected)
        }
      }))
  })

  describe("stored mail", () => {
    it.effect("mail stored before the text was extracted gets it when shown; discarded content takes it away", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const sql = yield* SqlClient.SqlClient
        const c = corpus.find((x) => x.name === "outlook-original-message")!
        yield* smtp({ envelope: { from: "sender@example.net", to: [org.address] }, raw: c.raw })
        const email = yield* emailByMessageId(org.apiKey, c.messageId)
        const [stored] = yield* sql<{ extracted_text: string | null }>`SELECT extracted_text FROM email_contents WHERE email_id = ${email.id}`
        expect(stored!.extracted_text).toBe(c.expected)

        // As a row written before migration 0155 looks.
        yield* sql`UPDATE email_contents SET extracted_text = NULL WHERE email_id = ${email.id}`
        expect((yield* emailByMessageId(org.apiKey, c.messageId)).extracted_text).toBe(c.expected)

        // Discarded as the delivery pipeline does it: the content goes, and the reply text with it (API and index).
        yield* sql`UPDATE emails SET content_discarded_at = now() WHERE id = ${email.id}`
        yield* sql`DELETE FROM email_contents WHERE email_id = ${email.id}`
        const gone = yield* emailByMessageId(org.apiKey, c.messageId)
        expect([gone.content_discarded, gone.text, gone.extracted_text]).toEqual([true, null, null])
        const [doc] = yield* sql<{ extracted: string | null }>`SELECT extracted FROM search_documents WHERE id = ${email.id}`
        expect(doc!.extracted).toBeNull()
      }))
  })

  describe("sent mail, the published schemas and search", () => {
    it.effect("a sent email carries the extracted text of its own body", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const text = "Yes, ship it on Monday.\n\nOn Tue, Nov 24, 2026 at 9:00 AM Ann <ann@example.com> wrote:\n> Can we ship on Monday?\n"
        const sent = yield* call("POST", "/v1/send-mail", {
          token: org.apiKey,
          body: { from: org.address, to: "ann@example.com", subject: "Re: Ship date", text }
        })
        expect(sent.status).toBe(201)
        const detail = yield* call("GET", `/v1/sent-emails/${sent.body.data.id}`, { token: org.apiKey })
        expect(detail.body.data).toMatchObject({ text, extracted_text: "Yes, ship it on Monday." })
        // Its search document ranks on the same text.
        const sql = yield* SqlClient.SqlClient
        const [doc] = yield* sql<{ extracted: string | null }>`SELECT extracted FROM search_documents WHERE id = ${sent.body.data.id}`
        expect(doc!.extracted).toBe("Yes, ship it on Monday.")

        const html = yield* call("POST", "/v1/send-mail", {
          token: org.apiKey,
          body: { from: org.address, to: "ann@example.com", subject: "Note", html: "<p>Only <b>HTML</b> here.</p>" }
        })
        expect((yield* call("GET", `/v1/sent-emails/${html.body.data.id}`, { token: org.apiKey })).body.data.extracted_text)
          .toBe("Only HTML here.")
      }))

    it.effect("the OpenAPI document's email schema and webhook payload schema declare extracted_text", () =>
      Effect.gen(function*() {
        const doc = (yield* call("GET", "/v1/openapi.json")).body
        expect(doc.components.schemas.Email.properties.extracted_text).toBeDefined()
        expect(doc.components.schemas.Email.required).toContain("extracted_text")
        expect(doc.components.schemas.EventEmail.properties.extracted_text).toBeDefined()
        expect(doc.components.schemas.EventEmail.required).toContain("extracted_text")
        expect(doc.webhooks["email.received"]).toBeDefined()
      }))

    it.effect("search ranks the message whose own text matches above one that only quotes the words", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        // The quoting one arrives last, so newest-first ties would put it on top.
        yield* smtp({
          from: "ann@example.com", to: org.address, subject: "Trip", messageId: "<own-words@example.com>",
          text: "The wombat enclosure opens at nine.\n\nOn Mon, Nov 23, 2026 at 8:00 AM Bob <bob@example.com> wrote:\n> When do we leave?\n"
        })
        yield* smtp({
          from: "bob@example.com", to: org.address, subject: "Trip", messageId: "<quotes-only@example.com>",
          text: "Great, see you there.\n\nOn Tue, Nov 24, 2026 at 8:00 AM Ann <ann@example.com> wrote:\n> The wombat enclosure opens at nine.\n"
        })
        const own = yield* emailByMessageId(org.apiKey, "<own-words@example.com>")
        const quoting = yield* emailByMessageId(org.apiKey, "<quotes-only@example.com>")
        expect(quoting.extracted_text).toBe("Great, see you there.")

        const found = yield* call("GET", "/v1/search?q=wombat%20enclosure&mode=lexical", { token: org.apiKey })
        expect(found.status).toBe(200)
        expect(found.body.data.results.map((r: { id: string }) => r.id)).toEqual([own.id, quoting.id])
        expect(found.body.data.results[0].score).toBeGreaterThan(found.body.data.results[1].score)
      }))
  })
})
