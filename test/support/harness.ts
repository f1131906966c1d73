/**
 * Test harness: a real Mailroom service on a random port, over a database of its own.
 *
 * Without DATABASE_URL each service gets a fresh embedded PGlite in a temporary directory; with
 * DATABASE_URL (a server such as postgres://postgres@127.0.0.1:5432/test) each test file creates
 * its own database on that server and drops it afterwards, so runs never see each other's rows.
 */
import { SqlClient } from "@effect/sql"
import { Clock, ConfigProvider, Context, Duration, Effect, Layer, Option, Schedule } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import pg from "pg"
import { AppConfig, appConfig } from "../../src/platform/Config.js"
import { DatabaseLive } from "../../src/platform/Database.js"
import { SmtpServerLive } from "../../src/inbound/SmtpServer.js"
import { DispatcherLive } from "../../src/deliveries/Dispatcher.js"
import { type BacklogOptions, EmbeddingBacklogLive } from "../../src/search/Backlog.js"
import { LocalDelivery } from "../../src/sending/LocalDelivery.js"
import { deliveryServices, DeliveryServicesLive, HttpLive, loggerLayer, PlatformServicesLive, PaymentEmailWorkersLive, SendTimersLive, WakeTimersLive } from "../../src/Server.js"

/**
 * A port found free can be taken by another test process before the server binds it; the server is
 * then started again on fresh ports (a bind conflict says nothing about the code under test).
 */
const isAddressInUse = (e: unknown): boolean => /EADDRINUSE|already in use/.test(String((e as { cause?: unknown })?.cause ?? e)) ||
  /EADDRINUSE/.test(JSON.stringify(e, (_k, v) => (typeof v === "bigint" ? String(v) : v)) ?? "")
/** Retries of a scheduled send's transient relay failures, short enough for a test to watch. */
const SEND_RETRY_DELAYS = [Duration.millis(200), Duration.millis(200)]

export const retryOnPortConflict = Schedule.recurs(4).pipe(Schedule.whileInput(isAddressInUse))

export const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const srv = createServer()
    srv.once("error", reject)
    srv.listen(0, "127.0.0.1", () => {
      const address = srv.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      srv.close(() => resolve(port))
    })
  })

/** A fresh database on the server named by DATABASE_URL, dropped when the scope closes. */
export const scratchDatabase = Effect.acquireRelease(
  Effect.promise(async () => {
    const url = process.env.DATABASE_URL
    if (url === undefined || url === "") return Option.none<string>()
    const name = `mailroom_t_${process.pid}_${Math.random().toString(36).slice(2, 10)}`
    const admin = new pg.Client({ connectionString: url })
    await admin.connect()
    await admin.query(`CREATE DATABASE ${name}`)
    await admin.end()
    const u = new URL(url)
    u.pathname = `/${name}`
    return Option.some(u.toString())
  }),
  (db) =>
    Option.match(db, {
      onNone: () => Effect.void,
      onSome: (dbUrl) =>
        Effect.promise(async () => {
          const name = new URL(dbUrl).pathname.slice(1)
          const admin = new pg.Client({ connectionString: process.env.DATABASE_URL })
          await admin.connect()
          await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
          await admin.end()
        }).pipe(Effect.ignore)
    })
)

export const tempDir = Effect.acquireRelease(
  Effect.sync(() => mkdtempSync(join(tmpdir(), "mailroom-test-"))),
  (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
)

export const usingRealPostgres = () => (process.env.DATABASE_URL ?? "") !== ""

/** Config of a test service: the environment's defaults with test-friendly overrides. */
export const testConfigLayer = (env: Record<string, string>) =>
  Layer.effect(AppConfig, Effect.withConfigProvider(appConfig, ConfigProvider.fromMap(new Map(Object.entries(env)))))

export interface TestServerShape {
  readonly port: number
  readonly smtpPort: number
  readonly baseUrl: string
}
export class TestServer extends Context.Tag("test/TestServer")<TestServer, TestServerShape>() {}

/** Database + platform services of one test file, shared by every server instance built on it. */
export const testDatabase = (overrides: Record<string, string> = {}) =>
  Layer.unwrapScoped(Effect.gen(function*() {
    const db = yield* scratchDatabase
    const dir = yield* tempDir
    const env: Record<string, string> = {
      DATA_DIR: dir,
      LOG_LEVEL: "warning",
      WEBHOOK_ALLOW_PRIVATE_URLS: "true",
      ...Option.match(db, { onNone: () => ({}), onSome: (url) => ({ DATABASE_URL: url }) }),
      ...overrides
    }
    return DatabaseLive.pipe(Layer.provideMerge(testConfigLayer(env)))
  }))

/** One HTTP server on a free port over the given database layer's services (and the embedding backlog when asked). */
export const testServerOn = (options: {
  readonly embeddingBacklog?: BacklogOptions
  /**
   * false: mail for the service's own addresses goes to the relay too, as between two services (for
   * tests that hand relayed mail back in over SMTP themselves, at the moment they choose).
   */
  readonly localDelivery?: boolean
} = {}) =>
  Layer.unwrapEffect(Effect.gen(function*() {
    const base = yield* AppConfig
    const port = yield* Effect.promise(freePort)
    const smtpPort = yield* Effect.promise(freePort)
    const baseUrl = `http://127.0.0.1:${port}`
    const config = { ...base, port, smtpPort, publicBaseUrl: baseUrl }
    return Layer.mergeAll(
      HttpLive,
      SmtpServerLive,
      DispatcherLive({ concurrency: 16, pollMs: 50 }),
      WakeTimersLive({ pollMs: 50 }),
      options.embeddingBacklog === undefined
        ? Layer.empty
        // A test run keeps the machine's cores busy by design: the backlog is not held back for it
        // unless a test asks (test/search-backlog-yield.test.ts).
        : EmbeddingBacklogLive({ idleBelow: 0, ...options.embeddingBacklog }),
      SendTimersLive({ pollMs: 50, retryDelays: SEND_RETRY_DELAYS }),
      PaymentEmailWorkersLive({ pollMs: 50 }),
      Layer.succeed(TestServer, { port, smtpPort, baseUrl })
    ).pipe(
      Layer.provide(options.localDelivery === false ? deliveryServices(LocalDelivery.Off) : DeliveryServicesLive),
      Layer.provide(PlatformServicesLive),
      Layer.provide(loggerLayer),
      Layer.provide(Layer.succeed(AppConfig, config))
    )
  })).pipe(Layer.retry(retryOnPortConflict))

/** The usual fixture: one database, one server, the SqlClient for assertions. */
export const testService = (overrides: Record<string, string> = {}, options: { readonly embeddingBacklog?: BacklogOptions } = {}) =>
  testServerOn(options).pipe(Layer.provideMerge(testDatabase(overrides)))

/**
 * A clock tests can move forward: provided to the service (`testService(env, clock)`), every expiry
 * and window the service enforces follows it.
 */
export const makeManualClock = () => {
  let offset = 0
  const clock: Clock.Clock = {
    [Clock.ClockTypeId]: Clock.ClockTypeId,
    unsafeCurrentTimeMillis: () => Date.now() + offset,
    unsafeCurrentTimeNanos: () => BigInt(Date.now() + offset) * 1_000_000n,
    currentTimeMillis: Effect.sync(() => Date.now() + offset),
    currentTimeNanos: Effect.sync(() => BigInt(Date.now() + offset) * 1_000_000n),
    sleep: (d) => Effect.sleep(d).pipe(Effect.withClock(Clock.make()))
  }
  return { clock, advance: (ms: number) => { offset += ms }, layer: Layer.setClock(clock) }
}

export type TestEnv = TestServer | SqlClient.SqlClient | AppConfig


/**
 * Starts one more HTTP server (scoped) over the current test database. On PostgreSQL it gets a
 * connection pool of its own, as a second process would; embedded PGlite has one connection, so
 * there the servers share it.
 */
export const extraServer = Effect.suspend(() => extraServerOnce).pipe(Effect.retry(retryOnPortConflict))

const extraServerOnce = Effect.gen(function*() {
  const base = yield* AppConfig
  const port = yield* Effect.promise(freePort)
  const smtpPort = yield* Effect.promise(freePort)
  const baseUrl = `http://127.0.0.1:${port}`
  const config = { ...base, port, smtpPort, publicBaseUrl: baseUrl }
  const ownPool = Option.isSome(base.databaseUrl)
  const services = PlatformServicesLive.pipe(Layer.provideMerge(loggerLayer))
  const server = Layer.mergeAll(HttpLive, SmtpServerLive, DispatcherLive({ concurrency: 16, pollMs: 50 }), WakeTimersLive({ pollMs: 50 }),
    SendTimersLive({ pollMs: 50, retryDelays: SEND_RETRY_DELAYS })).pipe(
    Layer.provide(DeliveryServicesLive),
    Layer.provide(services)
  )
  const withDb = ownPool
    ? server.pipe(Layer.provide(DatabaseLive))
    : server
  const sql = yield* SqlClient.SqlClient
  yield* Layer.build(
    withDb.pipe(
      Layer.provide(Layer.succeed(AppConfig, config)),
      Layer.provide(Layer.succeed(SqlClient.SqlClient, sql))
    )
  )
  return { port, smtpPort, baseUrl }
})
