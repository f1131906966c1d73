/**
 * Whose memories a request reaches. A function's scope needs the organization's functions
 * entitlement and one of its functions (by id or name); the organization's own scope needs neither.
 */
import { Effect, Option } from "effect"
import { NotFound } from "../contract/Errors.js"
import { Policy } from "../policy/Policy.js"
import { type MemoryScope, MemoriesRepo } from "./Repo.js"

export class MemoryScopes extends Effect.Service<MemoryScopes>()("mailroom/MemoryScopes", {
  effect: Effect.gen(function*() {
    const policy = yield* Policy
    const repo = yield* MemoriesRepo

    const functionScope = (orgId: string, ref: string) =>
      Effect.gen(function*() {
        yield* policy.require(orgId, "memories.use")
        const id = yield* repo.functionIdOf(orgId, ref)
        if (Option.isNone(id)) return yield* new NotFound({ message: `no function ${ref}` })
        return { orgId, functionId: id.value } satisfies MemoryScope
      })

    return { functionScope } as const
  })
}) {}
