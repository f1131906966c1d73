/**
 * Memory bombs in real workerd processes: memory outside the heap past the RSS watchdog, and a heap
 * bomb, are each function_crashed, with no workerd left running and neighbours unaffected. The wall
 * clock here is long so that, however loaded the machine, the memory limit is reached before it.
 */
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { Provisioning } from "../src/identity/Provisioning.js"
import { testService } from "./support/harness.js"
import { deploy, functionsOrg, invoke, marker, workerdWithSecret } from "./support/functions.js"

const TIMEOUT_MS = 60_000

const Env = Provisioning.Default.pipe(
  Layer.provideMerge(testService({
    FUNCTION_TIMEOUT: `${TIMEOUT_MS}ms`,
    DELIVERY_RETRY_DELAYS: "300ms,600ms",
    DELIVERY_TIMEOUT: "1s",
    DNS_SERVER: "127.0.0.1:9"
  }))
)

layer(Env, { timeout: 240_000, excludeTestServices: true })("functions memory", (it) => {
  describe("memory", () => {
    it.effect("memory outside the heap (ArrayBuffers) past 512 MB of RSS: the watchdog stops the process, function_crashed", () =>
      Effect.gen(function*() {
        const org = yield* functionsOrg()
        const mark = marker()
        const hog = yield* deploy(org.token, `export default { async fetch() {
          const hoard = [];
          for (let i = 0; i < 40; i++) {
            const b = new Uint8Array(32 * 1024 * 1024);
            b.fill(i + 1);
            hoard.push(b);
            await new Promise((r) => setTimeout(r, 20));
          }
          return new Response("kept " + hoard.length);
        } }`, { MARK: mark })
        const r = yield* invoke(org.token, hog.id)
        expect(r.status, r.logs).toBe("function_crashed")
        expect(r.error).toContain("passed 512 MB of memory and was stopped")
        expect(workerdWithSecret(mark)).toEqual([])
      }))

    it.effect("a heap bomb is function_crashed and its neighbours are unaffected", () =>
      Effect.gen(function*() {
        const org = yield* functionsOrg()
        const neighbourOrg = yield* functionsOrg()
        const mark = marker()
        const bomb = yield* deploy(org.token, `export default { async fetch() {
          const hoard = [];
          for (;;) hoard.push(new Array(1e6).fill(1.5));
        } }`, { MARK: mark })
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
        // The crashed process is gone; the neighbour's stays warm for its next invocation.
        expect(workerdWithSecret(mark)).toEqual([])
      }))
  })
})
