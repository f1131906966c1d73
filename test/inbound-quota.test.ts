/**
 * One SMTP transaction cannot amplify itself, and storage quotas hold at ingestion: over a raw SMTP
 * socket to the service, a recipient repeated a hundred times (in every case, with any `+tag`) is
 * stored and delivered once, and an organization past its plan's `storage_mb` gets `452 4.2.2` (at RCPT, or at
 * the end of DATA once the size is known) with nothing stored, also when transactions race.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer, Option } from "effect"
import { LIMITS, type Plan } from "../src/contract/Plans.js"
import type { EndpointRow } from "../src/endpoints/Repo.js"
import { Provisioning } from "../src/identity/Provisioning.js"
import type { Recipient } from "../src/inbound/Recipients.js"
import { distinctRecipients } from "../src/inbound/Store.js"
import { TestServer, testService } from "./support/harness.js"
import { eventually, startHooks } from "./support/hooks.js"
import { call } from "./support/http.js"
import { openSmtp, type SmtpReply } from "./support/smtpClient.js"

const Env = Provisioning.Default.pipe(Layer.provideMerge(testService({ DNS_SERVER: "127.0.0.1:9" })))

const newOrg = (plan: Plan) =>
  Effect.gen(function*() {
    const p = yield* Provisioning
    const org = yield* p.createOrganization({ name: "Quota", plan })
    const key = yield* p.issueApiKey(org.id)
    return { orgId: org.id, token: key.apiKey, address: org.managedInboxAddress! }
  })

const message = (to: string, bodyBytes: number, subject = "quota") =>
  [
    "From: Ann <ann@example.com>",
    `To: ${to}`,
    `Subject: ${subject}`,
    "Message-ID: <" + crypto.randomUUID() + "@example.com>",
    "MIME-Version: 1.0",
    "Content-Type: text/plain; charset=utf-8",
    "",
    // Lines of 76 characters, as a mail client would wrap them.
    ...Array.from({ length: Math.ceil(bodyBytes / 78) }, () => "x".repeat(76))
  ].join("\r\n")

interface Transaction {
  readonly mailFrom: SmtpReply
  readonly rcpts: ReadonlyArray<SmtpReply>
  readonly data: SmtpReply | null
}

/** One SMTP transaction over a raw socket; DATA only when some recipient was accepted. */
const transaction = (rcpts: ReadonlyArray<string>, body: string, mailFromArgs = "") =>
  Effect.flatMap(TestServer, (server) =>
    Effect.promise(async (): Promise<Transaction> => {
      const smtp = await openSmtp(server.smtpPort)
      try {
        await smtp.command("EHLO client.example")
        const mailFrom = await smtp.command(`MAIL FROM:<ann@example.com>${mailFromArgs}`)
        const replies: Array<SmtpReply> = []
        for (const r of rcpts) replies.push(await smtp.command(`RCPT TO:<${r}>`))
        if (!replies.some((r) => r.code === 250)) return { mailFrom, rcpts: replies, data: null }
        const go = await smtp.command("DATA")
        if (go.code !== 354) return { mailFrom, rcpts: replies, data: go }
        const data = await smtp.data(body)
        await smtp.command("QUIT")
        return { mailFrom, rcpts: replies, data }
      } finally {
        smtp.close()
      }
    }))

const stored = (orgId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ n: number; bytes: string }>`SELECT count(*)::int AS n, coalesce(sum(size_bytes), 0)::bigint AS bytes FROM emails WHERE org_id = ${orgId}`
  ).pipe(Effect.map((rows) => ({ n: rows[0]!.n, bytes: Number(rows[0]!.bytes) })))

/** Stored bytes the test puts in place directly (as earlier mail would have). */
const fill = (orgId: string, bytes: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql`INSERT INTO emails (org_id, recipient, size_bytes, event_type, status)
        VALUES (${orgId}, 'filler@agents.localhost', ${bytes}, 'email.received', 'accepted')`
  )

const storage = (token: string) => Effect.map(call("GET", "/v1/account/storage", { token }), (r) => r.body.data)

const caseVariant = (address: string, i: number) =>
  address.split("").map((c, j) => ((i >> (j % 8)) & 1 ? c.toUpperCase() : c)).join("")

layer(Env, { timeout: 180_000, excludeTestServices: true })("inbound quota", (it) => {
  describe("recipients", () => {
    it.scoped("100 RCPTs of one address (exact and case variants) store one email and cause one delivery", () =>
      Effect.gen(function*() {
        const hooks = yield* startHooks
        const org = yield* newOrg("developer")
        expect((yield* call("POST", "/v1/endpoints", { token: org.token, body: { url: hooks.url("/amp") } })).status).toBe(201)
        const rcpts = Array.from({ length: 100 }, (_, i) => (i % 3 === 0 ? org.address : caseVariant(org.address, i)))
        expect(new Set(rcpts).size).toBeGreaterThan(10)
        const t = yield* transaction(rcpts, message(org.address, 1_100_000))
        expect(t.rcpts.every((r) => r.code === 250)).toBe(true)
        expect(t.data?.code).toBe(250)
        expect(yield* stored(org.orgId)).toMatchObject({ n: 1 })
        yield* eventually(() => hooks.on("/amp").length >= 1)
        // Deliveries are made at once; a second would have arrived by now.
        yield* Effect.sleep("1500 millis")
        expect(hooks.on("/amp").length).toBe(1)
        const s = yield* storage(org.token)
        expect(s.emails_count).toBe(1)
        expect(s.used_bytes).toBeGreaterThan(1_100_000)
        expect(s.used_bytes).toBeLessThan(1_200_000)
      }))

    it.scoped("100 RCPTs of +tag variants of one inbox store one email and cause one delivery; another organization keeps its copy", () =>
      Effect.gen(function*() {
        const hooks = yield* startHooks
        const org = yield* newOrg("developer")
        const other = yield* newOrg("developer")
        expect((yield* call("POST", "/v1/endpoints", { token: org.token, body: { url: hooks.url("/tags") } })).status).toBe(201)
        const [local, domain] = org.address.split("@")
        const rcpts = [
          ...Array.from({ length: 99 }, (_, i) => caseVariant(`${local}+tag${i}@${domain}`, i)),
          other.address
        ]
        const t = yield* transaction(rcpts, message(org.address, 200_000))
        expect(t.rcpts.every((r) => r.code === 250)).toBe(true)
        expect(t.data?.code).toBe(250)
        expect(yield* stored(org.orgId)).toMatchObject({ n: 1 })
        expect(yield* stored(other.orgId)).toMatchObject({ n: 1 })
        yield* eventually(() => hooks.on("/tags").length >= 1)
        yield* Effect.sleep("1500 millis")
        expect(hooks.on("/tags").length).toBe(1)
      }))

    it.effect("one copy per organization, mailbox and destination: a tagged address routed elsewhere keeps its own", () =>
      Effect.sync(() => {
      const endpoint = (id: string) => Option.some({ id } as EndpointRow)
      const recipient = (address: string, orgId: string, to: Option.Option<EndpointRow>): Recipient => ({
        address,
        orgId,
        domainId: null,
        spamThreshold: null,
        filters: [],
        resolution: { orgId, domainId: null, via: "fallback", routeId: null, endpoint: to },
        wake: null,
        inboxId: null,
        org: { usedBytes: 0, quotaBytes: null, attachmentPolicy: null }
      })
      const kept = distinctRecipients([
        recipient("a@x.test", "o1", endpoint("e1")),
        recipient("a+news@x.test", "o1", endpoint("e1")),
        recipient("a+billing@x.test", "o1", endpoint("e2")),
        recipient("a+other@x.test", "o1", Option.none()),
        recipient("a+more@x.test", "o1", Option.none()),
        recipient("b@x.test", "o1", endpoint("e1")),
        recipient("a@x.test", "o2", endpoint("e1"))
      ])
        expect(kept.map((r) => r.address)).toEqual(["a@x.test", "a+billing@x.test", "a+other@x.test", "b@x.test", "a@x.test"])
      }))
  })

  describe("storage quota", () => {
    it.effect("the database quota equals every plan's storage_mb", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        for (const plan of Object.keys(LIMITS) as Array<Plan>) {
          const rows = yield* sql<{ q: string }>`SELECT storage_quota_bytes(${plan})::bigint AS q`
          expect([plan, Number(rows[0]!.q)]).toEqual([plan, LIMITS[plan].storage_mb * 1024 * 1024])
        }
      }))

    it.effect("past the quota: 452 4.2.2 at DATA (size known), at RCPT (full, or SIZE= too big), nothing stored, never over 100%", () =>
      Effect.gen(function*() {
        const org = yield* newOrg("agent")
        const quota = LIMITS.agent.storage_mb * 1024 * 1024
        yield* fill(org.orgId, quota - 600_000)
        const before = yield* stored(org.orgId)

        // What fits is stored.
        const small = yield* transaction([org.address], message(org.address, 1000))
        expect(small.data?.code).toBe(250)
        const afterSmall = yield* stored(org.orgId)
        expect(afterSmall.n).toBe(before.n + 1)

        // 1.1 MB does not fit: refused once its size is known, nothing stored.
        const big = yield* transaction([org.address], message(org.address, 1_100_000))
        expect(big.rcpts[0]!.code).toBe(250)
        expect(big.data?.code).toBe(452)
        expect(big.data?.text).toMatch(/^4\.2\.2 /)
        expect(yield* stored(org.orgId)).toEqual(afterSmall)

        // Announced with SIZE=: refused at RCPT already.
        const announced = yield* transaction([org.address], message(org.address, 1_100_000), " SIZE=1150000")
        expect(announced.mailFrom.code).toBe(250)
        expect(announced.rcpts[0]!.code).toBe(452)
        expect(announced.rcpts[0]!.text).toMatch(/^4\.2\.2 /)
        expect(announced.data).toBeNull()

        // Five copies of a 200 KB message for the same organization were 1 MB; deduplicated they are 200 KB and fit.
        const repeated = yield* transaction(Array.from({ length: 5 }, () => org.address), message(org.address, 200_000))
        expect(repeated.data?.code).toBe(250)

        const s = yield* storage(org.token)
        expect(s.percentage).toBeLessThanOrEqual(100)
        expect(s.used_bytes).toBeLessThanOrEqual(quota)
        expect(s.used_bytes).toBe((yield* stored(org.orgId)).bytes)

        // Exactly full: every recipient of the organization is refused at RCPT.
        yield* fill(org.orgId, quota - s.used_bytes)
        const full = yield* transaction([org.address], message(org.address, 10))
        expect(full.rcpts[0]!.code).toBe(452)
        expect(full.rcpts[0]!.text).toMatch(/^4\.2\.2 /)
        expect((yield* storage(org.token)).percentage).toBe(100)
        // Another organization is not affected.
        const other = yield* newOrg("agent")
        expect((yield* transaction([other.address], message(other.address, 10))).data?.code).toBe(250)
      }))

    // 300 KB messages are written one statement each; 100 KB ones go through the group commit,
    // where one organization's full quota must not cost the others in the batch their acceptance.
    for (const size of [300_000, 100_000]) {
      it.effect(`racing transactions cannot pass the quota together: room for three ${size / 1000} KB messages, eight in parallel, three stored`, () =>
        Effect.gen(function*() {
          const org = yield* newOrg("agent")
          const bystander = yield* newOrg("agent")
          const quota = LIMITS.agent.storage_mb * 1024 * 1024
          yield* fill(org.orgId, quota - Math.round(size * 3.3))
          const before = yield* stored(org.orgId)
          const results = yield* Effect.all(
            [
              ...Array.from({ length: 8 }, (_, i) => transaction([org.address], message(org.address, size, `race ${i}`))),
              ...Array.from({ length: 4 }, (_, i) => transaction([bystander.address], message(bystander.address, size, `other ${i}`)))
            ],
            { concurrency: "unbounded" }
          )
          const codes = results.slice(0, 8).map((r) => r.data?.code ?? r.rcpts[0]!.code).sort()
          expect(codes).toEqual([250, 250, 250, 452, 452, 452, 452, 452])
          expect(results.slice(8).map((r) => r.data?.code)).toEqual([250, 250, 250, 250])
          const after = yield* stored(org.orgId)
          expect(after.n).toBe(before.n + 3)
          expect(after.bytes).toBeLessThanOrEqual(quota)
          expect((yield* storage(org.token)).used_bytes).toBe(after.bytes)
          expect((yield* stored(bystander.orgId)).n).toBe(4)
        }))
    }

    it.effect("deleting mail frees its storage", () =>
      Effect.gen(function*() {
        const org = yield* newOrg("agent")
        expect((yield* transaction([org.address], message(org.address, 5000))).data?.code).toBe(250)
        const s = yield* storage(org.token)
        expect(s.emails_count).toBe(1)
        const list = yield* call("GET", "/v1/emails", { token: org.token })
        expect((yield* call("DELETE", `/v1/emails/${list.body.data[0].id}`, { token: org.token })).status).toBe(200)
        expect(yield* storage(org.token)).toMatchObject({ used_bytes: 0, emails_count: 0 })
      }))
  })
})
