/**
 * The database layer and start-up: concurrent migrations against one server, configuration
 * validation, the operator command, and the health probe when the database goes away.
 */
import { PGLiteSocketServer } from "@electric-sql/pglite-socket"
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Duration, Effect, Layer, Option, Redacted } from "effect"
import { appConfig } from "../src/platform/Config.js"
import { execFile } from "node:child_process"
import { existsSync, readdirSync } from "node:fs"
import { join } from "node:path"
import { MIGRATIONS_DIR, migrate, openPglite } from "../src/platform/Database.js"
import { DeliveryServicesLive, HttpLive, PlatformServicesLive, loggerLayer } from "../src/Server.js"
import { freePort, scratchDatabase, tempDir, testConfigLayer } from "./support/harness.js"
import { fetchReply } from "./support/http.js"

const ROOT = new URL("../", import.meta.url).pathname

const migrationCount = readdirSync(MIGRATIONS_DIR).filter((f) => /^\d+_.+\.sql$/.test(f)).length

const run = (args: ReadonlyArray<string>, env: Record<string, string>) =>
  Effect.async<{ code: number; stdout: string; stderr: string }>((resume) => {
    const child = execFile(process.execPath, ["--import", "tsx", ...args], { env: { ...process.env, ...env }, timeout: 60_000 }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof err.code === "number" ? err.code : 1
      resume(Effect.succeed({ code, stdout, stderr }))
    })
    return Effect.sync(() => child.kill())
  })

/** A client of its own on the test's database: the embedded one, or a fresh PostgreSQL database. */
const ownDatabase = Effect.gen(function*() {
  const url = yield* scratchDatabase
  return Option.match(url, {
    onNone: () => Option.none<string>(),
    onSome: (u) => Option.some(u)
  })
})

describe("database", () => {
  it.scoped("three processes migrating one fresh PostgreSQL database at once apply every migration exactly once", () =>
    Effect.gen(function*() {
      const url = yield* ownDatabase
      if (Option.isNone(url)) {
        // Embedded: one backend, so concurrency is serialized by the single connection.
        const db = yield* Effect.acquireRelease(Effect.promise(() => openPglite()), (d) => Effect.promise(() => d.close()))
        const server = yield* Effect.acquireRelease(
          Effect.promise(async () => {
            const s = new PGLiteSocketServer({ db, host: "127.0.0.1", port: 0, maxConnections: 1 })
            await s.start()
            return s
          }),
          (s) => Effect.promise(() => s.stop())
        )
        const [host, port] = server.getServerConn().split(":")
        const client = PgClient.layer({ host: host!, port: Number(port), username: "postgres", database: "postgres", maxConnections: 1 })
        const results = yield* Effect.all([migrate(), migrate(), migrate()], { concurrency: "unbounded" }).pipe(
          Effect.provide(client)
        )
        expect(results.map((r) => r.length).sort()).toEqual([0, 0, migrationCount])
        return
      }
      const clients = [1, 2, 3].map(() => PgClient.layer({ url: Redacted.make(url.value), maxConnections: 2 }))
      const results = yield* Effect.all(clients.map((c) => migrate().pipe(Effect.provide(c))), { concurrency: "unbounded" })
      expect(results.map((r) => r.length).sort()).toEqual([0, 0, migrationCount])
      const rows = yield* Effect.provide(
        Effect.flatMap(SqlClient.SqlClient, (sql) => sql<{ n: number }>`SELECT count(*)::int AS n FROM effect_sql_migrations`),
        clients[0]!
      )
      expect(rows[0]!.n).toBe(migrationCount)
    }))

  it.effect("a bad configuration value stops start-up with a message naming the variable", () =>
    Effect.gen(function*() {
      const badPort = yield* run(["src/main.ts"], { PORT: "http", LOG_LEVEL: "error" })
      expect(badPort.code).toBe(78)
      expect(badPort.stderr).toContain("PORT")
      const load = (env: Record<string, string>) =>
        Effect.either(Effect.withConfigProvider(appConfig, ConfigProvider.fromMap(new Map(Object.entries(env)))))
      const cases: Array<[Record<string, string>, Array<string>]> = [
        [{ DELIVERY_RETRY_DELAYS: "5s,soon" }, ["DELIVERY_RETRY_DELAYS", "soon"]],
        [{ DATABASE_URL: "mysql://x" }, ["DATABASE_URL", "postgres:"]],
        [{ WEBHOOK_ALLOW_PRIVATE_URLS: "maybe" }, ["WEBHOOK_ALLOW_PRIVATE_URLS"]],
        [{ SMTP_PORT: "70000" }, ["SMTP_PORT", "port"]],
        [{ PUBLIC_BASE_URL: "ftp://x" }, ["PUBLIC_BASE_URL"]],
        [{ LOG_LEVEL: "loud" }, ["LOG_LEVEL"]],
        [{ WORKERS: "0" }, ["WORKERS", "from 1 to 1024"]],
        [{ FUNCTION_PROCESS_MAX_INVOCATIONS: "0" }, ["FUNCTION_PROCESS_MAX_INVOCATIONS", "from 1 to 1000000"]],
        [{ FUNCTION_PROCESS_MAX_AGE: "soon" }, ["FUNCTION_PROCESS_MAX_AGE"]]
      ]
      for (const [env, words] of cases) {
        const result = yield* load(env)
        expect(result._tag).toBe("Left")
        const message = String(result._tag === "Left" ? result.left : "")
        for (const w of words) expect(message).toContain(w)
      }
      const ok = yield* load({ DELIVERY_RETRY_DELAYS: "100ms, 2s,1m", PORT: "8080" })
      expect(ok._tag).toBe("Right")
      if (ok._tag === "Right") {
        expect(ok.right.deliveryRetryDelays.map(Duration.toMillis)).toEqual([100, 2000, 60000])
        expect(ok.right.publicBaseUrl).toBe("http://localhost:8080")
      }
    }), { timeout: 120_000 })

  it.scoped("the operator command creates an organization, prints its key and sets plans", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const url = yield* ownDatabase
      const env: Record<string, string> = { DATA_DIR: dir, LOG_LEVEL: "error", ...(Option.isSome(url) ? { DATABASE_URL: url.value } : {}) }
      const created = yield* run(["src/admin.ts", "create-org", "Acme Ops", "--plan", "developer"], env)
      expect(created.code).toBe(0)
      const orgId = /org_id=([0-9a-f-]{36})/.exec(created.stdout)?.[1]
      expect(created.stdout).toMatch(/api_key=mr_live_[A-Za-z0-9]{40}/)
      expect(orgId).toBeDefined()
      const upgraded = yield* run(["src/admin.ts", "set-plan", orgId!, "pro"], env)
      expect(upgraded.code).toBe(0)
      expect(upgraded.stdout).toContain("plan=pro")
      const unknown = yield* run(["src/admin.ts", "set-plan", "00000000-0000-4000-8000-000000000000", "pro"], env)
      expect(unknown.code).not.toBe(0)
      expect(unknown.stderr).toContain("no organization")
      // It says which database it looked in.
      expect(unknown.stderr).toContain(Option.isSome(url) ? "DATABASE_URL" : `in the embedded database in ${dir} (DATA_DIR)`)
      const badPlan = yield* run(["src/admin.ts", "set-plan", orgId!, "platinum"], env)
      expect(badPlan.code).not.toBe(0)
    }), { timeout: 180_000 })

  it.scoped("the operator command without DATA_DIR or DATABASE_URL uses no empty database: it says where it looked", () =>
    Effect.gen(function*() {
      const cwd = yield* tempDir
      const { DATA_DIR: _d, DATABASE_URL: _u, ...rest } = process.env
      const result = yield* Effect.async<{ code: number; stderr: string }>((resume) => {
        const child = execFile(
          process.execPath,
          ["--import", join(ROOT, "node_modules/tsx/dist/esm/index.mjs"), join(ROOT, "src/admin.ts"), "set-plan", "00000000-0000-4000-8000-000000000000", "pro"],
          { cwd, env: { ...rest, LOG_LEVEL: "error" }, timeout: 60_000 },
          (err, _stdout, stderr) => resume(Effect.succeed({ code: err === null ? 0 : typeof err.code === "number" ? err.code : 1, stderr }))
        )
        return Effect.sync(() => child.kill())
      })
      expect(result.code).toBe(1)
      expect(result.stderr).toContain(`no service data found: DATABASE_URL and DATA_DIR are unset, and ${join(cwd, ".data")}`)
      expect(result.stderr).toContain("DATA_DIR=<the directory the service was started with>")
      // Nothing was created where it looked.
      expect(existsSync(join(cwd, ".data"))).toBe(false)
    }), { timeout: 120_000 })

  it.scoped("health answers 503 service_unavailable when the database is gone", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const port = yield* Effect.promise(freePort)
      const db = yield* Effect.acquireRelease(Effect.promise(() => openPglite()), (d) => Effect.promise(() => d.close()).pipe(Effect.ignore))
      const socket = yield* Effect.promise(async () => {
        const s = new PGLiteSocketServer({ db, host: "127.0.0.1", port: 0, maxConnections: 1 })
        await s.start()
        return s
      })
      const [host, dbPort] = socket.getServerConn().split(":")
      const client = yield* Layer.build(
        PgClient.layer({ host: host!, port: Number(dbPort), username: "postgres", database: "postgres", maxConnections: 1 })
      )
      const config = testConfigLayer({ DATA_DIR: dir, LOG_LEVEL: "none", PORT: String(port) })
      yield* Effect.provide(migrate(), client)
      yield* Layer.build(
        HttpLive.pipe(
          Layer.provide(DeliveryServicesLive),
          Layer.provide(PlatformServicesLive),
          Layer.provide(loggerLayer),
          Layer.provide(Layer.succeedContext(client)),
          Layer.provide(config)
        )
      )
      const baseUrl = `http://127.0.0.1:${port}`
      // `/v1/health` exactly is answered at the Node server (platform/HealthLane.ts); with a query
      // string the operation's handler answers. Both must say the same.
      const both = Effect.promise(() =>
        Promise.all([fetchReply(`${baseUrl}/v1/health`, "GET"), fetchReply(`${baseUrl}/v1/health?via=handler`, "GET")])
      )
      const [ok, okHandler] = yield* both
      expect(ok.status).toBe(200)
      expect(okHandler.status).toBe(200)
      expect(ok.body).toEqual(okHandler.body)
      yield* Effect.promise(() => socket.stop())
      const [down, downHandler] = yield* both
      expect(down.status).toBe(503)
      expect(down.body).toEqual({
        success: false,
        error: { code: "service_unavailable", message: expect.any(String) }
      })
      expect(downHandler.status).toBe(503)
      expect(downHandler.body).toEqual(down.body)
      expect(down.headers.get("x-request-id")).toMatch(/^req_/)
    }), { timeout: 60_000 })
})

