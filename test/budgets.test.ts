/**
 * The database budget of each hot path: round trips, statements and commits one operation makes,
 * counted at the driver (src/platform/SqlCounters.ts) and held to the table below. A change that
 * adds a round trip to a path fails here; one that removes some fails too, until the table is
 * lowered to the new figure (so the table always says what the path costs now).
 *
 * Each figure is the operation's own, as it stood when the operation finished: for an inbound
 * message that is everything before its `250`. Caches are warmed by a first operation of the same
 * kind, so the figures are those of the steady state.
 */
import { describe, expect, layer } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import nodemailer from "nodemailer"
import { Provisioning } from "../src/identity/Provisioning.js"
import * as SqlCounters from "../src/platform/SqlCounters.js"
import { TestServer, testService, usingRealPostgres } from "./support/harness.js"
import { type Hooks, startHooks } from "./support/hooks.js"
import { deploy } from "./support/functions.js"
import { call } from "./support/http.js"
import { startTestRelay, type TestRelay } from "./support/relay.js"

interface Budget {
  /** The counters' path the operation is counted under. */
  readonly path: string
  readonly roundTrips: number
  readonly statements: number
  readonly commits: number
}

/**
 * The budgets: one row per path, the same on both databases unless a row says otherwise. Lower a
 * row when a change makes its path do less.
 */
const BUDGETS = {
  /** GET /v1/account with an API key the service has seen. */
  authenticatedRead: { path: "http GET /v1/account", roundTrips: 2, statements: 2, commits: 2 },
  /** One message over SMTP to one managed inbox whose organization has a webhook, up to its `250`. */
  inboundEmail: { path: "smtp message", roundTrips: 3, statements: 3, commits: 3 },
  /** One webhook delivery attempt answered 200, recorded. */
  deliveryAttempt: { path: "delivery", roundTrips: 1, statements: 1, commits: 1 },
  /** POST /v1/send-mail to one outside recipient, relayed and recorded inside the request. */
  send: { path: "http POST /v1/send-mail", roundTrips: 6, statements: 6, commits: 6 },
  /**
   * One wake firing: its email composed, signed and stored for the function (the claim is on `wake
   * claim`). The five: the webhook secret that signs the command, the recipient, the thread and
   * sender facts (one statement), the store with the command's use mark, the wake moved on. (Nine
   * until the delivery hook stopped reading the secret again to verify the firing's own command,
   * and the stored-copy check was left to firings that may have been tried before; seven until the
   * thread and the sender facts were read together; six until the use mark joined the store.)
   */
  wakeFiring: { path: "wake", roundTrips: 5, statements: 5, commits: 5 },
  /**
   * The function invocation that email makes, one delivery attempt answered 200: the attempt's
   * lease renewed, the function read, the invocation recorded, the attempt's outcome.
   */
  functionInvocation: { path: "delivery", roundTrips: 4, statements: 4, commits: 4 }
} satisfies Record<string, Budget>

class Relay extends Context.Tag("test/Relay")<Relay, TestRelay>() {}
class HookServer extends Context.Tag("test/HookServer")<HookServer, Hooks>() {}

const Env = Provisioning.Default.pipe(
  Layer.provideMerge(Layer.unwrapScoped(Effect.gen(function*() {
    const relay = yield* startTestRelay
    const hooks = yield* startHooks
    return testService({ OUTBOUND_SMTP_URL: relay.url, OUTBOUND_TIMEOUT: "5s", DNS_SERVER: "127.0.0.1:9" }).pipe(
      Layer.merge(Layer.succeed(Relay, relay)),
      Layer.merge(Layer.succeed(HookServer, hooks))
    )
  })))
)

const operations = (path: string) => SqlCounters.snapshot().paths[path]?.operations ?? 0
const finished = (path: string) => SqlCounters.snapshot().paths[path]?.finished ?? 0

/**
 * Waits until `path` has finished `target` operations in all, and returns the last one's own
 * figures. Finished, not begun: `last` is written when an operation ends, and a slow one (a busy
 * machine) would otherwise leave the previous operation's figures there.
 */
const lastOf = (path: string, target: number) =>
  Effect.gen(function*() {
    for (let i = 0; i < 600 && finished(path) < target; i++) yield* Effect.sleep("50 millis")
    expect(finished(path), `operations of ${path} finished`).toBe(target)
    expect(operations(path), `operations of ${path} begun`).toBe(target)
    const { last } = SqlCounters.snapshot().paths[path]!
    return { roundTrips: last.roundTrips, statements: last.statements, commits: last.commits }
  })

/**
 * Runs `act` and returns the own figures of the one operation of `path` it made (whole numbers:
 * one operation alone is never a share of a batch).
 */
const measured = <A, E, R>(path: string, act: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const before = finished(path)
    const value = yield* act
    return { value, counts: yield* lastOf(path, before + 1) }
  })

const withinBudget = (budget: Budget, counts: { roundTrips: number; statements: number; commits: number }) => {
  const db = usingRealPostgres() ? "PostgreSQL" : "PGlite"
  console.log(`budget ${budget.path} on ${db}: ${JSON.stringify(counts)}`)
  expect.soft(counts, `${budget.path} on ${db}`).toEqual({ roundTrips: budget.roundTrips, statements: budget.statements, commits: budget.commits })
}

const newOrg = Effect.gen(function*() {
  const p = yield* Provisioning
  const hooks = yield* HookServer
  const org = yield* p.createOrganization({ name: "Budgets", plan: "developer" })
  const { apiKey } = yield* p.issueApiKey(org.id)
  const created = yield* call("POST", "/v1/endpoints", { token: apiKey, body: { url: hooks.url("/ok") } })
  expect(created.status, created.text).toBe(201)
  return { apiKey, address: org.managedInboxAddress! }
})

const mailIn = (to: string, subject: string) =>
  Effect.flatMap(TestServer, (server) =>
    Effect.promise(async () => {
      const t = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true })
      try {
        return String((await t.sendMail({ from: "someone@example.net", to, subject, text: "hello there" })).response)
      } finally {
        t.close()
      }
    }))

layer(Env, { timeout: 180_000, excludeTestServices: true })("budgets", (it) => {
  describe("database round trips per operation", () => {
    it.effect("an authenticated read", () =>
      Effect.gen(function*() {
        const org = yield* newOrg
        const read = call("GET", "/v1/account", { token: org.apiKey })
        expect((yield* read).status).toBe(200)
        const { value, counts } = yield* measured(BUDGETS.authenticatedRead.path, read)
        expect(value.status).toBe(200)
        withinBudget(BUDGETS.authenticatedRead, counts)
      }))

    it.effect("an accepted inbound email, before its 250; then its delivery attempt", () =>
      Effect.gen(function*() {
        const org = yield* newOrg
        const deliveries = finished(BUDGETS.deliveryAttempt.path)
        expect(yield* mailIn(org.address, "warm")).toMatch(/^250/)
        // The first message's delivery is attempted before the measured message arrives.
        yield* lastOf(BUDGETS.deliveryAttempt.path, deliveries + 1)
        const inbound = yield* measured(BUDGETS.inboundEmail.path, mailIn(org.address, "measured"))
        expect(inbound.value).toMatch(/^250/)
        withinBudget(BUDGETS.inboundEmail, inbound.counts)
        const attempt = yield* lastOf(BUDGETS.deliveryAttempt.path, deliveries + 2)
        withinBudget(BUDGETS.deliveryAttempt, attempt)
        const hooks = yield* HookServer
        expect(hooks.on("/ok").filter((h) => h.body.includes("measured"))).toHaveLength(1)
      }))

    it.effect("a wake firing; then the function invocation its email makes", () =>
      Effect.gen(function*() {
        // An organization with no webhook endpoint: the wake's email is delivered to its function only.
        const p = yield* Provisioning
        const o = yield* p.createOrganization({ name: "Budgets wake", plan: "developer" })
        const { apiKey } = yield* p.issueApiKey(o.id)
        const fn = yield* deploy(apiKey, `export default { async fetch() { return new Response("ok") } }`)
        const wakeSoon = Effect.gen(function*() {
          const at = new Date(Date.now() + 1000).toISOString()
          const created = yield* call("POST", "/v1/wakes", { token: apiKey, body: { function_id: fn.id, command: { type: "tick", payload: {} }, at } })
          expect(created.status, created.text).toBe(201)
        })
        const firings = finished(BUDGETS.wakeFiring.path)
        const deliveries = finished(BUDGETS.functionInvocation.path)
        // The first firing and its invocation warm the caches (keys, the function's version, its process).
        yield* wakeSoon
        yield* lastOf(BUDGETS.wakeFiring.path, firings + 1)
        yield* lastOf(BUDGETS.functionInvocation.path, deliveries + 1)
        yield* wakeSoon
        withinBudget(BUDGETS.wakeFiring, yield* lastOf(BUDGETS.wakeFiring.path, firings + 2))
        withinBudget(BUDGETS.functionInvocation, yield* lastOf(BUDGETS.functionInvocation.path, deliveries + 2))
        const runs = yield* call("GET", `/v1/functions/${fn.id}/invocations`, { token: apiKey })
        expect(runs.status, runs.text).toBe(200)
        // Both firings reached the function and it answered.
        expect((runs.body.data as Array<{ status: string }>).map((r) => r.status)).toEqual(["ok", "ok"])
      }))

    it.effect("a send, relayed within the request", () =>
      Effect.gen(function*() {
        const org = yield* newOrg
        const send = (to: string) =>
          call("POST", "/v1/send-mail", { token: org.apiKey, body: { from: org.address, to, subject: "hi", text: "hello" } })
        expect((yield* send("first@example.com")).status).toBe(201)
        const { value, counts } = yield* measured(BUDGETS.send.path, send("second@example.com"))
        expect(value.status, value.text).toBe(201)
        expect((yield* Relay).messages.filter((m) => m.to.includes("second@example.com"))).toHaveLength(1)
        withinBudget(BUDGETS.send, counts)
      }))
  })
})
