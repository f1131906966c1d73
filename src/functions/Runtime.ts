/**
 * The functions runtime of this process: a queue in front of workerd processes (at most
 * FUNCTION_CONCURRENCY at once, 4 per organization), the memory socket their bindings reach, and
 * the short-lived credential each invocation's MAILROOM binding carries.
 */
import { Data, Duration, Effect, Option } from "effect"
import { RateLimited } from "../contract/Errors.js"
import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { MemoriesRepo } from "../memories/Repo.js"
import { AppConfig } from "../platform/Config.js"
import { Credentials } from "../platform/Credentials.js"
import { FairSlots, quarterReserve } from "../platform/FairSlots.js"
import { setHeader } from "../platform/HttpHeaders.js"
import { PREFIX, randomToken, sha256Hex } from "../platform/Secrets.js"
import { type InvocationIdentity, startMemoryHost } from "./MemoryHost.js"
import { killAll, type ProcessResult, runProcess, validateModule } from "./Process.js"
import { FunctionsRepo } from "./Repo.js"

export const PER_ORG_CONCURRENCY = 4
/** Loading a module to validate it should take well under a second; this bounds a pathological one. */
const VALIDATION_TIMEOUT_MS = 15_000
const VALIDATION_CONCURRENCY = 2
/** An organization validates one module at a time: two spinning modules cannot hold both slots. */
const VALIDATION_PER_ORG = 1
/** How long an API caller (invoke, deploy) waits for a slot before 429 `rate_limited`. */
export const QUEUE_TIMEOUT_MS = 30_000
const BUSY_RETRY_AFTER_SECONDS = 1

/** No slot was granted within the caller's bound. */
export class SlotsBusy extends Data.TaggedError("SlotsBusy")<{ readonly what: "invocation" | "validation"; readonly waitedMs: number }> {}

/** The API's answer to `SlotsBusy`: 429 `rate_limited` with `Retry-After`. */
export const busyAsRateLimited = (e: SlotsBusy) =>
  Effect.zipRight(
    setHeader("retry-after", String(BUSY_RETRY_AFTER_SECONDS)),
    Effect.fail(
      new RateLimited({
        message: e.what === "invocation"
          ? `this organization's ${PER_ORG_CONCURRENCY} function slots (or the service's) stayed busy for ${e.waitedMs / 1000} s; retry later`
          : `this organization's module validation slot stayed busy for ${e.waitedMs / 1000} s; retry later`,
        details: { retry_after: BUSY_RETRY_AFTER_SECONDS, limit: e.what === "invocation" ? PER_ORG_CONCURRENCY : VALIDATION_PER_ORG }
      })
    )
  )
/** A credential outlives the wall clock by this much, in case revocation at the end fails. */
const TOKEN_MARGIN_MS = 60_000


export interface RunInput {
  readonly orgId: string
  readonly functionId: string
  readonly code: string
  readonly secrets: Readonly<Record<string, string>>
  readonly webhookSecret: string
  readonly body: string
  readonly headers: Readonly<Record<string, string>>
  /**
   * Runs once a slot is free, just before the process starts; false cancels the invocation (the
   * caller no longer holds what it was running for, such as a delivery's claim).
   */
  readonly onStart?: Effect.Effect<boolean>
  /** Longest wait for a slot before `SlotsBusy` (deliveries wait as long as it takes). */
  readonly maxWaitMs?: number
}

/** Replaces every secret value in captured text, so a function logging its secrets does not store them. */
export const redactSecrets = (text: string, secrets: Readonly<Record<string, string>>) => {
  let out = text
  for (const [name, value] of Object.entries(secrets)) {
    if (value.length >= 4) out = out.split(value).join(`[secret ${name}]`)
  }
  return out
}

const serviceAddress = (host: string, port: number) => {
  const local = host === "0.0.0.0" || host === "::" || host === "" || host === "localhost"
  const h = local ? "127.0.0.1" : host
  return h.includes(":") ? `[${h}]:${port}` : `${h}:${port}`
}

export class FunctionRuntime extends Effect.Service<FunctionRuntime>()("mailroom/FunctionRuntime", {
  scoped: Effect.gen(function*() {
    const config = yield* AppConfig
    const repo = yield* FunctionsRepo
    const credentials = yield* Credentials
    const timeoutMs = Duration.toMillis(config.functionTimeout)
    const stateDir = yield* Effect.acquireRelease(
      Effect.sync(() => mkdtempSync(join(tmpdir(), `mailroom-fn-${process.pid}-`))),
      (dir) => Effect.sync(() => {
        killAll()
        rmSync(dir, { recursive: true, force: true })
      })
    )
    const running = new Map<string, InvocationIdentity>()
    const memorySocket = join(stateDir, "memory.sock")
    const memoryHost = yield* Effect.acquireRelease(
      startMemoryHost(memorySocket, (token) => running.get(token)),
      (server) => Effect.sync(() => server.close())
    )
    /**
     * The state directory removed under the running service (a tmp cleaner, an operator): created
     * again with the memory socket, so deploys and invocations keep working instead of failing.
     */
    const restoring = yield* Effect.makeSemaphore(1)
    const ensureState = restoring.withPermits(1)(Effect.async<void, Error>((resume) => {
      if (existsSync(memorySocket)) return resume(Effect.void)
      try {
        mkdirSync(stateDir, { recursive: true, mode: 0o700 })
      } catch (e) {
        return resume(Effect.fail(e as Error))
      }
      memoryHost.close()
      const failed = (e: Error) => resume(Effect.fail(e))
      memoryHost.once("error", failed)
      memoryHost.listen(memorySocket, () => {
        memoryHost.off("error", failed)
        chmodSync(memorySocket, 0o600)
        resume(Effect.void)
      })
    })).pipe(
      Effect.tap(() => Effect.void),
      Effect.catchAll((e) =>
        Effect.die(new Error(`the functions state directory ${stateDir} could not be created again: ${e.message}`))
      )
    )

    // The process's slots, shared fairly: an organization holds at most its 4, and the last quarter
    // of the slots go only to organizations running nothing, so a few organizations keeping their
    // slots busy for a whole wall clock never make a third one wait for them.
    const slots = new FairSlots({
      total: config.functionConcurrency,
      perOwner: PER_ORG_CONCURRENCY,
      reserve: quarterReserve(config.functionConcurrency)
    })

    /** Runs one invocation when a slot is free (the organization's first, then the process's). */
    const run = (input: RunInput): Effect.Effect<Option.Option<ProcessResult>, SlotsBusy> =>
      Effect.flatMap(slots.withSlot(input.orgId, Effect.gen(function*() {
        if (input.onStart !== undefined && !(yield* input.onStart)) return Option.none<ProcessResult>()
        yield* ensureState
        const credential = `${PREFIX.functionToken}${randomToken(40)}`
        const invocationToken = randomToken(40)
        const expiresAt = new Date(Date.now() + timeoutMs + TOKEN_MARGIN_MS)
        const tokenId = yield* repo.issueToken(input.orgId, input.functionId, sha256Hex(credential), expiresAt)
        return yield* Effect.acquireUseRelease(
          Effect.sync(() => running.set(invocationToken, { orgId: input.orgId, functionId: input.functionId })),
          () =>
            Effect.promise(() =>
              runProcess({
                code: input.code,
                secrets: input.secrets,
                webhookSecret: input.webhookSecret,
                body: input.body,
                headers: input.headers,
                timeoutMs,
                stateDir,
                memorySocket,
                invocationToken,
                serviceAddress: serviceAddress(config.host, config.port),
                serviceCredential: credential,
                allowPrivateNetwork: config.functionAllowPrivateNetwork
              })
            ),
          () =>
            Effect.sync(() => running.delete(invocationToken)).pipe(
              Effect.zipRight(repo.revokeToken(tokenId).pipe(Effect.ignore)),
              // The request pipeline may hold the credential for a few seconds: it ends with the run.
              Effect.zipRight(credentials.forgetApiKey(tokenId))
            )
        ).pipe(Effect.map(Option.some))
      }), input.maxWaitMs), (granted) =>
        Option.match(granted, {
          onNone: () => Effect.fail(new SlotsBusy({ what: "invocation", waitedMs: input.maxWaitMs ?? 0 })),
          onSome: Effect.succeed
        })).pipe(Effect.map(Option.map((r) => {
        const secrets = { ...input.secrets, MAILROOM_WEBHOOK_SECRET: input.webhookSecret }
        return {
          ...r,
          logs: redactSecrets(r.logs, secrets),
          responseBody: redactSecrets(r.responseBody, secrets),
          error: r.error === null ? null : redactSecrets(r.error, secrets)
        }
      })))

    // Deploys have slots of their own: a queue of long invocations must not hold a deploy up. One
    // per organization, so modules that never finish loading hold at most one of them (and one core,
    // at the lowest CPU priority, for at most VALIDATION_TIMEOUT_MS).
    const validations = new FairSlots({ total: VALIDATION_CONCURRENCY, perOwner: VALIDATION_PER_ORG, reserve: 0 })

    /** Loads a module in workerd: undefined when it loads, else workerd's message. */
    const validate = (orgId: string, code: string, maxWaitMs: number = QUEUE_TIMEOUT_MS) =>
      Effect.flatMap(
        validations.withSlot(orgId, Effect.zipRight(ensureState, Effect.promise(() => validateModule(code, stateDir, VALIDATION_TIMEOUT_MS))), maxWaitMs),
        Option.match({
          onNone: () => Effect.fail(new SlotsBusy({ what: "validation", waitedMs: maxWaitMs })),
          onSome: Effect.succeed
        })
      )

    return { run, validate } as const
  }),
  dependencies: [FunctionsRepo.Default, MemoriesRepo.Default]
}) {}
