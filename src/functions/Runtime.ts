/**
 * The functions runtime of this process: a queue in front of workerd processes (at most
 * FUNCTION_CONCURRENCY at once, 4 per organization), the memory socket their bindings reach, and
 * the short-lived credential each invocation's MAILROOM binding carries.
 */
import { Duration, Effect, Option } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { MemoriesRepo } from "../memories/Repo.js"
import { AppConfig } from "../platform/Config.js"
import { Credentials } from "../platform/Credentials.js"
import { PREFIX, randomToken, sha256Hex } from "../platform/Secrets.js"
import { type InvocationIdentity, startMemoryHost } from "./MemoryHost.js"
import { killAll, type ProcessResult, runProcess, validateModule } from "./Process.js"
import { FunctionsRepo } from "./Repo.js"

export const PER_ORG_CONCURRENCY = 4
/** Loading a module to validate it should take well under a second; this bounds a pathological one. */
const VALIDATION_TIMEOUT_MS = 15_000
const VALIDATION_CONCURRENCY = 2
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
      Effect.sync(() => mkdtempSync(join(tmpdir(), "mailroom-fn-"))),
      (dir) => Effect.sync(() => {
        killAll()
        rmSync(dir, { recursive: true, force: true })
      })
    )
    const running = new Map<string, InvocationIdentity>()
    const memorySocket = join(stateDir, "memory.sock")
    yield* Effect.acquireRelease(
      startMemoryHost(memorySocket, (token) => running.get(token)),
      (server) => Effect.sync(() => server.close())
    )

    const global = yield* Effect.makeSemaphore(config.functionConcurrency)
    const perOrg = new Map<string, { readonly sem: Effect.Semaphore; users: number }>()
    /** The organization's semaphore, dropped when nobody holds or waits for it. */
    const withOrgSlot = <A, E, R>(orgId: string, effect: Effect.Effect<A, E, R>) =>
      Effect.acquireUseRelease(
        Effect.sync(() => {
          let entry = perOrg.get(orgId)
          if (entry === undefined) {
            entry = { sem: Effect.unsafeMakeSemaphore(PER_ORG_CONCURRENCY), users: 0 }
            perOrg.set(orgId, entry)
          }
          entry.users++
          return entry
        }),
        (entry) => entry.sem.withPermits(1)(effect),
        (entry) => Effect.sync(() => {
          entry.users--
          if (entry.users === 0) perOrg.delete(orgId)
        })
      )

    /** Runs one invocation when a slot is free (the organization's first, then the process's). */
    const run = (input: RunInput): Effect.Effect<Option.Option<ProcessResult>> =>
      withOrgSlot(input.orgId, global.withPermits(1)(Effect.gen(function*() {
        if (input.onStart !== undefined && !(yield* input.onStart)) return Option.none<ProcessResult>()
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
      }))).pipe(Effect.map(Option.map((r) => {
        const secrets = { ...input.secrets, MAILROOM_WEBHOOK_SECRET: input.webhookSecret }
        return {
          ...r,
          logs: redactSecrets(r.logs, secrets),
          responseBody: redactSecrets(r.responseBody, secrets),
          error: r.error === null ? null : redactSecrets(r.error, secrets)
        }
      })))

    // Deploys have slots of their own: a queue of long invocations must not hold a deploy up.
    const validations = yield* Effect.makeSemaphore(VALIDATION_CONCURRENCY)

    /** Loads a module in workerd: undefined when it loads, else workerd's message. */
    const validate = (code: string) =>
      validations.withPermits(1)(Effect.promise(() => validateModule(code, stateDir, VALIDATION_TIMEOUT_MS)))

    return { run, validate } as const
  }),
  dependencies: [FunctionsRepo.Default, MemoriesRepo.Default]
}) {}
