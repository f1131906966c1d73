/**
 * Database outage: while PostgreSQL is unreachable the SMTP listener answers temporary 4xx (never
 * 250), the API answers 503/500 envelopes, and both recover by themselves when it returns. The
 * service talks to its database through a TCP proxy the test cuts and restores.
 */
import { PGLiteSocketServer } from "@electric-sql/pglite-socket"
import { PgClient } from "@effect/sql-pg"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Option, Redacted } from "effect"
import nodemailer from "nodemailer"
import { Provisioning } from "../src/identity/Provisioning.js"
import { DispatcherLive } from "../src/deliveries/Dispatcher.js"
import { SmtpServerLive } from "../src/inbound/SmtpServer.js"
import { DatabaseKind, migrate, openPglite } from "../src/platform/Database.js"
import { DeliveryServicesLive, HttpLive, loggerLayer, PlatformServicesLive } from "../src/Server.js"
import { freePort, scratchDatabase, tempDir, testConfigLayer } from "./support/harness.js"
import { fetchReply } from "./support/http.js"
import { startTcpProxy } from "./support/tcpProxy.js"

/** The database to cut: embedded PGlite on a socket, or a scratch database on the PostgreSQL server. */
const upstream = Effect.gen(function*() {
  const url = yield* scratchDatabase
  if (Option.isSome(url)) {
    const u = new URL(url.value)
    return { host: u.hostname, port: Number(u.port || 5432), database: u.pathname.slice(1), username: u.username || "postgres" }
  }
  const db = yield* Effect.acquireRelease(Effect.promise(() => openPglite()), (d) => Effect.promise(() => d.close()).pipe(Effect.ignore))
  const socket = yield* Effect.acquireRelease(
    Effect.promise(async () => {
      const s = new PGLiteSocketServer({ db, host: "127.0.0.1", port: 0, maxConnections: 1 })
      await s.start()
      return s
    }),
    (s) => Effect.promise(() => s.stop()).pipe(Effect.ignore)
  )
  const [host, port] = socket.getServerConn().split(":")
  return { host: host!, port: Number(port), database: "postgres", username: "postgres" }
})

const smtpSend = (port: number, to: string, subject: string) =>
  Effect.promise(async () => {
    const t = nodemailer.createTransport({ host: "127.0.0.1", port, secure: false, ignoreTLS: true, connectionTimeout: 10_000 })
    try {
      const info = await t.sendMail({ from: "a@example.com", to, subject, text: "x" })
      return { ok: true, code: 250, response: info.response }
    } catch (e) {
      const err = e as { responseCode?: number; response?: string }
      return { ok: false, code: err.responseCode ?? 0, response: err.response ?? String(e) }
    } finally {
      t.close()
    }
  })

describe("database outage", () => {
  it.scoped("SMTP answers 4xx while the database is unreachable and accepts again when it returns", () =>
    Effect.gen(function*() {
      const target = yield* upstream
      const proxy = yield* startTcpProxy(target.host, target.port)
      const dir = yield* tempDir
      const port = yield* Effect.promise(freePort)
      const smtpPort = yield* Effect.promise(freePort)
      const embedded = target.database === "postgres" && target.username === "postgres" && !process.env.DATABASE_URL
      const client = yield* Layer.build(PgClient.layer({
        host: "127.0.0.1",
        port: proxy.port,
        database: target.database,
        username: target.username,
        password: Redacted.make(""),
        maxConnections: embedded ? 1 : 4,
        connectTimeout: "2 seconds"
      }))
      const config = testConfigLayer({
        DATA_DIR: dir,
        LOG_LEVEL: "none",
        PORT: String(port),
        SMTP_PORT: String(smtpPort),
        PUBLIC_BASE_URL: `http://127.0.0.1:${port}`,
        DNS_SERVER: "127.0.0.1:9"
      })
      yield* Effect.provide(migrate(), client)
      const ctx = Layer.merge(Layer.succeedContext(client), Layer.succeed(DatabaseKind, { embedded }))
      const org = yield* Effect.gen(function*() {
        const p = yield* Provisioning
        const o = yield* p.createOrganization({ name: "Outage", plan: "developer" })
        const k = yield* p.issueApiKey(o.id)
        return { address: o.managedInboxAddress, apiKey: k.apiKey }
      }).pipe(Effect.provide(Provisioning.Default.pipe(Layer.provide(ctx), Layer.provide(config))))
      yield* Layer.build(
        Layer.mergeAll(HttpLive, SmtpServerLive, DispatcherLive({ concurrency: 4, pollMs: 50 })).pipe(
          Layer.provide(DeliveryServicesLive),
          Layer.provide(PlatformServicesLive),
          Layer.provide(loggerLayer),
          Layer.provide(ctx),
          Layer.provide(config)
        )
      )
      const before = yield* smtpSend(smtpPort, org.address, "before")
      expect(before.code).toBe(250)

      proxy.down()
      for (const subject of ["during 1", "during 2"]) {
        const during = yield* smtpSend(smtpPort, org.address, subject)
        expect(during.ok).toBe(false)
        expect(during.code).toBeGreaterThanOrEqual(400)
        expect(during.code).toBeLessThan(500)
      }
      const health = yield* Effect.promise(() => fetchReply(`http://127.0.0.1:${port}/v1/health`, "GET"))
      expect(health.status).toBe(503)
      expect(health.body.error.code).toBe("service_unavailable")

      proxy.up()
      // The pool reconnects on its own; the sender's retry now succeeds.
      let after = { ok: false, code: 0, response: "" }
      for (let i = 0; i < 40 && !after.ok; i++) {
        after = yield* smtpSend(smtpPort, org.address, "after")
        if (!after.ok) yield* Effect.sleep("250 millis")
      }
      expect(after.code).toBe(250)
      const list = yield* Effect.promise(() =>
        fetchReply(`http://127.0.0.1:${port}/v1/emails`, "GET", { token: org.apiKey })
      )
      expect(list.body.data.map((e: { subject: string }) => e.subject).sort()).toEqual(["after", "before"])
    }), { timeout: 120_000 })
})
