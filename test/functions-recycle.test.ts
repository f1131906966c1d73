/**
 * Warm function processes are replaced after `FUNCTION_PROCESS_MAX_INVOCATIONS` (here 3): the next
 * invocation starts a new process (module state starts afresh), an invocation still running in the
 * old one finishes there untouched, and the old process is gone once it runs nothing.
 */
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { Provisioning } from "../src/identity/Provisioning.js"
import { testService } from "./support/harness.js"
import { deploy, functionsOrg, invoke, marker, workerdWithSecret } from "./support/functions.js"

const Env = Provisioning.Default.pipe(
  Layer.provideMerge(testService({ FUNCTION_PROCESS_MAX_INVOCATIONS: "3", FUNCTION_TIMEOUT: "20s", DNS_SERVER: "127.0.0.1:9" }))
)

layer(Env, { timeout: 240_000, excludeTestServices: true })("functions recycling", (it) => {
  describe("a process serves at most 3 invocations", () => {
    it.effect("the 4th starts a new process while the 3rd still runs in the old one, which then stops", () =>
      Effect.gen(function*() {
        const org = yield* functionsOrg()
        const mark = marker()
        // The third invocation in a process takes 1.5 s, long enough for the fourth to arrive meanwhile.
        const fn = yield* deploy(org.token, `let n = 0;
          export default { async fetch(req, env) {
            const mine = ++n;
            if (mine === 3) await new Promise((r) => setTimeout(r, 1500));
            return new Response("call " + mine);
          } }`, { MARK: mark })
        expect((yield* invoke(org.token, fn.id)).response_body).toBe("call 1")
        expect((yield* invoke(org.token, fn.id)).response_body).toBe("call 2")
        const third = yield* Effect.fork(invoke(org.token, fn.id))
        yield* Effect.sleep("400 millis")
        const fourth = yield* invoke(org.token, fn.id)
        expect(fourth.response_body).toBe("call 1")
        expect(workerdWithSecret(mark)).toHaveLength(2)
        const slow = yield* third
        expect(slow.status).toBe("ok")
        expect(slow.response_body).toBe("call 3")
        // The retired process stops once its last invocation has ended.
        let left = workerdWithSecret(mark).length
        for (let i = 0; i < 50 && left > 1; i++) {
          yield* Effect.sleep("100 millis")
          left = workerdWithSecret(mark).length
        }
        expect(left).toBe(1)
        expect((yield* invoke(org.token, fn.id)).response_body).toBe("call 2")
      }))
  })
})
