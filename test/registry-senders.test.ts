/**
 * Registry-verified senders end to end: mail over real SMTP whose From is a published entry's
 * address, authenticated (or not) against records in a test DNS server, delivered to a real webhook
 * receiver; the payload's `email.sender` and `trust.registry_verified`, and sender filters of type `registry`.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { generateKeyPairSync } from "node:crypto"
import nodemailer, { type SendMailOptions } from "nodemailer"
import { Provisioning } from "../src/identity/Provisioning.js"
import { TestServer } from "./support/harness.js"
import { TestDns, testServiceWithDns } from "./support/dns.js"
import { eventually, type Hooks, startHooks } from "./support/hooks.js"
import { call, type JsonBody } from "./support/http.js"

const Env = Provisioning.Default.pipe(Layer.provideMerge(testServiceWithDns({ DELIVERY_RETRY_DELAYS: "200ms" })))
const MANAGED = "agents.localhost"

let seq = 0
const unique = (label: string) => `${label}-${++seq}-${Math.random().toString(36).slice(2, 7)}`

const newOrg = (plan: "agent" | "developer" | "pro" = "developer") =>
  Effect.gen(function*() {
    const p = yield* Provisioning
    const org = yield* p.createOrganization({ name: "Senders", plan })
    const key = yield* p.issueApiKey(org.id)
    return { orgId: org.id, token: key.apiKey, inbox: org.managedInboxAddress }
  })

/** A verified domain of the organization, with more DNS records (SPF, DMARC, DKIM) for its mail. */
const verifiedDomain = (token: string, records: { spf?: string; dmarc?: string; dkim?: { selector: string; publicKey: string } }) =>
  Effect.gen(function*() {
    const dns = yield* TestDns
    const domain = `${unique("mail")}.test`
    const claim = yield* call("POST", "/v1/domains", { token, body: { domain } })
    expect(claim.status, claim.text).toBe(201)
    dns.zone.set(`_mailroom.${domain}`, { TXT: [`mailroom-verification=${claim.body.data.verification_token}`] })
    dns.zone.set(domain, {
      MX: [{ exchange: `mx.${MANAGED}`, priority: 10 }],
      A: ["127.0.0.1"],
      ...(records.spf ? { TXT: [records.spf] } : {})
    })
    if (records.dmarc) dns.zone.set(`_dmarc.${domain}`, { TXT: [records.dmarc] })
    if (records.dkim) dns.zone.set(`${records.dkim.selector}._domainkey.${domain}`, { TXT: [records.dkim.publicKey] })
    const v = yield* call("POST", `/v1/domains/${claim.body.data.id}/verify`, { token })
    expect(v.body.data.verified).toBe(true)
    return domain
  })

/** An RSA key pair for DKIM: the PEM private key and the DNS record of its public key (1024 bits: one TXT string). */
const dkimKey = () => {
  const { privateKey, publicKey } = generateKeyPairSync("rsa", { modulusLength: 1024 })
  const spki = publicKey.export({ type: "spki", format: "der" }).toString("base64")
  return { privateKey: privateKey.export({ type: "pkcs8", format: "pem" }).toString(), record: `v=DKIM1; k=rsa; p=${spki}` }
}

const send = (message: SendMailOptions) =>
  Effect.flatMap(TestServer, (server) =>
    Effect.promise(async () => {
      const transport = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
      try {
        const info = await transport.sendMail(message)
        const id = /queued as ([0-9a-f-]{36})/.exec(String(info.response))?.[1]
        if (id === undefined) throw new Error(`unexpected SMTP answer ${info.response}`)
        return id
      } finally {
        transport.close()
      }
    }))

/** A receiving organization whose every inbound mail goes to `hooks` at `path`. */
const receiver = (hooks: Hooks, path: string) =>
  Effect.gen(function*() {
    const org = yield* newOrg()
    const e = yield* call("POST", "/v1/endpoints", { token: org.token, body: { url: hooks.url(path) } })
    expect(e.status, e.text).toBe(201)
    return org
  })

/** The delivered event of one stored email. */
const eventOf = (hooks: Hooks, path: string, emailId: string) =>
  Effect.map(
    eventually(() => hooks.on(path).map((h) => JSON.parse(h.body) as JsonBody).find((e) => e.email.id === emailId), 20_000, `the event of ${emailId}`),
    (e) => e as { email: Record<string, unknown> & { auth: Record<string, string> } }
  )

const deliveriesOf = (emailId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ n: number }>`SELECT count(*)::int AS n FROM deliveries WHERE email_id = ${emailId}`.pipe(Effect.map((r) => r[0]!.n), Effect.orDie))

const createRegistry = (token: string, name = unique("reg"), policy = "owner_only") =>
  Effect.gen(function*() {
    const r = yield* call("POST", "/v1/registries", { token, body: { name, publish_policy: policy } })
    expect(r.status, r.text).toBe(201)
    return name
  })

const publish = (token: string, registry: string, handle: string, address: string) =>
  Effect.gen(function*() {
    const r = yield* call("POST", `/v1/registries/${registry}/entries`, { token, body: { handle, address } })
    expect(r.status, r.text).toBe(201)
  })

const SPF_LOCAL = "v=spf1 ip4:127.0.0.1 -all"
const DMARC_REJECT = "v=DMARC1; p=reject"

layer(Env, { timeout: 180_000, excludeTestServices: true })("registry-verified senders", (it) => {
  describe("the payload's sender", () => {
    it.effect("DMARC pass: `sender` names the entry; DMARC fail for the same kind of entry: no `sender`", () =>
      Effect.scoped(Effect.gen(function*() {
        const hooks = yield* startHooks
        const publisher = yield* newOrg()
        const passing = yield* verifiedDomain(publisher.token, { spf: SPF_LOCAL, dmarc: DMARC_REJECT })
        // SPF refuses every sender for this one, so DMARC (p=reject) fails.
        const failing = yield* verifiedDomain(publisher.token, { spf: "v=spf1 -all", dmarc: DMARC_REJECT })
        const registry = yield* createRegistry(publisher.token, unique("acme-agents"))
        yield* publish(publisher.token, registry, "billing", `billing@${passing}`)
        yield* publish(publisher.token, registry, "support", `support@${failing}`)
        const to = yield* receiver(hooks, "/ok")

        const good = yield* send({ from: `Billing Bot <billing@${passing}>`, to: to.inbox, subject: "Invoice", text: "pay" })
        const goodEvent = yield* eventOf(hooks, "/ok", good)
        expect(goodEvent.email.auth).toMatchObject({ spf: "pass", dmarc: "pass" })
        expect(goodEvent.email.from).toBe(`Billing Bot <billing@${passing}>`)
        expect(goodEvent.email.sender).toEqual({ registry, handle: "billing", verified: true })
        // Next to `from`, where a reader looks for who sent it.
        expect(Object.keys(goodEvent.email).indexOf("sender")).toBe(Object.keys(goodEvent.email).indexOf("from") + 1)

        const bad = yield* send({ from: `support@${failing}`, to: to.inbox, subject: "Spoof?", text: "x" })
        const badEvent = yield* eventOf(hooks, "/ok", bad)
        expect(badEvent.email.auth).toMatchObject({ spf: "fail", dmarc: "fail" })
        expect(badEvent.email).not.toHaveProperty("sender")

        // The passing domain's address, but the envelope (SPF) is another domain's: DMARC is not aligned.
        const unaligned = yield* send({
          from: `billing@${passing}`,
          envelope: { from: `bounce@${failing}`, to: to.inbox },
          to: to.inbox,
          subject: "Unaligned",
          text: "x"
        })
        const unalignedEvent = yield* eventOf(hooks, "/ok", unaligned)
        expect(unalignedEvent.email.auth.dmarc).toBe("fail")
        expect(unalignedEvent.email).not.toHaveProperty("sender")

        // An address of the domain that is not published: authenticated, but no entry.
        const other = yield* send({ from: `ceo@${passing}`, to: to.inbox, subject: "Hi", text: "x" })
        const otherEvent = yield* eventOf(hooks, "/ok", other)
        expect(otherEvent.email.auth.dmarc).toBe("pass")
        expect(otherEvent.email).not.toHaveProperty("sender")
      })))

    it.effect("trust.registry_verified: true for a verified entry's mail (payload and API), false when unproven or unpublished", () =>
      Effect.scoped(Effect.gen(function*() {
        const hooks = yield* startHooks
        const publisher = yield* newOrg()
        const passing = yield* verifiedDomain(publisher.token, { spf: SPF_LOCAL, dmarc: DMARC_REJECT })
        const failing = yield* verifiedDomain(publisher.token, { spf: "v=spf1 -all", dmarc: DMARC_REJECT })
        const registry = yield* createRegistry(publisher.token)
        yield* publish(publisher.token, registry, "billing", `billing@${passing}`)
        yield* publish(publisher.token, registry, "support", `support@${failing}`)
        const to = yield* receiver(hooks, "/trust")
        const trustOf = (id: string) =>
          Effect.gen(function*() {
            const event = yield* eventOf(hooks, "/trust", id)
            const stored = yield* call("GET", `/v1/emails/${id}`, { token: to.token })
            expect(stored.status, stored.text).toBe(200)
            expect(stored.body.data.trust).toEqual(event.email.trust)
            return event.email.trust as Record<string, unknown>
          })

        const verified = yield* send({ from: `billing@${passing}`, to: to.inbox, subject: "Invoice", text: "pay" })
        expect(yield* trustOf(verified)).toMatchObject({ sender_authenticated: true, registry_verified: true })
        // Published, but DMARC fails: not proven, so not verified.
        const spoofed = yield* send({ from: `support@${failing}`, to: to.inbox, subject: "Spoof?", text: "x" })
        expect(yield* trustOf(spoofed)).toMatchObject({ sender_authenticated: false, registry_verified: false })
        // Proven, but no entry has this address.
        const unpublished = yield* send({ from: `ceo@${passing}`, to: to.inbox, subject: "Hi", text: "x" })
        expect(yield* trustOf(unpublished)).toMatchObject({ sender_authenticated: true, registry_verified: false })
      })))

    it.effect("DKIM aligned with the From domain verifies without DMARC; an unaligned signature does not", () =>
      Effect.scoped(Effect.gen(function*() {
        const hooks = yield* startHooks
        const publisher = yield* newOrg()
        const key = dkimKey()
        // No SPF and no DMARC record: only the signature can prove the From.
        const signed = yield* verifiedDomain(publisher.token, { dkim: { selector: "mr", publicKey: key.record } })
        const otherKey = dkimKey()
        const thirdParty = yield* verifiedDomain(publisher.token, { dkim: { selector: "tp", publicKey: otherKey.record } })
        const registry = yield* createRegistry(publisher.token)
        yield* publish(publisher.token, registry, "agent", `agent@${signed}`)
        const to = yield* receiver(hooks, "/dkim")

        const good = yield* send({
          from: `agent@${signed}`,
          to: to.inbox,
          subject: "Signed",
          text: "signed body",
          dkim: { domainName: signed, keySelector: "mr", privateKey: key.privateKey }
        })
        const goodEvent = yield* eventOf(hooks, "/dkim", good)
        expect(goodEvent.email.auth).toMatchObject({ dkim: "pass", dmarc: "none" })
        expect(goodEvent.email.sender).toEqual({ registry, handle: "agent", verified: true })

        // A valid signature of another domain (d=) proves nothing about this From.
        const unaligned = yield* send({
          from: `agent@${signed}`,
          to: to.inbox,
          subject: "Signed elsewhere",
          text: "signed body",
          dkim: { domainName: thirdParty, keySelector: "tp", privateKey: otherKey.privateKey }
        })
        const unalignedEvent = yield* eventOf(hooks, "/dkim", unaligned)
        expect(unalignedEvent.email.auth).toMatchObject({ dkim: "pass", dmarc: "none" })
        expect(unalignedEvent.email).not.toHaveProperty("sender")

        // No signature at all.
        const plain = yield* send({ from: `agent@${signed}`, to: to.inbox, subject: "Plain", text: "x" })
        expect((yield* eventOf(hooks, "/dkim", plain)).email).not.toHaveProperty("sender")
      })))

    it.effect("several entries with the address: a list ordered by registry then handle; pending and removed entries do not count", () =>
      Effect.scoped(Effect.gen(function*() {
        const hooks = yield* startHooks
        const publisher = yield* newOrg()
        const owner = yield* newOrg()
        const domain = yield* verifiedDomain(publisher.token, { spf: SPF_LOCAL, dmarc: DMARC_REJECT })
        const address = `ops@${domain}`
        const first = yield* createRegistry(publisher.token, `a-${unique("dir")}`)
        const second = yield* createRegistry(owner.token, `b-${unique("dir")}`, "open")
        const moderated = yield* createRegistry(owner.token, `c-${unique("dir")}`, "request")
        yield* publish(publisher.token, first, "ops", address)
        yield* publish(publisher.token, first, "oncall", address)
        yield* publish(publisher.token, second, "ops-team", address)
        yield* publish(publisher.token, moderated, "ops", address)
        const to = yield* receiver(hooks, "/many")

        const id = yield* send({ from: address, to: to.inbox, subject: "Many", text: "x" })
        expect((yield* eventOf(hooks, "/many", id)).email.sender).toEqual([
          { registry: first, handle: "oncall", verified: true },
          { registry: first, handle: "ops", verified: true },
          { registry: second, handle: "ops-team", verified: true }
        ])

        // Approved: the moderated registry joins; the open one's entry removed: it leaves.
        expect((yield* call("POST", `/v1/registries/${moderated}/entries/ops/approve`, { token: owner.token })).status).toBe(200)
        expect((yield* call("DELETE", `/v1/registries/${second}/entries/ops-team`, { token: owner.token })).status).toBe(200)
        yield* call("DELETE", `/v1/registries/${first}/entries/oncall`, { token: publisher.token })
        const again = yield* send({ from: address, to: to.inbox, subject: "Fewer", text: "x" })
        expect((yield* eventOf(hooks, "/many", again)).email.sender).toEqual([
          { registry: first, handle: "ops", verified: true },
          { registry: moderated, handle: "ops", verified: true }
        ])
      })))

    it.effect("a managed inbox entry is verified by DKIM or DMARC of the managed domain only; a lost domain no longer vouches", () =>
      Effect.scoped(Effect.gen(function*() {
        const hooks = yield* startHooks
        const publisher = yield* newOrg()
        const domain = yield* verifiedDomain(publisher.token, { spf: SPF_LOCAL, dmarc: DMARC_REJECT })
        const registry = yield* createRegistry(publisher.token)
        yield* publish(publisher.token, registry, "desk", `desk@${domain}`)
        // The managed domain publishes no SPF or DMARC here: mail claiming the inbox proves nothing.
        yield* publish(publisher.token, registry, "inbox", publisher.inbox)
        const to = yield* receiver(hooks, "/lost")

        const inboxMail = yield* send({ from: publisher.inbox, to: to.inbox, subject: "From the inbox", text: "x" })
        expect((yield* eventOf(hooks, "/lost", inboxMail)).email).not.toHaveProperty("sender")

        const before = yield* send({ from: `desk@${domain}`, to: to.inbox, subject: "Before", text: "x" })
        expect((yield* eventOf(hooks, "/lost", before)).email.sender).toEqual({ registry, handle: "desk", verified: true })
        // The publisher removes the domain: its entry stays listed but vouches for nobody.
        const domains = yield* call("GET", "/v1/domains", { token: publisher.token })
        const id = domains.body.data.find((d: { domain: string }) => d.domain === domain).id
        expect((yield* call("DELETE", `/v1/domains/${id}`, { token: publisher.token })).status).toBe(200)
        const after = yield* send({ from: `desk@${domain}`, to: to.inbox, subject: "After", text: "x" })
        const afterEvent = yield* eventOf(hooks, "/lost", after)
        expect(afterEvent.email.auth.dmarc).toBe("pass")
        expect(afterEvent.email).not.toHaveProperty("sender")
      })))
  })

  describe("registry filters", () => {
    it.effect("create: the registry must exist; the pattern is a registry name; listed like other filters", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const registry = yield* createRegistry(org.token)
        const made = yield* call("POST", "/v1/filters", { token: org.token, body: { type: "registry", pattern: ` ${registry.toUpperCase()} ` } })
        expect(made.status, made.text).toBe(201)
        expect(made.body.data).toMatchObject({ type: "registry", pattern: registry, domain_id: null, enabled: true })
        const dup = yield* call("POST", "/v1/filters", { token: org.token, body: { type: "registry", pattern: registry } })
        expect([dup.status, dup.body.error.code]).toEqual([409, "conflict"])
        const missing = yield* call("POST", "/v1/filters", { token: org.token, body: { type: "registry", pattern: "no-such-registry" } })
        expect([missing.status, missing.body.error.code]).toEqual([404, "not_found"])
        for (const bad of [{ type: "registry", pattern: "a@b.com" }, { type: "registry", pattern: "" }, { type: "whitelist", pattern: registry }]) {
          const r = yield* call("POST", "/v1/filters", { token: org.token, body: bad })
          expect([r.status, r.body.error.code], JSON.stringify(bad)).toEqual([400, "validation_error"])
          expect(r.body.error.details.issues[0].field).toBe("pattern")
        }
        const list = yield* call("GET", "/v1/filters", { token: org.token })
        expect(list.body.data.map((f: { type: string }) => f.type)).toEqual(["registry"])
        // Another organization's registry is as good: registries are public.
        const other = yield* newOrg()
        const theirs = yield* createRegistry(other.token)
        expect((yield* call("POST", "/v1/filters", { token: org.token, body: { type: "registry", pattern: theirs } })).status).toBe(201)
      }))

    it.effect("over SMTP: only senders verified in the registry are delivered; a whitelist still admits; a blocklist is overridden", () =>
      Effect.scoped(Effect.gen(function*() {
        const hooks = yield* startHooks
        const publisher = yield* newOrg()
        const outsider = yield* newOrg()
        const good = yield* verifiedDomain(publisher.token, { spf: SPF_LOCAL, dmarc: DMARC_REJECT })
        const bad = yield* verifiedDomain(publisher.token, { spf: "v=spf1 -all", dmarc: DMARC_REJECT })
        const other = yield* verifiedDomain(outsider.token, { spf: SPF_LOCAL, dmarc: DMARC_REJECT })
        const trusted = yield* createRegistry(publisher.token)
        const elsewhere = yield* createRegistry(outsider.token)
        yield* publish(publisher.token, trusted, "billing", `billing@${good}`)
        yield* publish(publisher.token, trusted, "spoofable", `billing@${bad}`)
        yield* publish(outsider.token, elsewhere, "sales", `sales@${other}`)

        const to = yield* receiver(hooks, "/filtered")
        expect((yield* call("POST", "/v1/filters", { token: to.token, body: { type: "registry", pattern: trusted } })).status).toBe(201)
        // Blocking the whole domain does not beat the registry allow rule.
        expect((yield* call("POST", "/v1/filters", { token: to.token, body: { type: "blocklist", pattern: `@${good}` } })).status).toBe(201)

        const verified = yield* send({ from: `billing@${good}`, to: to.inbox, subject: "Verified", text: "x" })
        expect((yield* eventOf(hooks, "/filtered", verified)).email.sender).toEqual({ registry: trusted, handle: "billing", verified: true })

        // Published in the registry but failing DMARC; verified but in another registry; not published at all.
        const refused = [
          yield* send({ from: `billing@${bad}`, to: to.inbox, subject: "Spoofed", text: "x" }),
          yield* send({ from: `sales@${other}`, to: to.inbox, subject: "Other registry", text: "x" }),
          yield* send({ from: "stranger@example.org", to: to.inbox, subject: "Stranger", text: "x" })
        ]
        for (const id of refused) expect(yield* deliveriesOf(id)).toBe(0)
        const stored = yield* call("GET", "/v1/emails?limit=10", { token: to.token })
        expect(stored.body.data.map((e: { id: string }) => e.id)).toEqual(expect.arrayContaining(refused))

        // A whitelist is an allow rule of its own.
        expect((yield* call("POST", "/v1/filters", { token: to.token, body: { type: "whitelist", pattern: "stranger@example.org" } })).status).toBe(201)
        const listed = yield* send({ from: "stranger@example.org", to: to.inbox, subject: "Whitelisted", text: "x" })
        expect((yield* eventOf(hooks, "/filtered", listed)).email).not.toHaveProperty("sender")

        // Disabled, the registry filter no longer restricts anything.
        const filters = yield* call("GET", "/v1/filters", { token: to.token })
        for (const f of filters.body.data as Array<{ id: string; type: string }>) {
          if (f.type !== "blocklist") yield* call("PATCH", `/v1/filters/${f.id}`, { token: to.token, body: { enabled: false } })
        }
        const open = yield* send({ from: `sales@${other}`, to: to.inbox, subject: "Open again", text: "x" })
        expect((yield* eventOf(hooks, "/filtered", open)).email.sender).toEqual({ registry: elsewhere, handle: "sales", verified: true })
        // …and the domain's blocklist applies again to the registry sender.
        const blocked = yield* send({ from: `billing@${good}`, to: to.inbox, subject: "Blocked now", text: "x" })
        expect(yield* deliveriesOf(blocked)).toBe(0)
        expect(hooks.on("/filtered").length).toBe(3)
      })))
  })
})
