/**
 * The system of record: PostgreSQL behind one `SqlClient`.
 *
 * `DATABASE_URL` set → @effect/sql-pg against that server. Unset → embedded PGlite (PostgreSQL
 * compiled to WASM) persisted in `DATA_DIR/pglite`, served in-process by pglite-socket so the very
 * same driver (node-postgres) and row parsing are used. PGlite runs one backend and pglite-socket
 * interleaves protocol messages of concurrent connections, so both sides use exactly ONE connection.
 * The embedded database belongs to one process; several processes need a PostgreSQL server.
 */
import { PGlite } from "@electric-sql/pglite"
import { pg_trgm } from "@electric-sql/pglite/contrib/pg_trgm"
import { PGLiteSocketServer } from "@electric-sql/pglite-socket"
import { Migrator, SqlClient } from "@effect/sql"
import { SqlError } from "@effect/sql/SqlError"
import { PgClient } from "@effect/sql-pg"
import { Data, Effect, Layer, Option, Redacted } from "effect"
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { execFile } from "node:child_process"
import { createRequire } from "node:module"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import type pg from "pg"
import { AppConfig } from "./Config.js"
import { databaseTemplatePath } from "./DatabaseTemplate.js"
import { CountingPool } from "./SqlCounters.js"
import { workerRole } from "./Workers.js"

export const MIGRATIONS_DIR = fileURLToPath(new URL("../../migrations", import.meta.url))

/** Loads `NNNN_name.sql` files; each file runs as one multi-statement simple query. */
export const sqlFileLoader = (directory: string): Migrator.Loader =>
  Effect.try({
    try: () =>
      readdirSync(directory)
        .flatMap((file) => {
          const m = /^(\d+)_([^.]+)\.sql$/.exec(file)
          if (!m) return []
          const load = Effect.sync(() => readFileSync(join(directory, file), "utf8")).pipe(
            Effect.map((text) => Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe(text)))
          )
          return [[Number(m[1]), m[2]!, load] as const]
        })
        .sort(([a], [b]) => a - b),
    catch: (cause) => new Migrator.MigrationError({ reason: "failed", message: `cannot read ${directory}: ${cause}` })
  })

const MIGRATION_LOCK = 7_221_001 // any constant shared by every Mailroom process

/**
 * Applies pending migrations. The Migrator serializes runs with `LOCK TABLE`, but creates its
 * bookkeeping table before that lock; an advisory lock makes that first step safe too, so any
 * number of processes may start at once against one database.
 */
export const migrate = (directory = MIGRATIONS_DIR) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    yield* sql.withTransaction(
      sql`SELECT pg_advisory_xact_lock(${MIGRATION_LOCK})`.pipe(
        Effect.zipRight(sql`CREATE TABLE IF NOT EXISTS effect_sql_migrations (
          migration_id integer primary key,
          created_at timestamp with time zone not null default now(),
          name text not null)`)
      )
    )
    return yield* Migrator.make({})({ loader: sqlFileLoader(directory) })
  })

export class DatabaseInUse extends Data.TaggedError("DatabaseInUse")<{ readonly message: string }> {}

const isAlive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

/**
 * PGlite's files belong to one process; opening them from a second (a second server, or the admin
 * command while the server runs) would corrupt them, so a pid lock file refuses that clearly.
 */
const lockDataDir = (dataDir: string) =>
  Effect.acquireRelease(
    Effect.gen(function*() {
      const lock = join(dirname(dataDir), "pglite.lock")
      mkdirSync(dirname(lock), { recursive: true })
      if (existsSync(lock)) {
        const pid = Number(readFileSync(lock, "utf8").trim())
        if (pid !== process.pid && Number.isInteger(pid) && pid > 0 && isAlive(pid)) {
          return yield* new DatabaseInUse({
            message: `the embedded database in ${dataDir} is in use by process ${pid}; ` +
              `stop that process first, or run every process against a PostgreSQL server with DATABASE_URL`
          })
        }
      }
      writeFileSync(lock, String(process.pid))
      return lock
    }),
    (lock) => Effect.sync(() => rmSync(lock, { force: true }))
  )

export class DatabaseInitFailed extends Data.TaggedError("DatabaseInitFailed")<{ readonly message: string }> {}

/**
 * Creates the embedded database's files in a short-lived child process, whose memory goes with it
 * (WebAssembly memory is never returned). The child unpacks the tarball `npm install` made
 * (DatabaseTemplate.ts; peak ~380 MB) or, without one, runs PostgreSQL's initdb, for which PGlite
 * starts a second instance plus the initdb module (peak ~820 MB). Done in the service itself, a
 * first start peaked at ~900 MB and kept ~770 MB, where opening initialized files peaks at ~450 MB.
 */
const initializeDataDir = (dataDir: string) =>
  Effect.gen(function*() {
    if (existsSync(join(dataDir, "PG_VERSION"))) return
    mkdirSync(dataDir, { recursive: true })
    const pglite = createRequire(import.meta.url).resolve("@electric-sql/pglite")
    const template = databaseTemplatePath()
    const script = "const [lib, dir, template] = process.argv.slice(1);" +
      "const options = template ? { loadDataDir: new Blob([require('node:fs').readFileSync(template)]) } : {};" +
      "require(lib).PGlite.create(dir, options).then((db) => db.close())"
    const args = ["-e", script, pglite, dataDir, existsSync(template) ? template : ""]
    yield* Effect.async<void, DatabaseInitFailed>((resume) => {
      execFile(process.execPath, args, { timeout: 300_000 }, (error, _stdout, stderr) => {
        resume(
          error === null
            ? Effect.void
            : Effect.fail(new DatabaseInitFailed({ message: `cannot initialize the embedded database in ${dataDir}: ${stderr || error.message}` }))
        )
      })
    })
  })

/** Extensions the migrations create; PGlite loads them only when given at creation. */
export const PGLITE_EXTENSIONS = { pg_trgm }

/** An embedded database (in memory without a directory) with the extensions the schema needs. */
export const openPglite = (dataDir?: string) => PGlite.create(dataDir ?? "memory://", { extensions: PGLITE_EXTENSIONS })

/** Embedded PostgreSQL served on an ephemeral loopback port, closed with the scope. */
export const layerPglite = (dataDir: string | undefined) =>
  Layer.unwrapScoped(Effect.gen(function*() {
    if (dataDir !== undefined) yield* lockDataDir(dataDir)
    if (dataDir !== undefined) yield* initializeDataDir(dataDir)
    const db = yield* Effect.acquireRelease(
      Effect.promise(() => openPglite(dataDir)),
      (db) => Effect.promise(() => db.close()).pipe(Effect.ignore)
    )
    const server = yield* Effect.acquireRelease(
      Effect.promise(async () => {
        const s = new PGLiteSocketServer({ db, host: "127.0.0.1", port: 0, maxConnections: 1 })
        await s.start()
        return s
      }),
      (s) => Effect.promise(() => s.stop()).pipe(Effect.ignore)
    )
    const [host, port] = server.getServerConn().split(":")
    return countedPgLayer({ host: host!, port: Number(port), user: "postgres", password: "postgres", database: "postgres", max: 1 })
  }))

/** Fewest pooled connections a process gets, however many share `DATABASE_POOL_SIZE`. */
const MIN_POOL_PER_PROCESS = 2

/**
 * This process's share of `DATABASE_POOL_SIZE` when `processes` serve the service (Workers.ts): the
 * total divided evenly, at least MIN_POOL_PER_PROCESS. Each process also holds one LISTEN connection
 * outside its pool.
 */
export const poolSizeOf = (total: number, processes: number) =>
  Math.max(Math.min(total, MIN_POOL_PER_PROCESS), Math.floor(total / Math.max(1, processes)))

export const layerServer = (url: Redacted.Redacted<string>, maxConnections: number) =>
  countedPgLayer({ connectionString: Redacted.value(url), max: maxConnections, connectionTimeoutMillis: 5_000 })

/**
 * @effect/sql-pg over a pool whose clients count their round trips (SqlCounters.ts), checked with
 * one query at start as PgClient.layer does.
 */
const countedPgLayer = (config: pg.PoolConfig) =>
  PgClient.layerFromPool({
    applicationName: "mailroom",
    acquire: Effect.acquireRelease(
      Effect.tryPromise({
        try: async () => {
          const pool = new CountingPool({ ...config, application_name: "mailroom" })
          // Errors of idle clients surface on the next query; unhandled here they would end the process.
          pool.on("error", () => {})
          try {
            await pool.query("SELECT 1")
          } catch (cause) {
            await pool.end().catch(() => {})
            throw cause
          }
          return pool
        },
        catch: (cause) => new SqlError({ cause, message: "PgClient: Failed to connect" })
      }).pipe(
        Effect.timeoutFail({
          duration: "5 seconds",
          onTimeout: () => new SqlError({ cause: new Error("Connection timed out"), message: "PgClient: Connection timed out" })
        })
      ),
      (pool) => Effect.promise(() => pool.end()).pipe(Effect.interruptible, Effect.timeoutOption(1000))
    )
  })

/** True when the SqlClient is the embedded single-connection PGlite. */
export class DatabaseKind extends Effect.Tag("mailroom/DatabaseKind")<DatabaseKind, { readonly embedded: boolean }>() {}

/**
 * SqlClient for the configured database, with the migrations of `directory` applied (another
 * build's, for a benchmark that measures that build against a database it provisions itself).
 */
export const databaseLayer = (directory: string = MIGRATIONS_DIR) => Layer.unwrapEffect(Effect.gen(function*() {
  const config = yield* AppConfig
  const client = Option.match(config.databaseUrl, {
    onNone: () => layerPglite(join(config.dataDir, "pglite")),
    // A worker pools its share; a lone process (or the admin command) the whole of it.
    onSome: (url) => layerServer(url, poolSizeOf(config.databasePoolSize, workerRole()?.count ?? 1))
  })
  const kind = Layer.succeed(DatabaseKind, { embedded: Option.isNone(config.databaseUrl) })
  return Layer.effectDiscard(migrate(directory)).pipe(Layer.provideMerge(client), Layer.merge(kind))
}))

/** SqlClient for the configured database, with migrations applied. */
export const DatabaseLive = databaseLayer()
