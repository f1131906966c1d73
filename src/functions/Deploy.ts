/**
 * Deploying a function's code and secrets, for the Functions handlers and for template installs:
 * every problem of the input reported together, then the module loaded in workerd (its message is
 * the error), then the row.
 */
import { Effect } from "effect"
import { ValidationError } from "../contract/Errors.js"
import { CODE_MAX_BYTES, MAX_SECRETS, SECRET_NAME, SECRET_VALUE_MAX_BYTES } from "./Api.js"
import { FunctionsRepo } from "./Repo.js"
import { busyAsRateLimited, FunctionRuntime } from "./Runtime.js"
import { RESERVED_BINDINGS } from "./Workerd.js"

interface Issue {
  readonly field: string
  readonly reason: string
}

export const invalidFunction = (issues: ReadonlyArray<Issue>) =>
  new ValidationError({
    message: issues.map((i) => `${i.field}: ${i.reason}`).join("; "),
    details: { issues: issues.map((i) => ({ field: i.field, reason: i.reason })) }
  })

/** Size, name and count problems of a code and secrets change; `kept`: secret names already set. */
const inputIssues = (
  code: string | undefined,
  secrets: Readonly<Record<string, string | null>> | undefined,
  kept: ReadonlyArray<string>
): Array<Issue> => {
  const issues: Array<Issue> = []
  if (code !== undefined && Buffer.byteLength(code, "utf8") > CODE_MAX_BYTES) {
    issues.push({ field: "code", reason: `must be at most ${CODE_MAX_BYTES} bytes` })
  }
  if (secrets === undefined) return issues
  const after = new Set(kept)
  for (const [name, value] of Object.entries(secrets)) {
    if (!SECRET_NAME.test(name)) issues.push({ field: `secrets.${name}`, reason: "names match ^[A-Z][A-Z0-9_]{0,63}$" })
    else if ((RESERVED_BINDINGS as ReadonlyArray<string>).includes(name)) {
      issues.push({ field: `secrets.${name}`, reason: "is a binding the service provides" })
    }
    if (value !== null && Buffer.byteLength(value, "utf8") > SECRET_VALUE_MAX_BYTES) {
      issues.push({ field: `secrets.${name}`, reason: `values are at most ${SECRET_VALUE_MAX_BYTES} bytes` })
    }
    if (value === null) after.delete(name)
    else after.add(name)
  }
  if (after.size > MAX_SECRETS) issues.push({ field: "secrets", reason: `at most ${MAX_SECRETS} secrets` })
  return issues
}

export class FunctionDeployer extends Effect.Service<FunctionDeployer>()("mailroom/FunctionDeployer", {
  effect: Effect.gen(function*() {
    const runtime = yield* FunctionRuntime
    const repo = yield* FunctionsRepo

    /** Fails with every problem of the input, then with workerd's message if the module does not load. */
    const check = (
      orgId: string,
      code: string | undefined,
      secrets: Readonly<Record<string, string | null>> | undefined,
      kept: ReadonlyArray<string> = []
    ) =>
      Effect.gen(function*() {
        const issues = inputIssues(code, secrets, kept)
        if (issues.length > 0) return yield* invalidFunction(issues)
        if (code === undefined) return
        const problem = yield* runtime.validate(orgId, code).pipe(Effect.catchTag("SlotsBusy", busyAsRateLimited))
        if (problem !== undefined) return yield* invalidFunction([{ field: "code", reason: problem }])
      })

    const create = (orgId: string, input: { name: string; code: string; secrets: Readonly<Record<string, string>> }) =>
      Effect.zipRight(check(orgId, input.code, input.secrets), repo.insert(orgId, input))

    return { check, create } as const
  }),
  dependencies: [FunctionsRepo.Default]
}) {}
