/**
 * Spend policy and settle caps against a clock the test moves, settling through a loopback x402
 * facilitator stub (the chain is not what is under test here): the policy's validation, the daily
 * cap at its edge and across UTC midnight, two pays racing for the last of a cap, and the email
 * rail's payee side (`PaymentsService.settleIncoming`): per-settle ceiling, UTC day and month caps,
 * the operator's change of them, a race for the last of a daily cap, and its events.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import { execFile } from "node:child_process"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { promisify } from "node:util"
import type { Hex } from "viem"
import { generatePrivateKey } from "viem/accounts"
import { OrgEvents } from "../src/events/OrgEvents.js"
import { DeliveryQueue } from "../src/deliveries/Queue.js"
import { Provisioning } from "../src/identity/Provisioning.js"
import { toAtomic } from "../src/payments/Money.js"
import { PaymentsLive, PaymentsService } from "../src/payments/Service.js"
import { SettleCaps } from "../src/payments/SettleCaps.js"
import { runCli } from "./support/cli.js"
import { makeManualClock, TestServer, testDatabase, testServerOn } from "./support/harness.js"
import { eventually, type Hooks, startHooks, verifySignature } from "./support/hooks.js"
import { call } from "./support/http.js"
import { addressOf, type FacilitatorStub, grantPayments, type Requirements, signPayment, startFacilitatorStub } from "./support/payments.js"

class Stub extends Context.Tag("test/FacilitatorStub")<Stub, FacilitatorStub>() {}
class TestHooks extends Context.Tag("test/Hooks")<TestHooks, Hooks>() {}

const clock = makeManualClock()

const Env = Layer.unwrapScoped(Effect.gen(function*() {
  const stub = yield* Effect.acquireRelease(Effect.promise(startFacilitatorStub), (s) => Effect.sync(s.close))
  const hooks = yield* startHooks
  const db = testDatabase({
    X402_FACILITATOR_URL: stub.url,
    DELIVERY_RETRY_DELAYS: "200ms",
    DELIVERY_TIMEOUT: "2s",
    DNS_SERVER: "127.0.0.1:9"
  })
  const payments = PaymentsLive.pipe(Layer.provide(OrgEvents.Default), Layer.provide(DeliveryQueue.Default))
  return Layer.mergeAll(Provisioning.Default, payments, testServerOn().pipe(Layer.provide(clock.layer))).pipe(
    Layer.provideMerge(db),
    Layer.merge(Layer.succeed(Stub, stub)),
    Layer.merge(Layer.succeed(TestHooks, hooks))
  )
}))

const DAY = 86_400_000

/** Moves the service clock so that it reads `target`. */
const setClock = (target: number) => clock.advance(target - clock.clock.unsafeCurrentTimeMillis())
const now = () => clock.clock.unsafeCurrentTimeMillis()
const nextUtcMidnight = () => Math.floor(now() / DAY) * DAY + DAY

interface Org {
  readonly orgId: string
  readonly token: string
}

const newOrg = Effect.gen(function*() {
  const p = yield* Provisioning
  const org = yield* p.createOrganization({ name: "Policy", plan: "developer" })
  const key = yield* p.issueApiKey(org.id)
  yield* grantPayments(org.id)
  return { orgId: org.id, token: key.apiKey } satisfies Org
})

const newPayee = Effect.gen(function*() {
  const org = yield* newOrg
  const wallet = addressOf(generatePrivateKey())
  const r = yield* call("PUT", "/v1/payments/payout-addresses/eip155:84532", { token: org.token, body: { address: wallet } })
  expect(r.status, r.text).toBe(200)
  return org
})

let seq = 0
const challenge = (payee: Org, amount: string, extra: Record<string, unknown> = {}) =>
  Effect.gen(function*() {
    const r = yield* call("POST", "/v1/payments/challenges", {
      token: payee.token,
      body: { amount, description: `challenge ${++seq}`, expires_in: 7 * 86_400, ...extra }
    })
    expect(r.status, r.text).toBe(201)
    return r.body.data as { id: string; payment_required: { accepts: Array<Requirements> } }
  })

const signed = (key: Hex, c: { payment_required: { accepts: Array<Requirements> } }, o = {}) =>
  Effect.promise(() => signPayment(key, c.payment_required.accepts[0]!, now() / 1000, o))

const payHttp = (payer: Org, key: Hex, payee: Org, amount: string) =>
  Effect.gen(function*() {
    const c = yield* challenge(payee, amount)
    const payload = yield* signed(key, c)
    return yield* call("POST", `/v1/payments/challenges/${c.id}/pay`, { token: payer.token, body: { payment_payload: payload } })
  })

const setPolicy = (org: Org, body: unknown) =>
  Effect.gen(function*() {
    const r = yield* call("PATCH", "/v1/payments/policy", { token: org.token, body })
    expect(r.status, r.text).toBe(200)
    return r.body.data
  })

const incoming = (payeeOrgId: string, challengeId: string, payload: unknown) =>
  Effect.flatMap(PaymentsService, (s) => s.settleIncoming(payeeOrgId, challengeId, payload)).pipe(Effect.withClock(clock.clock))

const settleByMail = (payee: Org, key: Hex, amount: string) =>
  Effect.gen(function*() {
    const c = yield* challenge(payee, amount)
    return yield* incoming(payee.orgId, c.id, yield* signed(key, c))
  })

layer(Env, { timeout: 240_000, excludeTestServices: true })("spend policy and settle caps", (it) => {
  describe("the spend policy", () => {
    it.effect("is shown with defaults, changed by PATCH, and validated field by field", () =>
      Effect.gen(function*() {
        const org = yield* newOrg
        const shown = yield* call("GET", "/v1/payments/policy", { token: org.token })
        expect(shown.status).toBe(200)
        expect(shown.body.data).toMatchObject({
          paused: false,
          per_payment_cap: null,
          daily_cap: null,
          payee_allowlist: null,
          spent_today: "0",
          updated_at: null
        })
        expect(new Date(shown.body.data.day_resets_at).getTime()).toBe(nextUtcMidnight())
        const changed = yield* setPolicy(org, { per_payment_cap: "2.50", daily_cap: "100", payee_allowlist: ["0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"] })
        expect(changed).toMatchObject({
          paused: false,
          per_payment_cap: "2.5",
          daily_cap: "100",
          payee_allowlist: ["0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"]
        })
        // A field left out keeps its value.
        expect(yield* setPolicy(org, { paused: true })).toMatchObject({ paused: true, per_payment_cap: "2.5", daily_cap: "100" })
        for (const body of [{}, { per_payment_cap: 2.5 }, { daily_cap: "1.0000001" }, { daily_cap: "-1" }, { paused: "yes" },
          { payee_allowlist: ["acme"] }, { payee_allowlist: ["0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAeD"] }, { payee_allowlist: Array.from({ length: 101 }, () => "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed") },
          { limit: 1 }]) {
          const r = yield* call("PATCH", "/v1/payments/policy", { token: org.token, body })
          expect(r.status, `${JSON.stringify(body)}: ${r.text}`).toBe(400)
          expect(r.body.error.code).toBe("validation_error")
        }
        expect((yield* setPolicy(org, { paused: false, per_payment_cap: null, payee_allowlist: null }))).toMatchObject({
          paused: false,
          per_payment_cap: null,
          daily_cap: "100",
          payee_allowlist: null
        })
      }))

    it.effect("the daily cap holds at its edge and starts again at UTC midnight", () =>
      Effect.gen(function*() {
        setClock(nextUtcMidnight() - 120_000)
        const payee = yield* newPayee
        const payer = yield* newOrg
        const key = generatePrivateKey()
        yield* setPolicy(payer, { daily_cap: "10" })
        expect((yield* payHttp(payer, key, payee, "6")).status).toBe(200)
        expect((yield* payHttp(payer, key, payee, "4")).status).toBe(200)
        const over = yield* payHttp(payer, key, payee, "0.000001")
        expect(over.status, over.text).toBe(422)
        expect(over.body.error).toMatchObject({ code: "payment_declined", details: { failure_category: "declined", reasons: ["daily_cap"] } })
        const before = yield* call("GET", "/v1/payments/policy", { token: payer.token })
        expect(before.body.data.spent_today).toBe("10")

        clock.advance(180_000)
        const after = yield* payHttp(payer, key, payee, "9.999999")
        expect(after.status, after.text).toBe(200)
        const shown = yield* call("GET", "/v1/payments/policy", { token: payer.token })
        expect(shown.body.data.spent_today).toBe("9.999999")
        expect(new Date(shown.body.data.day_resets_at).getTime()).toBe(nextUtcMidnight())
        const edge = yield* payHttp(payer, key, payee, "0.000002")
        expect(edge.body.error.details.reasons).toEqual(["daily_cap"])
        expect((yield* payHttp(payer, key, payee, "0.000001")).status).toBe(200)
      }))

    it.effect("two pays racing for the last of the daily cap: one settles, the other is declined", () =>
      Effect.gen(function*() {
        const stub = yield* Stub
        const payee = yield* newPayee
        const payer = yield* newOrg
        const key = generatePrivateKey()
        yield* setPolicy(payer, { daily_cap: "10" })
        const a = yield* challenge(payee, "6")
        const b = yield* challenge(payee, "6")
        const pa = yield* signed(key, a)
        const pb = yield* signed(key, b)
        const settlesBefore = stub.settles.length
        stub.mode = { kind: "hold" }
        yield* Effect.gen(function*() {
          const fibers = yield* Effect.all([
            Effect.fork(call("POST", `/v1/payments/challenges/${a.id}/pay`, { token: payer.token, body: { payment_payload: pa } })),
            Effect.fork(call("POST", `/v1/payments/challenges/${b.id}/pay`, { token: payer.token, body: { payment_payload: pb } }))
          ])
          // One reached the facilitator (and holds its reservation) while the other was judged.
          const reached = yield* eventually(() => stub.settles.length > settlesBefore || undefined, 20_000, "a settle request")
          expect(reached).toBe(true)
          stub.mode = { kind: "ok" }
          stub.release()
          const results = yield* Effect.all(fibers.map((f) => f.await)).pipe(
            Effect.map((exits) => exits.map((e) => (e._tag === "Success" ? e.value : undefined)))
          )
          const statuses = results.map((r) => r?.status).sort()
          expect(statuses).toEqual([200, 422])
          const declined = results.find((r) => r?.status === 422)!
          expect(declined.body.error.details.reasons).toEqual(["daily_cap"])
        }).pipe(Effect.ensuring(Effect.sync(() => {
          stub.mode = { kind: "ok" }
          stub.release()
        })))
      }))
  })

  describe("the email rail's settle caps (payee side)", () => {
    it.effect("per settle 10, per UTC day 25: at the edge, over it, and again the next day", () =>
      Effect.gen(function*() {
        const hooks = yield* TestHooks
        setClock(Math.floor(now() / DAY) * DAY + 3_600_000)
        const payee = yield* newPayee
        const ep = yield* call("POST", "/v1/endpoints", { token: payee.token, body: { url: hooks.url("/ok/caps") } })
        expect(ep.status).toBe(201)
        const secret = (yield* call("GET", "/v1/account/webhook-secret", { token: payee.token })).body.data.secret as string
        const key = generatePrivateKey()

        const ceiling = yield* settleByMail(payee, key, "10.000001")
        expect(ceiling._tag).toBe("Failed")
        if (ceiling._tag === "Failed") {
          expect(ceiling.failure).toMatchObject({ category: "cap", reasons: ["amount_exceeds_per_settle_ceiling"] })
        }
        for (const amount of ["10", "10", "5"]) {
          const r = yield* settleByMail(payee, key, amount)
          expect(r._tag, JSON.stringify(r)).toBe("Settled")
        }
        const over = yield* settleByMail(payee, key, "0.000001")
        expect(over._tag === "Failed" && over.failure.reasons).toEqual(["settle_daily_cap_exceeded"])
        clock.advance(DAY)
        const nextDay = yield* settleByMail(payee, key, "10")
        expect(nextDay._tag).toBe("Settled")

        // Events of the email rail go to the payee: settled ones and cap failures.
        const hits = yield* eventually(() => hooks.on("/ok/caps").length >= 6 && hooks.on("/ok/caps"), 20_000, "cap events")
        const events = hits.map((h) => {
          // Signed when dispatched, on the service clock the test moved since: judge the HMAC at that t.
          const header = h.headers["mailroom-signature"] as string
          const t = Number(/t=(\d+)/.exec(header)?.[1])
          expect(verifySignature(header, h.body, secret, t)).toBe(true)
          return JSON.parse(h.body)
        })
        const failed = events.filter((e) => e.event === "payment.failed").map((e) => e.payment)
        expect(failed.map((p) => [p.failure_category, p.reasons, p.direction, p.rail])).toEqual([
          ["cap", ["amount_exceeds_per_settle_ceiling"], "in", "email"],
          ["cap", ["settle_daily_cap_exceeded"], "in", "email"]
        ])
        expect(events.filter((e) => e.event === "payment.settled")).toHaveLength(4)
        const listed = yield* call("GET", "/v1/payments?direction=in&limit=100", { token: payee.token })
        expect(listed.body.meta.total).toBe(6)
      }))

    it.effect("the monthly cap, changed by the operator, starts again in the next UTC month", () =>
      Effect.gen(function*() {
        const d = new Date(now())
        setClock(Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1) - 3 * DAY)
        const payee = yield* newPayee
        const caps = yield* SettleCaps
        const set = yield* caps.set(payee.orgId, { daily: toAtomic("100")!, monthly: toAtomic("25")! })
        expect(set).toMatchObject({ perSettle: toAtomic("10"), daily: toAtomic("100"), monthly: toAtomic("25") })
        const key = generatePrivateKey()
        for (const amount of ["10", "10"]) expect((yield* settleByMail(payee, key, amount))._tag).toBe("Settled")
        clock.advance(DAY)
        const over = yield* settleByMail(payee, key, "5.000001")
        expect(over._tag === "Failed" && over.failure.reasons).toEqual(["settle_monthly_cap_exceeded"])
        expect((yield* settleByMail(payee, key, "5"))._tag).toBe("Settled")
        const both = yield* settleByMail(payee, key, "10.5")
        expect(both._tag === "Failed" && both.failure.reasons).toEqual(["amount_exceeds_per_settle_ceiling", "settle_monthly_cap_exceeded"])
        clock.advance(3 * DAY)
        expect((yield* settleByMail(payee, key, "10"))._tag).toBe("Settled")
        // Back to the defaults.
        expect(yield* caps.set(payee.orgId, { daily: null, monthly: null })).toMatchObject({
          daily: toAtomic("25"),
          monthly: toAtomic("250")
        })
      }))

    it.effect("two settles racing for the last of the daily cap: one settles, the other is capped", () =>
      Effect.gen(function*() {
        const stub = yield* Stub
        setClock(Math.floor(now() / DAY) * DAY + 7_200_000)
        const payee = yield* newPayee
        const key = generatePrivateKey()
        for (const amount of ["10", "10"]) expect((yield* settleByMail(payee, key, amount))._tag).toBe("Settled")
        const a = yield* challenge(payee, "5")
        const b = yield* challenge(payee, "5")
        const pa = yield* signed(key, a)
        const pb = yield* signed(key, b)
        stub.mode = { kind: "hold" }
        const before = stub.settles.length
        yield* Effect.gen(function*() {
          const fa = yield* Effect.fork(incoming(payee.orgId, a.id, pa))
          const fb = yield* Effect.fork(incoming(payee.orgId, b.id, pb))
          yield* eventually(() => stub.settles.length > before || undefined, 20_000, "a settle request")
          stub.mode = { kind: "ok" }
          stub.release()
          const ra = yield* fa.await
          const rb = yield* fb.await
          const tags = [ra, rb].map((e) => (e._tag === "Success" ? e.value._tag : "died")).sort()
          expect(tags).toEqual(["Failed", "Settled"])
          const failed = [ra, rb].flatMap((e) => (e._tag === "Success" && e.value._tag === "Failed" ? [e.value] : []))[0]!
          expect(failed.failure.reasons).toEqual(["settle_daily_cap_exceeded"])
        }).pipe(Effect.ensuring(Effect.sync(() => {
          stub.mode = { kind: "ok" }
          stub.release()
        })))
      }))

    it.effect("the email rail verifies and expires like the HTTP flow (verify_non_positive_amount, challenge_expired)", () =>
      Effect.gen(function*() {
        const payee = yield* newPayee
        const key = generatePrivateKey()
        const c = yield* challenge(payee, "1")
        const zero = yield* incoming(payee.orgId, c.id, yield* signed(key, c, { value: "0" }))
        expect(zero._tag === "Failed" && zero.failure).toMatchObject({
          code: "payment_verification_failed",
          category: "verification",
          reasons: ["amount_mismatch", "verify_non_positive_amount"]
        })
        const other = yield* newPayee
        const notTheirs = yield* incoming(other.orgId, c.id, yield* signed(key, c))
        expect(notTheirs._tag).toBe("Conflict")
        const short = yield* challenge(payee, "1", { expires_in: 30 })
        const payload = yield* signed(key, short)
        clock.advance(31_000)
        const late = yield* incoming(payee.orgId, short.id, payload)
        expect(late._tag === "Failed" && late.failure).toMatchObject({ code: "challenge_expired", reasons: ["challenge_expired"] })
        const sql = yield* SqlClient.SqlClient
        const rows = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM payments WHERE payee_org_id = ${payee.orgId} AND rail = 'email'`
        expect(rows[0]!.n).toBe(2)
      }))
  })

  describe("operator commands", () => {
    it.effect("grant, settle-caps and revoke change an organization (admin CLI on its own database)", () =>
      Effect.gen(function*() {
        const dir = mkdtempSync(join(tmpdir(), "mailroom-admin-"))
        const env = { ...process.env, DATA_DIR: dir, LOG_LEVEL: "warning" }
        delete (env as Record<string, string | undefined>).DATABASE_URL
        const admin = (...args: Array<string>) =>
          Effect.promise(() =>
            promisify(execFile)(process.execPath, ["--import", "tsx", "src/admin.ts", ...args], { env, timeout: 120_000 })
              .then((r) => ({ code: 0, out: r.stdout, err: r.stderr }))
              .catch((e: { code?: number; stdout?: string; stderr?: string }) => ({ code: e.code ?? 1, out: e.stdout ?? "", err: e.stderr ?? "" }))
          )
        yield* Effect.gen(function*() {
          const created = yield* admin("create-org", "Acme")
          const orgId = /org_id=(\S+)/.exec(created.out)?.[1]
          expect(orgId, created.err).toBeDefined()
          const granted = yield* admin("grant", orgId!, "payments")
          expect(granted.out).toContain("granted=payments")
          const caps = yield* admin("settle-caps", orgId!, "--daily", "40", "--monthly", "400.5")
          expect(caps.out).toContain("per_settle=10 daily=40 monthly=400.5")
          const bad = yield* admin("settle-caps", orgId!, "--daily", "1.0000001")
          expect(bad.code).not.toBe(0)
          expect(bad.err).toContain("--daily")
          const revoked = yield* admin("revoke", orgId!, "payments")
          expect(revoked.out).toContain("revoked=payments")
        }).pipe(Effect.ensuring(Effect.sync(() => rmSync(dir, { recursive: true, force: true }))))
      }), 180_000)
  })

  describe("CLI", () => {
    it.effect("policy, payout, challenges, pay with a local key file, and lists", () =>
      Effect.gen(function*() {
        // The CLI signs with the machine's clock: put the service's back on it.
        setClock(Date.now())
        const server = yield* TestServer
        const payee = yield* newOrg
        const payer = yield* newOrg
        const home = mkdtempSync(join(tmpdir(), "mailroom-cli-pay-"))
        const cli = (org: Org, ...args: Array<string>) =>
          Effect.promise(() => runCli(args, { baseUrl: server.baseUrl, configHome: home, extra: { MAILROOM_API_KEY: org.token } }))
        const json = (r: { stdout: string; stderr: string; code: number | null }) => {
          expect(r.code, r.stderr).toBe(0)
          return JSON.parse(r.stdout)
        }
        yield* Effect.gen(function*() {
          const wallet = addressOf(generatePrivateKey())
          const bad = yield* cli(payee, "payments", "payout", "set", "eip155:84532", "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAeD")
          expect(bad.code).not.toBe(0)
          expect(bad.stderr).toContain("validation_error")
          expect(bad.stderr).toContain("checksum")
          // All lowercase is an address too; it is shown in EIP-55 form.
          expect(json(yield* cli(payee, "payments", "payout", "set", "eip155:84532", wallet.toLowerCase(), "--json")))
            .toMatchObject({ address: wallet })
          const created = json(yield* cli(payee, "payments", "challenges", "create", "--amount", "1.25", "--description", "cli", "--json"))
          expect(created).toMatchObject({ amount: "1.25", status: "pending", pay_to: wallet })
          const human = yield* cli(payee, "payments", "challenges", "list")
          expect(human.stdout).toContain(created.id)

          const policy = json(yield* cli(payer, "payments", "policy", "set", "--per-payment-cap", "1", "--daily-cap", "none", "--json"))
          expect(policy).toMatchObject({ per_payment_cap: "1", daily_cap: null })
          const badCap = yield* cli(payer, "payments", "policy", "set", "--per-payment-cap", "lots")
          expect(badCap.code).not.toBe(0)
          expect(badCap.stderr).toContain("--per-payment-cap")

          const keyFile = join(home, "wallet.key")
          writeFileSync(keyFile, `${generatePrivateKey()}\n`, { mode: 0o600 })
          const declined = yield* cli(payer, "payments", "pay", created.id, "--key-file", keyFile, "--json")
          // A refusal is an API error like any other: exit 3 (docs/cli.md), the code on stderr.
          expect(declined.code).toBe(3)
          const error = JSON.parse(declined.stderr)
          expect(error.error.code).toBe("payment_declined")
          expect(JSON.stringify(error)).toContain("per_payment_cap")
          expect(json(yield* cli(payer, "payments", "policy", "set", "--per-payment-cap", "none", "--json"))).toMatchObject({
            per_payment_cap: null
          })
          const paid = json(yield* cli(payer, "payments", "pay", created.id, "--key-file", keyFile, "--json"))
          expect(paid).toMatchObject({ challenge_id: created.id, status: "settled", amount: "1.25", direction: "out" })
          const incoming = json(yield* cli(payee, "payments", "list", "--direction", "in", "--json"))
          expect(incoming.data.map((p: { id: string }) => p.id)).toEqual([paid.id])
          const shown = json(yield* cli(payer, "payments", "policy", "show", "--json"))
          expect(shown.spent_today).toBe("1.25")
          const noKey = yield* cli(payer, "payments", "pay", created.id, "--key-file", join(home, "missing.key"))
          expect(noKey.code).toBe(2)
          expect(noKey.stderr).toContain("--key-file")
        }).pipe(Effect.ensuring(Effect.sync(() => rmSync(home, { recursive: true, force: true }))))
      }), 120_000)
  })
})
