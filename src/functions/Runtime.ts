/**
 * The functions runtime of this process: a queue in front of the warm workerd processes (at most
 * FUNCTION_CONCURRENCY invocations at once, 4 per organization), the memory socket their bindings
 * reach, and the gate in front of the service that their MAILROOM binding reaches, with a
 * short-lived credential the host holds for each process.
 */
import { Data, Duration, Effect, Option, Runtime } from "effect"
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
import { startMemoryHost } from "./MemoryHost.js"
import { makePool, type WarmProcess } from "./Pool.js"
import { killAll, type ProcessResult, validateModule } from "./Process.js"
import { FunctionsRepo } from "./Repo.js"
import { startServiceGate } from "./ServiceGate.js"

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
/** A warm process idle this long is stopped. */
const IDLE_MS = 30_000


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

const serviceHost = (host: string) => {
  const local = host === "0.0.0.0" || host === "::" || host === "" || host === "localhost"
  return local ? "127.0.0.1" : host
}

/** Everything a process is started with: equal keys, identical processes. */
const versionKey = (input: RunInput) =>
  sha256Hex(JSON.stringify([input.orgId, input.functionId, input.code, Object.entries(input.secrets).sort(), input.webhookSecret]))

interface ProcessCredential {
  readonly value: string
  readonly expiresAt: number
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
    const memorySocket = join(stateDir, "memory.sock")
    const serviceSocket = join(stateDir, "service.sock")
    const rt = yield* Effect.runtime<never>()

    // A process's MAILROOM credential: issued on the first call of a run of invocations, renewed a wall
    // clock before it expires, revoked as soon as the process runs none (so it is valid only while an
    // invocation runs, as the gate also checks); it never enters workerd.
    const issued = new Map<string, { current?: Promise<ProcessCredential>; ids: Array<string> }>()
    const credentialOf = (p: WarmProcess): Promise<ProcessCredential> => {
      let entry = issued.get(p.token)
      if (entry === undefined) {
        entry = { ids: [] }
        issued.set(p.token, entry)
      }
      const e = entry
      const renew = () => {
        const value = `${PREFIX.functionToken}${randomToken(40)}`
        const expiresAt = Date.now() + 2 * timeoutMs + TOKEN_MARGIN_MS
        const next = Runtime.runPromise(rt)(repo.issueToken(p.version.orgId, p.version.functionId, sha256Hex(value), new Date(expiresAt))).then((id) => {
          e.ids.push(id)
          return { value, expiresAt }
        })
        e.current = next
        next.catch(() => {
          if (e.current === next) delete e.current
        })
        return next
      }
      if (e.current === undefined) return renew()
      return e.current.then((c) => c.expiresAt - Date.now() > timeoutMs + TOKEN_MARGIN_MS ? c : renew())
    }
    const revokeCredentials = async (p: WarmProcess): Promise<void> => {
      const entry = issued.get(p.token)
      issued.delete(p.token)
      if (entry === undefined) return
      await Promise.resolve(entry.current).catch(() => undefined)
      await Runtime.runPromise(rt)(Effect.forEach(entry.ids, (id) =>
        repo.revokeToken(id).pipe(
          Effect.ignore,
          // The request pipeline may hold the credential for a few seconds: it ends with the run.
          Effect.zipRight(credentials.forgetApiKey(id))
        ), { discard: true })).catch(() => undefined)
    }

    const pool = makePool({
      stateDir: () => stateDir,
      memorySocket,
      serviceSocket,
      maxProcesses: config.functionConcurrency,
      idleMs: IDLE_MS,
      recycle: { invocations: config.functionProcessMaxInvocations, ms: Duration.toMillis(config.functionProcessMaxAge) },
      onIdle: revokeCredentials
    })
    yield* Effect.addFinalizer(() => Effect.sync(() => pool.stopAll()))
    const memoryHost = yield* Effect.acquireRelease(
      startMemoryHost(memorySocket, (token) => pool.identify(token)?.version),
      (server) => Effect.sync(() => server.close())
    )
    const credentialFor = async (token: string) => {
      const p = pool.identify(token)
      return p === undefined ? undefined : (await credentialOf(p)).value
    }
    const target = { host: serviceHost(config.host), port: config.port }
    const gate = yield* Effect.acquireRelease(
      Effect.promise(() => startServiceGate(serviceSocket, target, credentialFor)),
      (server) => Effect.sync(() => server.close())
    )
    /**
     * The state directory removed under the running service (a tmp cleaner, an operator): created
     * again with both sockets, so deploys and invocations keep working instead of failing. The warm
     * processes lost their own sockets with it: they are stopped and start again on demand.
     */
    const relisten = (server: typeof gate, path: string) =>
      Effect.async<void, Error>((resume) => {
        server.close()
        const failed = (e: Error) => resume(Effect.fail(e))
        server.once("error", failed)
        server.listen(path, () => {
          server.off("error", failed)
          chmodSync(path, 0o600)
          resume(Effect.void)
        })
      })
    const restoring = yield* Effect.makeSemaphore(1)
    const ensureState = restoring.withPermits(1)(Effect.suspend(() => {
      if (existsSync(memorySocket) && existsSync(serviceSocket)) return Effect.void
      return Effect.try({
        try: () => {
          pool.stopAll()
          mkdirSync(stateDir, { recursive: true, mode: 0o700 })
          for (const path of [memorySocket, serviceSocket]) rmSync(path, { force: true })
        },
        catch: (e) => e as Error
      }).pipe(
        Effect.zipRight(relisten(memoryHost, memorySocket)),
        Effect.zipRight(relisten(gate, serviceSocket))
      )
    })).pipe(
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
        const version = {
          key: versionKey(input),
          orgId: input.orgId,
          functionId: input.functionId,
          code: input.code,
          secrets: input.secrets,
          webhookSecret: input.webhookSecret,
          allowPrivateNetwork: config.functionAllowPrivateNetwork
        }
        return yield* Effect.promise(() => pool.invoke(version, input.body, input.headers, timeoutMs)).pipe(Effect.map(Option.some))
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
