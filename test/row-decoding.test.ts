/**
 * Repositories decode their rows: a row whose column does not have the shape the code reads (here a
 * `jsonb` column holding another JSON type, as a renamed or retyped column would) dies with a message
 * naming the statement, instead of flowing on to the API; a good row decodes with its dates as Dates.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Cause, Effect, Exit, Layer, Option } from "effect"
import { EmailsRepo } from "../src/emails/Repo.js"
import { Provisioning } from "../src/identity/Provisioning.js"
import { ThreadsRepo } from "../src/threads/Repo.js"
import { testDatabase } from "./support/harness.js"

const Env = Layer.mergeAll(Provisioning.Default, EmailsRepo.Default, ThreadsRepo.Default).pipe(Layer.provideMerge(testDatabase()))

/** A stored email of a new organization, its `jsonb` columns as given (SQL text). */
const storedEmail = (columns: { readonly auth?: string; readonly labels?: string } = {}) =>
  Effect.gen(function*() {
    const org = yield* (yield* Provisioning).createOrganization({ name: "Rows", plan: "developer" })
    const sql = yield* SqlClient.SqlClient
    const rows = yield* sql<{ id: string; thread_id: string }>`
      INSERT INTO emails (org_id, recipient, from_address, size_bytes, event_type, status, auth, labels)
      VALUES (${org.id}, 'rows@example.com', 'ann@example.com', 10, 'email.received', 'accepted',
              ${columns.auth ?? `{"spf":"pass","dkim":"pass","dmarc":"pass"}`}::jsonb, ${columns.labels ?? "[]"}::jsonb)
      RETURNING id, thread_id`
    return { orgId: org.id, ...rows[0]! }
  }).pipe(Effect.orDie)

const defectMessage = <A, E>(exit: Exit.Exit<A, E>) => {
  expect(Exit.isFailure(exit)).toBe(true)
  return Exit.isFailure(exit) ? String(Cause.squash(exit.cause)) : ""
}

layer(Env, { timeout: 120_000, excludeTestServices: true })("row decoding", (it) => {
  describe("a repository read", () => {
    it.effect("decodes a good row: jsonb parsed, timestamps as Dates", () =>
      Effect.gen(function*() {
        const e = yield* storedEmail()
        const found = yield* (yield* EmailsRepo).find(e.orgId, e.id)
        expect(Option.isSome(found)).toBe(true)
        const row = Option.getOrThrow(found)
        expect(row.auth).toEqual({ spf: "pass", dkim: "pass", dmarc: "pass" })
        expect(row.received_at).toBeInstanceOf(Date)
        expect(row.sent_at).toBeNull()
      }))

    it.effect("dies naming the statement when a jsonb column has another shape", () =>
      Effect.gen(function*() {
        const e = yield* storedEmail({ auth: `"pass"` })
        const exit = yield* Effect.exit((yield* EmailsRepo).find(e.orgId, e.id))
        const message = defectMessage(exit)
        expect(message).toContain("email find: a row does not match its schema")
        expect(message).toContain("auth")
      }))

    it.effect("a list dies too, and so do thread messages", () =>
      Effect.gen(function*() {
        const e = yield* storedEmail({ labels: `{"not":"a list"}` })
        const list = yield* Effect.exit((yield* EmailsRepo).list(e.orgId, { limit: 10, after: Option.none() }))
        expect(defectMessage(list)).toContain("email list: a row does not match its schema")
        const messages = yield* Effect.exit((yield* ThreadsRepo).messagesOf(e.orgId, [e.thread_id]))
        expect(defectMessage(messages)).toContain("thread messages: a row does not match its schema")
      }))
  })
})
