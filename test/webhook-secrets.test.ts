/**
 * The webhook secret over real SMTP, HTTP receivers and the database: rotation with a grace period
 * (two signatures, then one), secrets sealed at rest (and clear ones from before sealed at start),
 * and the signature debugger's verdicts. Signatures are checked with a Stripe-style verifier
 * written here from node:crypto, independent of the service's signing code.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Cause, Effect, Exit, Layer } from "effect"
import { createHmac, timingSafeEqual } from "node:crypto"
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import nodemailer, { type SendMailOptions } from "nodemailer"
import { SEAL_PURPOSE as TOKEN_KEY_PURPOSE } from "../src/emails/DownloadTokens.js"
import { Provisioning } from "../src/identity/Provisioning.js"
import { open } from "../src/platform/Sealed.js"
import { AppConfig } from "../src/platform/Config.js"
import { deriveKey, MASTER_KEY_FILE, ServiceKey } from "../src/platform/ServiceKey.js"
import { extraServer, makeManualClock, TestServer, testDatabase, testServerOn } from "./support/harness.js"
import { eventually, type Hooks, startHooks } from "./support/hooks.js"
import { call } from "./support/http.js"

const clock = makeManualClock()
let offsetMs = 0
const advance = (ms: number) => {
  offsetMs += ms
  clock.advance(ms)
}
const nowSeconds = () => Math.floor((Date.now() + offsetMs) / 1000)

/** The service's master key, read from its file in DATA_DIR as an operator would. */
const masterKey = Effect.map(AppConfig, (c) => Buffer.from(readFileSync(join(c.dataDir, MASTER_KEY_FILE), "utf8").trim(), "hex"))

const Env = Provisioning.Default.pipe(
  Layer.provideMerge(testServerOn().pipe(Layer.provide(clock.layer), Layer.provideMerge(testDatabase({ DNS_SERVER: "127.0.0.1:9" }))))
)

/** Stripe-style: parse `t` and every `v1`, accept when any v1 equals HMAC-SHA256(secret, "t.body"). */
const hmac = (secret: string, t: number, body: string) =>
  createHmac("sha256", Buffer.from(secret, "utf8")).update(`${t}.${body}`).digest("hex")
const parseSig = (header: string) => {
  const items = header.split(",").map((p) => {
    const i = p.indexOf("=")
    return [p.slice(0, i), p.slice(i + 1)] as const
  })
  return { t: Number(items.find(([k]) => k === "t")?.[1]), v1: items.filter(([k]) => k === "v1").map(([, v]) => v) }
}
const verifies = (header: string, body: string, secret: string, now = nowSeconds()) => {
  const { t, v1 } = parseSig(header)
  if (!Number.isInteger(t) || Math.abs(now - t) > 300) return false
  const expected = Buffer.from(hmac(secret, t, body))
  return v1.some((v) => v.length === expected.length && timingSafeEqual(Buffer.from(v), expected))
}

const send = (message: SendMailOptions) =>
  Effect.flatMap(TestServer, (server) =>
    Effect.promise(async () => {
      const transport = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
      try {
        return await transport.sendMail(message)
      } finally {
        transport.close()
      }
    }))

const orgWithEndpoint = (hooks: Hooks, path: string) =>
  Effect.gen(function*() {
    const p = yield* Provisioning
    const org = yield* p.createOrganization({ name: "Secrets", plan: "developer" })
    const { apiKey } = yield* p.issueApiKey(org.id)
    const created = yield* call("POST", "/v1/endpoints", { token: apiKey, body: { url: hooks.url(path) } })
    expect(created.status).toBe(201)
    return { orgId: org.id, token: apiKey, address: org.managedInboxAddress, endpointId: created.body.data.id as string }
  })

const secretOf = (token: string) => Effect.map(call("GET", "/v1/account/webhook-secret", { token }), (r) => r.body.data)

/** Mail in over SMTP; the delivery's request as the receiver saw it. */
const deliverOne = (hooks: Hooks, path: string, address: string, subject: string) =>
  Effect.gen(function*() {
    const before = hooks.on(path).length
    yield* send({ from: "ann@example.com", to: address, subject, text: "hello" })
    return yield* eventually(() => hooks.on(path)[before], 15_000, `delivery of ${subject}`)
  })

const headerOf = (headers: Record<string, unknown>, name: string) => String(headers[name])

layer(Env, { timeout: 180_000, excludeTestServices: true })("webhook secrets", (it) => {
  describe("rotation grace", () => {
    it.scoped("signs deliveries, endpoint tests and replays with the new and the old secret for 24 hours, then only the new", () =>
      Effect.gen(function*() {
        const hooks = yield* startHooks
        const org = yield* orgWithEndpoint(hooks, "/grace")
        const first = yield* secretOf(org.token)
        expect(first.previous_expires_at).toBeNull()
        const old: string = first.secret

        // Before any rotation: one v1.
        const before = yield* deliverOne(hooks, "/grace", org.address, "before")
        const beforeSig = headerOf(before.headers, "mailroom-signature")
        expect(parseSig(beforeSig).v1).toHaveLength(1)
        expect(verifies(beforeSig, before.body, old)).toBe(true)

        const rotated = yield* call("POST", "/v1/account/webhook-secret/rotate", { token: org.token })
        expect(rotated.status).toBe(200)
        const fresh: string = rotated.body.data.secret
        expect(fresh).not.toBe(old)
        const expiresAt = Date.parse(rotated.body.data.previous_expires_at)
        expect(Math.abs(expiresAt - (Date.now() + offsetMs + 24 * 3600_000))).toBeLessThan(60_000)
        const shown = yield* secretOf(org.token)
        expect(shown).toEqual({ secret: fresh, previous_expires_at: rotated.body.data.previous_expires_at })

        // During the grace period every signed request carries both, the new one first.
        const during = yield* deliverOne(hooks, "/grace", org.address, "during")
        const duringSig = headerOf(during.headers, "mailroom-signature")
        expect(headerOf(during.headers, "legacy-signature")).toBe(duringSig)
        const { t, v1 } = parseSig(duringSig)
        expect(v1).toEqual([hmac(fresh, t, during.body), hmac(old, t, during.body)])
        expect(verifies(duringSig, during.body, fresh)).toBe(true)
        expect(verifies(duringSig, during.body, old)).toBe(true)
        expect(verifies(duringSig, during.body + " ", fresh)).toBe(false)

        const test = yield* call("POST", `/v1/endpoints/${org.endpointId}/test`, { token: org.token })
        expect(test.status).toBe(200)
        const testHit = yield* eventually(() => hooks.on("/grace").find((h) => h.headers["mailroom-test"] === "true"), 10_000, "test send")
        const testSig = headerOf(testHit.headers, "mailroom-signature")
        expect(test.body.data.signature).toBe(testSig)
        expect(headerOf(testHit.headers, "legacy-signature")).toBe(testSig)
        expect(parseSig(testSig).v1).toHaveLength(2)
        expect(verifies(testSig, testHit.body, fresh) && verifies(testSig, testHit.body, old)).toBe(true)

        const list = yield* call("GET", "/v1/webhooks/deliveries", { token: org.token })
        const original = list.body.data.find((d: { event_id: string }) => d.event_id === JSON.parse(before.body).id)
        const count = hooks.on("/grace").length
        const replay = yield* call("POST", `/v1/webhooks/deliveries/${original.id}/replay`, { token: org.token })
        expect(replay.body.data).toMatchObject({ delivered: 1, failed: 0 })
        const replayHit = hooks.on("/grace")[count]!
        expect(replayHit.body).toBe(before.body)
        const replaySig = headerOf(replayHit.headers, "mailroom-signature")
        expect(headerOf(replayHit.headers, "legacy-signature")).toBe(replaySig)
        expect(parseSig(replaySig).v1).toHaveLength(2)
        expect(verifies(replaySig, replayHit.body, fresh) && verifies(replaySig, replayHit.body, old)).toBe(true)

        // After the grace period: only the new secret signs, and the account says none is pending.
        advance(24 * 3600_000 + 60_000)
        expect((yield* secretOf(org.token)).previous_expires_at).toBeNull()
        const after = yield* deliverOne(hooks, "/grace", org.address, "after")
        const afterSig = headerOf(after.headers, "mailroom-signature")
        expect(headerOf(after.headers, "legacy-signature")).toBe(afterSig)
        expect(parseSig(afterSig).v1).toHaveLength(1)
        expect(verifies(afterSig, after.body, fresh)).toBe(true)
        expect(verifies(afterSig, after.body, old)).toBe(false)
        const count2 = hooks.on("/grace").length
        yield* call("POST", `/v1/webhooks/deliveries/${original.id}/replay`, { token: org.token })
        const lateReplay = hooks.on("/grace")[count2]!
        expect(parseSig(headerOf(lateReplay.headers, "mailroom-signature")).v1).toHaveLength(1)
        expect(verifies(headerOf(lateReplay.headers, "mailroom-signature"), lateReplay.body, old)).toBe(false)
      }))
  })

  describe("at rest", () => {
    it.scoped("the database holds no clear secret, and deliveries still verify", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const hooks = yield* startHooks
        const org = yield* orgWithEndpoint(hooks, "/rest")
        const { secret } = yield* secretOf(org.token)
        yield* call("POST", "/v1/account/webhook-secret/rotate", { token: org.token })
        const { secret: next } = yield* secretOf(org.token)
        const rows = yield* sql<{ cur: string; prev: string }>`
          SELECT webhook_secret AS cur, webhook_secret_previous AS prev FROM organizations WHERE id = ${org.orgId}`
        for (const stored of [rows[0]!.cur, rows[0]!.prev]) {
          expect(stored).toMatch(/^v1:[A-Za-z0-9+/]+=*$/)
          expect(stored).not.toContain(secret.slice(6, 20))
          expect(stored).not.toContain(next.slice(6, 20))
          expect(Buffer.from(stored.slice(3), "base64").toString("latin1")).not.toContain(next.slice(6, 20))
        }
        const all = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM organizations
          WHERE webhook_secret LIKE 'whsec_%' OR webhook_secret_previous LIKE 'whsec_%'`
        expect(all[0]!.n).toBe(0)
        const key = yield* sql<{ value: string }>`SELECT value FROM service_secrets WHERE name = 'download_token_key'`
        expect(key[0]!.value.startsWith("v1:")).toBe(true)
        const hit = yield* deliverOne(hooks, "/rest", org.address, "sealed")
        expect(verifies(headerOf(hit.headers, "mailroom-signature"), hit.body, next)).toBe(true)
        // Download links still verify with the sealed token key.
        const event = JSON.parse(hit.body)
        const raw = yield* Effect.promise(() => fetch(event.email.raw_url).then((r) => r.status))
        expect(raw).toBe(200)
        // A sealed value copied to another organization does not open there (bound to its row).
        const other = yield* orgWithEndpoint(hooks, "/other")
        yield* sql`UPDATE organizations SET webhook_secret = ${rows[0]!.cur} WHERE id = ${other.orgId}`
        const stolen = yield* call("GET", "/v1/account/webhook-secret", { token: other.token })
        expect(stolen.status).toBe(500)
        expect(JSON.stringify(stolen.body)).not.toContain(next)
      }))

    it.scoped("a secret and a token key stored in clear before the upgrade are sealed at start and keep working", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const hooks = yield* startHooks
        const org = yield* orgWithEndpoint(hooks, "/legacy")
        const clear = "whsec_ClearFromAnEarlierVersionAAAAAAAAAAAAAAAAAAAA="
        const clearPrev = "whsec_ClearPreviousBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB="
        yield* sql`UPDATE organizations SET webhook_secret = ${clear}, webhook_secret_previous = ${clearPrev},
          webhook_secret_previous_expires_at = ${new Date(Date.now() + offsetMs + 3600_000)} WHERE id = ${org.orgId}`
        // Read in clear as long as it is not yet sealed.
        expect((yield* secretOf(org.token)).secret).toBe(clear)
        // The download-token key as an earlier version stored it: in clear.
        const master = yield* masterKey
        const sealedKey = (yield* sql<{ value: string }>`SELECT value FROM service_secrets WHERE name = 'download_token_key'`)[0]!.value
        const tokenKey = open(deriveKey(master, TOKEN_KEY_PURPOSE), sealedKey, "download_token_key")
        expect(tokenKey).toMatch(/^[A-Za-z0-9_-]{43}$/)
        yield* sql`UPDATE service_secrets SET value = ${tokenKey!} WHERE name = 'download_token_key'`
        // A service started on this database (an upgraded process) seals it.
        yield* extraServer
        const rows = yield* sql<{ cur: string; prev: string }>`
          SELECT webhook_secret AS cur, webhook_secret_previous AS prev FROM organizations WHERE id = ${org.orgId}`
        expect(rows[0]!.cur.startsWith("v1:")).toBe(true)
        expect(rows[0]!.prev.startsWith("v1:")).toBe(true)
        const resealed = (yield* sql<{ value: string }>`SELECT value FROM service_secrets WHERE name = 'download_token_key'`)[0]!.value
        expect(resealed.startsWith("v1:")).toBe(true)
        expect(open(deriveKey(master, TOKEN_KEY_PURPOSE), resealed, "download_token_key")).toBe(tokenKey)
        expect((yield* secretOf(org.token)).secret).toBe(clear)
        const hit = yield* deliverOne(hooks, "/legacy", org.address, "legacy")
        const sig = headerOf(hit.headers, "mailroom-signature")
        expect(verifies(sig, hit.body, clear)).toBe(true)
        expect(verifies(sig, hit.body, clearPrev)).toBe(true)
      }))
  })

  describe("master key", () => {
    it.effect("lives in DATA_DIR/secret.key (0600), never in the database", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const { dataDir } = yield* AppConfig
        const file = join(dataDir, MASTER_KEY_FILE)
        expect(statSync(file).mode & 0o777).toBe(0o600)
        const master = yield* masterKey
        const rows = yield* sql<{ name: string; key: Uint8Array }>`SELECT name, key FROM service_keys`
        expect(rows.map((r) => r.name)).not.toContain("master")
        for (const r of rows) expect(Buffer.from(r.key).equals(master)).toBe(false)
      }))

    it.scoped("a key an earlier version kept in the database moves to the file; another key stops the start", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const config = yield* AppConfig
        const master = yield* masterKey
        const dirs: Array<string> = []
        yield* Effect.addFinalizer(() => Effect.sync(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true }))))
        const startIn = () => {
          const dir = mkdtempSync(join(tmpdir(), "mailroom-key-"))
          dirs.push(dir)
          const layer = ServiceKey.Default.pipe(Layer.provide(Layer.succeed(AppConfig, { ...config, dataDir: dir })))
          return Effect.exit(Effect.scoped(Layer.build(layer))).pipe(Effect.map((exit) => ({ exit, dir })))
        }
        // An upgraded process with no file of its own finds the old row: the key moves out.
        yield* sql`INSERT INTO service_keys (name, key) VALUES ('master', ${master})`
        const moved = yield* startIn()
        expect(Exit.isSuccess(moved.exit)).toBe(true)
        expect(readFileSync(join(moved.dir, MASTER_KEY_FILE), "utf8").trim()).toBe(master.toString("hex"))
        expect(yield* sql`SELECT 1 FROM service_keys WHERE name = 'master'`).toHaveLength(0)
        // A process that would make a key of its own is stopped, naming what to share.
        const stranger = yield* startIn()
        expect(Exit.isFailure(stranger.exit)).toBe(true)
        if (Exit.isFailure(stranger.exit)) {
          expect(Cause.pretty(stranger.exit.cause)).toContain("is not the one this database's secrets were sealed with")
        }
        expect(existsSync(join(stranger.dir, MASTER_KEY_FILE))).toBe(true)
      }))
  })

  describe("signature debugger", () => {
    it.scoped("names each failing check, always with 200", () =>
      Effect.gen(function*() {
        const hooks = yield* startHooks
        const org = yield* orgWithEndpoint(hooks, "/debug")
        const { secret: old } = yield* secretOf(org.token)
        const hit = yield* deliverOne(hooks, "/debug", org.address, "debug me")
        const body = hit.body
        const eventId = JSON.parse(body).id as string
        const sig = headerOf(hit.headers, "mailroom-signature")
        const debug = (headers: Record<string, string>, b: string) =>
          Effect.map(call("POST", "/v1/webhooks/debug-signature", { token: org.token, body: { headers, body: b } }), (r) => {
            expect(r.status).toBe(200)
            return r.body.data
          })

        const valid = yield* debug({ "Mailroom-Signature": sig, "content-type": "application/json" }, body)
        expect(valid).toMatchObject({ valid: true, verdict: "valid" })
        expect(valid.details).toMatchObject({
          header: "Mailroom-Signature", matched_secret: "current", event_id: eventId, delivery_known: true,
          tolerance_seconds: 300, signatures: 1
        })
        const legacyOnly = yield* debug({ "LEGACY-SIGNATURE": sig }, body)
        expect([legacyOnly.verdict, legacyOnly.details.header]).toEqual(["valid", "Legacy-Signature"])

        const missing = yield* debug({ "content-type": "application/json" }, body)
        expect(missing).toMatchObject({ valid: false, verdict: "missing_header" })
        expect(missing.message).toContain("Mailroom-Signature")

        for (const bad of ["", "v1=abc", `t=soon,v1=${"a".repeat(64)}`, `t=${nowSeconds()}`, "garbage"]) {
          const r = yield* debug({ "mailroom-signature": bad }, body)
          expect([bad, r.verdict, r.valid]).toEqual([bad, "malformed_header", false])
          expect(r.details.problems.length).toBeGreaterThan(0)
        }
        const shortV1 = yield* debug({ "mailroom-signature": `t=${nowSeconds()},v1=abc` }, body)
        expect(shortV1.message).toContain("64 hex characters")

        // Signed correctly, but 1000 s ago: by how much it is out.
        const t = nowSeconds() - 1000
        const stale = yield* debug({ "mailroom-signature": `t=${t},v1=${hmac(old, t, body)}` }, body)
        expect(stale).toMatchObject({ valid: false, verdict: "timestamp_out_of_tolerance" })
        expect(stale.details.age_seconds).toBeGreaterThanOrEqual(1000)
        // A busy machine may take a second between signing here and checking there.
        const [, past, beyond] = /(\d+) s in the past, (\d+) s beyond/.exec(stale.message) ?? []
        expect(Number(past)).toBeGreaterThanOrEqual(1000)
        expect(Number(past)).toBeLessThan(1010)
        expect(Number(past) - Number(beyond)).toBe(300)
        const future = nowSeconds() + 400
        const ahead = yield* debug({ "mailroom-signature": `t=${future},v1=${hmac(old, future, body)}` }, body)
        expect(ahead.verdict).toBe("timestamp_out_of_tolerance")
        expect(ahead.message).toContain("in the future")

        // A JSON body parser re-serialized it: same value, other bytes.
        const pretty = JSON.stringify(JSON.parse(body), null, 2)
        const reser = yield* debug({ "mailroom-signature": sig }, pretty)
        expect(reser).toMatchObject({ valid: false, verdict: "body_reserialized" })
        expect(reser.details.first_difference_at).toBe(1)
        expect(reser.message).toContain("raw request body")
        const changed = JSON.stringify({ ...JSON.parse(body), event: "email.tampered" })
        const modified = yield* debug({ "mailroom-signature": sig }, changed)
        expect(modified.verdict).toBe("body_modified")

        // Signed with another account's secret, on the exact delivered bytes.
        const tn = nowSeconds()
        const foreign = yield* debug({ "mailroom-signature": `t=${tn},v1=${hmac("whsec_someone_else", tn, body)}` }, body)
        expect(foreign).toMatchObject({ valid: false, verdict: "signed_with_unknown_secret" })
        expect(foreign.details.delivery_known).toBe(true)
        const unknownBody = yield* debug({ "mailroom-signature": sig }, '{"id":"evt_doesnotexist","x":1}')
        expect(unknownBody).toMatchObject({ verdict: "signed_with_unknown_secret" })
        expect(unknownBody.details.delivery_known).toBe(false)

        // After a rotation the old signature is reported as the rotated-out secret's.
        yield* call("POST", "/v1/account/webhook-secret/rotate", { token: org.token })
        const rotatedOut = yield* debug({ "mailroom-signature": `t=${tn},v1=${hmac(old, tn, body)}` }, body)
        expect(rotatedOut).toMatchObject({ valid: false, verdict: "signed_with_previous_secret" })
        expect(rotatedOut.details.matched_secret).toBe("previous")
        expect(rotatedOut.details.previous_expires_at).not.toBeNull()

        // Input errors are validation errors, and another organization's secret does not match.
        const invalid = yield* call("POST", "/v1/webhooks/debug-signature", { token: org.token, body: { headers: {} } })
        expect([invalid.status, invalid.body.error.code]).toEqual([400, "validation_error"])
        const extra = yield* call("POST", "/v1/webhooks/debug-signature", {
          token: org.token, body: { headers: {}, body: "", extra: 1 }
        })
        expect(extra.status).toBe(400)
        const anonymous = yield* call("POST", "/v1/webhooks/debug-signature", { body: { headers: {}, body: "" } })
        expect(anonymous.status).toBe(401)
        const stranger = yield* orgWithEndpoint(hooks, "/stranger")
        const cross = yield* call("POST", "/v1/webhooks/debug-signature", {
          token: stranger.token, body: { headers: { "mailroom-signature": sig }, body }
        })
        expect(cross.body.data).toMatchObject({ verdict: "signed_with_unknown_secret", details: { delivery_known: false } })
      }))
  })
})
