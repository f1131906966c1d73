/**
 * Every shared pool bounds what one organization holds, attacked from outside over HTTP with real
 * workerd processes: request admission (a quarter of MAX_INFLIGHT_REQUESTS per organization or
 * client address, then 429 `rate_limited` with `Retry-After: 1`), the process's function slots
 * (fair across organizations: two keeping theirs busy never make a third wait), deploy validation
 * (one slot per organization, so modules that never load cannot hold them all), and the health
 * probe, which answers 503 while the process admits nothing.
 */
import { afterAll, describe, expect, it as plain, layer } from "@effect/vitest"
import { Effect, Fiber, Layer, Option } from "effect"
import { createServer, type ServerResponse } from "node:http"
import { type AddressInfo, connect, type Socket } from "node:net"
import { Provisioning } from "../src/identity/Provisioning.js"
import { FairSlots } from "../src/platform/FairSlots.js"
import { TestServer, testService } from "./support/harness.js"
import { call, type Reply } from "./support/http.js"

const MAX_INFLIGHT = 16
const SHARE = MAX_INFLIGHT / 4

/**
 * Functions that sleep until the test opens the gate: a loopback server holding every request
 * (functions reach loopback here through FUNCTION_ALLOW_PRIVATE_NETWORK), so "still running" is a
 * fact the test controls, not a guess about timing on a loaded machine.
 */
let gateOpen = false
const waiting: Array<ServerResponse> = []
const gate = createServer((_req, res) => {
  if (gateOpen) res.end("open")
  else waiting.push(res)
})
const gatePort = await new Promise<number>((resolve) => gate.listen(0, "127.0.0.1", () => resolve((gate.address() as AddressInfo).port)))
const openGate = () => {
  gateOpen = true
  for (const res of waiting.splice(0)) res.end("open")
}
const closeGate = () => {
  gateOpen = false
}
afterAll(() => {
  openGate()
  gate.close()
})

const Env = Provisioning.Default.pipe(
  Layer.provideMerge(testService({
    MAX_INFLIGHT_REQUESTS: String(MAX_INFLIGHT),
    FUNCTION_ALLOW_PRIVATE_NETWORK: "true",
    DNS_SERVER: "127.0.0.1:9"
  }))
)

const newOrg = () =>
  Effect.gen(function*() {
    const p = yield* Provisioning
    const org = yield* p.createOrganization({ name: "Fair", plan: "developer" })
    const key = yield* p.issueApiKey(org.id)
    return { orgId: org.id, token: key.apiKey }
  })

let seq = 0
const deploy = (token: string, code: string) =>
  call("POST", "/v1/functions", { token, body: { name: `fair-${++seq}-${Math.random().toString(36).slice(2, 7)}`, code } })

const deployed = (token: string, code: string) =>
  Effect.map(deploy(token, code), (r) => {
    expect(r.status, r.text).toBe(201)
    return r.body.data.id as string
  })

const invoke = (token: string, id: string) =>
  call("POST", `/v1/functions/${id}/invoke`, { token, body: {}, headers: { "idempotency-key": crypto.randomUUID() } })

const SLEEPER = `export default { async fetch() { const r = await fetch("http://127.0.0.1:${gatePort}/"); return new Response(await r.text()) } }`
const QUICK = `export default { async fetch() { return new Response("quick") } }`

/** A request admitted and then held open: its body arrives only when `finish` is called. */
const held = (port: number, token: string) =>
  Effect.gen(function*() {
    const body = JSON.stringify({ type: "blocklist", pattern: `held-${Math.random()}@example.com` })
    const socket = yield* Effect.async<Socket>((resume) => {
      const s = connect(port, "127.0.0.1", () => resume(Effect.succeed(s)))
    })
    const reply = new Promise<string>((resolve) => {
      let data = ""
      socket.on("data", (c) => {
        data += c.toString()
      })
      socket.on("close", () => resolve(data))
    })
    socket.write(
      `POST /v1/filters HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${token}\r\n` +
        `content-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body.slice(0, 5)}`
    )
    yield* Effect.addFinalizer(() => Effect.sync(() => socket.destroy()))
    return { finish: () => socket.write(body.slice(5)), reply }
  })

/** Polls `probe` until `done` holds (at most ~10 s). */
const until = (probe: Effect.Effect<Reply, never, TestServer>, done: (r: Reply) => boolean) =>
  Effect.gen(function*() {
    let r = yield* probe
    for (let i = 0; i < 200 && !done(r); i++) {
      yield* Effect.sleep("50 millis")
      r = yield* probe
    }
    return r
  })

plain("FairSlots: per-owner cap, a reserve for owners holding none, a bounded wait", () =>
  Effect.runPromise(Effect.gen(function*() {
    const slots = new FairSlots({ total: 4, perOwner: 3, reserve: 1 })
    const gate = yield* Effect.makeLatch(false)
    const hold = (owner: string) => Effect.fork(slots.withSlot(owner, gate.await))
    // a takes 3 (its cap; the 4th would be the reserved one anyway); b, holding none, gets the reserve.
    const a = yield* Effect.forEach([1, 2, 3], () => hold("a"))
    yield* Effect.yieldNow()
    expect(slots.inUse).toBe(3)
    const b = yield* hold("b")
    yield* Effect.yieldNow()
    expect(slots.inUse).toBe(4)
    // Nothing free: a bounded wait gives up.
    expect(yield* slots.withSlot("c", Effect.succeed(1), "30 millis")).toEqual(Option.none())
    yield* gate.open
    yield* Fiber.joinAll([...a, b])
    expect(slots.inUse).toBe(0)
    expect(yield* slots.withSlot("c", Effect.succeed(1), "30 millis")).toEqual(Option.some(1))
  })))

layer(Env, { timeout: 120_000, excludeTestServices: true })("fairness of shared pools", (it) => {
  describe("request admission", () => {
    it.scoped("an organization flooding invokes of a sleeping function holds a quarter of the process; others, the demo and health are served", () =>
      Effect.gen(function*() {
        const server = yield* TestServer
        const attacker = yield* newOrg()
        const victim = yield* newOrg()
        const sleeper = yield* deployed(attacker.token, SLEEPER)
        closeGate()
        // More invokes than the whole process admits (the review's ~130 against 128).
        let answered = 0
        const flood = yield* Effect.fork(Effect.all(
          Array.from({ length: MAX_INFLIGHT + 4 }, () => Effect.tap(invoke(attacker.token, sleeper), () => Effect.sync(() => answered++))),
          { concurrency: "unbounded" }
        ))
        // Past its share the attacker is refused at once: all but the share are answered quickly.
        for (let i = 0; i < 200 && answered < MAX_INFLIGHT + 4 - SHARE; i++) yield* Effect.sleep("50 millis")
        expect(answered).toBeGreaterThanOrEqual(MAX_INFLIGHT + 4 - SHARE)
        // Its share in progress (the sleepers), the attacker's next requests are refused...
        const more = yield* Effect.all(Array.from({ length: SHARE }, () => call("GET", "/v1/account", { token: attacker.token })), {
          concurrency: "unbounded"
        })
        const refused = more.find((r) => r.status === 429)
        expect(refused, more.map((r) => r.status).join()).toBeDefined()
        expect(refused!.headers.get("retry-after"), refused!.text).toBe("1")
        expect(refused!.body.error).toMatchObject({ code: "rate_limited", details: { limit: SHARE, retry_after: 1 } })
        // ...while another organization, the anonymous demo and the health probe are served.
        const account = yield* call("GET", "/v1/account", { token: victim.token })
        expect(account.status, account.text).toBe(200)
        expect((yield* call("GET", "/v1/demo/account")).status).toBe(200)
        expect((yield* call("GET", "/v1/health")).status).toBe(200)

        openGate()
        const replies = yield* Fiber.join(flood)
        const statuses = replies.map((r) => r.status)
        // At most its share ran; the rest were told to come back.
        expect(statuses.filter((s) => s === 200).length).toBeLessThanOrEqual(SHARE)
        // Refused at once, never by filling the process (no 503 shed).
        expect(statuses.filter((s) => s === 429).length).toBe(MAX_INFLIGHT + 4 - statuses.filter((s) => s === 200).length)
        for (const r of replies.filter((r) => r.status === 200)) expect(r.body.data.response_body).toBe("open")
        for (const r of replies.filter((r) => r.status === 429)) expect(r.body.error.code).toBe("rate_limited")
        expect(server.port).toBeGreaterThan(0)
      }))

    it.scoped("the health probe answers 503 service_unavailable while the process admits no request, and 200 again after", () =>
      Effect.gen(function*() {
        const server = yield* TestServer
        const orgs = yield* Effect.all(Array.from({ length: MAX_INFLIGHT / SHARE }, () => newOrg()))
        const holds = yield* Effect.forEach(orgs.flatMap((o) => Array.from({ length: SHARE }, () => o)), (o) => held(server.port, o.token))
        const health = yield* until(call("GET", "/v1/health"), (r) => r.status === 503)
        expect(health.status, health.text).toBe(503)
        expect(health.headers.get("retry-after")).toBe("1")
        expect(health.body.error.code).toBe("service_unavailable")
        const other = yield* newOrg()
        expect((yield* call("GET", "/v1/account", { token: other.token })).status).toBe(503)
        for (const h of holds) h.finish()
        for (const reply of yield* Effect.promise(() => Promise.all(holds.map((h) => h.reply)))) expect(reply).toMatch(/^HTTP\/1\.1 201 /)
        const back = yield* until(call("GET", "/v1/health"), (r) => r.status === 200)
        expect(back.status).toBe(200)
      }))
  })

  describe("function slots", () => {
    it.effect("two organizations keeping 4 slots each busy do not make a third wait: its invocation ends before theirs", () =>
      Effect.gen(function*() {
        const [a, b, c] = yield* Effect.all([newOrg(), newOrg(), newOrg()])
        const [fa, fb] = yield* Effect.all([deployed(a!.token, SLEEPER), deployed(b!.token, SLEEPER)])
        const quick = yield* deployed(c!.token, QUICK)
        closeGate()
        const sleepers = yield* Effect.fork(Effect.all(
          [...Array.from({ length: 4 }, () => invoke(a!.token, fa!)), ...Array.from({ length: 4 }, () => invoke(b!.token, fb!))],
          { concurrency: "unbounded" }
        ))
        // Every sleeper that can start has started (they hold the gate's connections).
        for (let i = 0; i < 400 && waiting.length < 6; i++) yield* Effect.sleep("50 millis")
        expect(waiting.length).toBeGreaterThanOrEqual(6)
        // The third organization's invocation is answered while the others still sleep (before the
        // gate opens; on a process they had filled it would wait for them, here for at most 30 s).
        const r = yield* Effect.raceFirst(invoke(c!.token, quick), Effect.as(Effect.sleep("30 seconds"), undefined))
        expect(r, "the third organization's invocation waited for the others").toBeDefined()
        expect(r!.status, r!.text).toBe(200)
        expect(r!.body.data.status).toBe("ok")
        expect(r!.body.data.response_body).toBe("quick")
        openGate()
        const done = yield* Fiber.join(sleepers)
        for (const s of done) {
          expect(s.status, s.text).toBe(200)
          expect(s.body.data.response_body).toBe("open")
        }
      }), { timeout: 90_000 })
  })

  describe("deploy validation", () => {
    it.scoped("modules whose top level never returns hold one validation slot of their organization: another organization deploys at once", () =>
      Effect.gen(function*() {
        const attacker = yield* newOrg()
        const victim = yield* newOrg()
        let spinsDone = 0
        const spin = () =>
          Effect.fork(Effect.tap(
            deploy(attacker.token, "while (true) {}\nexport default { fetch() { return new Response('x') } }"),
            () => Effect.sync(() => spinsDone++)
          ))
        const first = yield* spin()
        yield* spin()
        yield* Effect.sleep("500 millis")
        const id = yield* deployed(victim.token, QUICK)
        expect(id).toMatch(/^[0-9a-f-]{36}$/)
        // Deployed while both spinning modules were still being loaded.
        expect(spinsDone).toBe(0)
        const refused = yield* Fiber.join(first)
        expect(refused.status, refused.text).toBe(400)
        expect(refused.body.error.message).toContain("did not load within")
      }), { timeout: 60_000 })
  })
})
