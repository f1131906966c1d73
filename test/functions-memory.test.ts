/**
 * Memory bombs in real workerd processes: memory outside the heap past the RSS watchdog, and a heap
 * bomb, are each function_crashed, with no workerd left running and neighbours unaffected. The wall
 * clock here is long so that, however loaded the machine, the memory limit is reached before it.
 */
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { readdirSync, readFileSync } from "node:fs"
import { Provisioning } from "../src/identity/Provisioning.js"
import { testService } from "./support/harness.js"
import { call } from "./support/http.js"

const TIMEOUT_MS = 60_000

const Env = Provisioning.Default.pipe(
  Layer.provideMerge(testService({
    FUNCTION_TIMEOUT: `${TIMEOUT_MS}ms`,
    DELIVERY_RETRY_DELAYS: "300ms,600ms",
    DELIVERY_TIMEOUT: "1s",
    DNS_SERVER: "127.0.0.1:9"
  }))
)

const newOrg = () =>
  Effect.gen(function*() {
    const p = yield* Provisioning
    const org = yield* p.createOrganization({ name: "Iso", plan: "developer" })
    const key = yield* p.issueApiKey(org.id)
    return { orgId: org.id, token: key.apiKey, inbox: org.managedInboxAddress }
  })

let seq = 0
const deploy = (token: string, code: string, secrets?: Record<string, string>) =>
  Effect.gen(function*() {
    const r = yield* call("POST", "/v1/functions", {
      token,
      body: { name: `iso-${++seq}-${Math.random().toString(36).slice(2, 7)}`, code, ...(secrets ? { secrets } : {}) }
    })
    expect(r.status, r.text).toBe(201)
    return r.body.data as { id: string }
  })

const invoke = (token: string, id: string) =>
  Effect.gen(function*() {
    const started = Date.now()
    // Concurrent identical invokes are distinct requests, not retries of one.
    const r = yield* call("POST", `/v1/functions/${id}/invoke`, { token, body: {}, headers: { "idempotency-key": crypto.randomUUID() } })
    expect(r.status, r.text).toBe(200)
    return { ...(r.body.data as { status: string; status_code: number | null; response_body: string; duration_ms: number; logs: string; error: string | null }), elapsed: Date.now() - started }
  })

/** workerd processes this test process started (directly or through the service) that still run. */
const workerdChildren = () => {
  const out: Array<number> = []
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8")
      const comm = /\((.*)\)/.exec(stat)?.[1]
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1])
      if (comm === "workerd" && ppid === process.pid) out.push(Number(entry))
    } catch { /* gone meanwhile */ }
  }
  return out
}

layer(Env, { timeout: 240_000, excludeTestServices: true })("functions memory", (it) => {
  describe("memory", () => {
    it.effect("memory outside the heap (ArrayBuffers) past 512 MB of RSS: the watchdog stops the process, function_crashed", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const hog = yield* deploy(org.token, `export default { async fetch() {
          const hoard = [];
          for (let i = 0; i < 40; i++) {
            const b = new Uint8Array(32 * 1024 * 1024);
            b.fill(i + 1);
            hoard.push(b);
            await new Promise((r) => setTimeout(r, 20));
          }
          return new Response("kept " + hoard.length);
        } }`)
        const r = yield* invoke(org.token, hog.id)
        expect(r.status, r.logs).toBe("function_crashed")
        expect(r.error).toContain("passed 512 MB of memory and was stopped")
        expect(workerdChildren()).toEqual([])
      }))

    it.effect("a heap bomb is function_crashed and its neighbours are unaffected", () =>
      Effect.gen(function*() {
        const org = yield* newOrg()
        const neighbourOrg = yield* newOrg()
        const bomb = yield* deploy(org.token, `export default { async fetch() {
          const hoard = [];
          for (;;) hoard.push(new Array(1e6).fill(1.5));
        } }`)
        const calm = yield* deploy(neighbourOrg.token, `export default { async fetch() {
          await new Promise((r) => setTimeout(r, 300));
          return new Response("fine");
        } }`)
        const [crashed, ...neighbours] = yield* Effect.all([
          invoke(org.token, bomb.id),
          invoke(neighbourOrg.token, calm.id),
          invoke(neighbourOrg.token, calm.id),
          invoke(neighbourOrg.token, calm.id)
        ], { concurrency: "unbounded" })
        expect(crashed!.status, crashed!.logs).toBe("function_crashed")
        expect(crashed!.error).toContain("ran out of its 128 MB heap")
        for (const n of neighbours) expect(n).toMatchObject({ status: "ok", response_body: "fine" })
        expect(workerdChildren()).toEqual([])
      }))
  })
})
