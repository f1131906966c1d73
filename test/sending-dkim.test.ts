/**
 * DKIM of outgoing mail, checked by an independent verifier (mailauth) against the public keys
 * published in a test DNS server: a claimed domain's own key (shown by GET /domains/{id}), the
 * managed inbox domain's service key, and the wake emails signed with it.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import { dkimVerify } from "mailauth/lib/dkim/verify.js"
import { Resolver } from "node:dns/promises"
import { Provisioning } from "../src/identity/Provisioning.js"
import { DkimKeys } from "../src/domains/Dkim.js"
import { commandOf, composeWake } from "../src/mail/WakeMessage.js"
import { TestDns, testServiceWithDns } from "./support/dns.js"
import { call } from "./support/http.js"
import { startTestRelay, type TestRelay } from "./support/relay.js"

class Relay extends Context.Tag("test/Relay")<Relay, TestRelay>() {}

const Env = Layer.mergeAll(Provisioning.Default, DkimKeys.Default).pipe(
  Layer.provideMerge(Layer.unwrapScoped(Effect.map(startTestRelay, (relay) =>
    testServiceWithDns({ OUTBOUND_SMTP_URL: relay.url }).pipe(Layer.merge(Layer.succeed(Relay, relay))))))
)
const MANAGED = "agents.localhost"

let seq = 0
const unique = (label: string) => `${label}-${++seq}-${Math.random().toString(36).slice(2, 7)}`

const newOrg = () =>
  Effect.gen(function*() {
    const p = yield* Provisioning
    const org = yield* p.createOrganization({ name: "Signer", plan: "developer" })
    const key = yield* p.issueApiKey(org.id)
    return { orgId: org.id, token: key.apiKey, inbox: org.managedInboxAddress! }
  })

/** A TXT value as DNS carries it: character strings of at most 255 bytes. */
const chunks = (value: string) => Array.from({ length: Math.ceil(value.length / 255) }, (_, i) => value.slice(i * 255, i * 255 + 255))

const verify = (raw: Buffer) =>
  Effect.flatMap(TestDns, (dns) =>
    Effect.promise(() => {
      const resolver = new Resolver({ timeout: 1000, tries: 1 })
      resolver.setServers([`127.0.0.1:${dns.port}`])
      return dkimVerify(raw, { resolver: (name: string, type: string) => resolver.resolve(name, type) as never })
    }))

const resultOf = (r: Awaited<ReturnType<typeof dkimVerify>>) =>
  r.results.map((x) => ({ domain: x.signingDomain, result: x.status.result }))

layer(Env, { timeout: 120_000, excludeTestServices: true })("DKIM", (it) => {
  describe("a claimed domain", () => {
    it.effect("gets a key at claim (dns_records purpose dkim); its mail verifies against it, and fails when altered", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const dns = yield* TestDns
        const domain = `${unique("mail")}.test`
        const claim = yield* call("POST", "/v1/domains", { token: org.token, body: { domain } })
        expect(claim.status, claim.text).toBe(201)
        const id = claim.body.data.id
        const got = yield* call("GET", `/v1/domains/${id}`, { token: org.token })
        expect(got.status).toBe(200)
        const dkim = got.body.data.dns_records.find((r: { purpose: string }) => r.purpose === "dkim")
        expect(dkim).toMatchObject({ type: "TXT", name: `mailroom._domainkey.${domain}`, purpose: "dkim" })
        expect(dkim.value).toMatch(/^v=DKIM1; k=rsa; p=[A-Za-z0-9+/]+=*$/)
        expect(got.body.data.dns_records.map((r: { purpose: string }) => r.purpose)).toEqual(["verification", "inbound", "dkim"])
        // The key was made at claim: the claim's answer already showed it.
        expect(claim.body.data.dns_records.find((r: { purpose: string }) => r.purpose === "dkim")).toEqual(dkim)

        dns.zone.set(`_mailroom.${domain}`, { TXT: [`mailroom-verification=${claim.body.data.verification_token}`] })
        dns.zone.set(domain, { MX: [{ exchange: `mx.${MANAGED}`, priority: 10 }] })
        const v = yield* call("POST", `/v1/domains/${id}/verify`, { token: org.token })
        expect(v.body.data.verified, v.text).toBe(true)
        expect(v.body.data.dns_records.find((r: { purpose: string }) => r.purpose === "dkim")).toEqual(dkim)

        const to = `${unique("r")}@example.com`
        const sent = yield* call("POST", "/v1/send-mail", {
          token: org.token,
          body: { from: `Hello <hello@${domain}>`, to, subject: "signed", text: "signed body\n", html: "<b>signed</b>" }
        })
        expect(sent.status, sent.text).toBe(201)
        const relay = yield* Relay
        const m = relay.messages.find((x) => x.to.includes(to))!
        // Unpublished: no key to check against.
        expect(resultOf(yield* verify(m.raw))[0]!.result).not.toBe("pass")
        dns.zone.set(dkim.name, { TXT: [chunks(dkim.value)] })
        expect(resultOf(yield* verify(m.raw))).toEqual([{ domain, result: "pass" }])
        // A changed body no longer matches the body hash; a changed signed header breaks the signature.
        const body = Buffer.from(m.raw.toString("latin1").replace("signed body", "forged body"), "latin1")
        expect(resultOf(yield* verify(body))[0]!.result).toBe("neutral")
        const header = Buffer.from(m.raw.toString("latin1").replace("Subject: signed", "Subject: forged"), "latin1")
        expect(resultOf(yield* verify(header))[0]!.result).toBe("fail")
      }))
  })

  describe("the managed inbox domain", () => {
    it.effect("mail from a managed inbox and the wake emails verify against the service key", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const dns = yield* TestDns
        const sql = yield* SqlClient.SqlClient
        const to = `${unique("r")}@example.com`
        const sent = yield* call("POST", "/v1/send-mail", { token: org.token, body: { from: org.inbox, to, subject: "hi", text: "hello" } })
        expect(sent.status, sent.text).toBe(201)
        const keys = yield* sql<{ selector: string; public_key: string; private_key: string }>`
          SELECT selector, public_key, private_key FROM dkim_keys WHERE domain = ${MANAGED} AND domain_id IS NULL`
        expect(keys).toHaveLength(1)
        // Kept sealed: the database alone holds no usable private key.
        expect(keys[0]!.private_key).toMatch(/^v1:/)
        expect(keys[0]!.private_key).not.toContain("PRIVATE KEY")
        dns.zone.set(`${keys[0]!.selector}._domainkey.${MANAGED}`, { TXT: [chunks(`v=DKIM1; k=rsa; p=${keys[0]!.public_key}`)] })
        const relay = yield* Relay
        const m = relay.messages.find((x) => x.to.includes(to))!
        expect(resultOf(yield* verify(m.raw))).toEqual([{ domain: MANAGED, result: "pass" }])

        const signing = yield* Effect.flatMap(DkimKeys, (k) => k.managedSigning)
        const wake = yield* Effect.promise(() =>
          composeWake({
            domain: MANAGED,
            functionId: "00000000-0000-4000-8000-000000000001",
            wakeId: "00000000-0000-4000-8000-000000000002",
            threadId: null,
            type: "digest.daily",
            payload: { n: 1 },
            scheduledFor: new Date(),
            firedAt: new Date(),
            secret: "s3cret",
            dkim: signing
          })
        )
        expect(resultOf(yield* verify(wake.raw))).toEqual([{ domain: MANAGED, result: "pass" }])
        // The firing takes the command from the composer instead of parsing the MIME it just wrote:
        // the two must be the same command, signature included.
        const parsed = yield* Effect.promise(() => commandOf(wake.raw))
        expect("problem" in wake.command).toBe(false)
        expect(wake.command).toEqual(parsed)
        expect(wake.command).toMatchObject({ type: "digest.daily", payload: { n: 1 }, wakeId: "00000000-0000-4000-8000-000000000002" })
      }))
  })
})
