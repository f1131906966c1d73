/**
 * The delivery ledger under faults. 10,000 queued deliveries (2,000 with FAULTS_SCALE=ci) drained to
 * a loopback receiver while one of two worker processes is killed with SIGKILL (and restarted) and
 * the database goes away for 5 s: the PostgreSQL server itself is stopped (immediate mode, i.e. a
 * crash with recovery at start) and started again when the test may control the local cluster (root,
 * Debian's pg_ctlcluster, a loopback DATABASE_URL: as in CI); otherwise its connections are cut
 * through a TCP proxy while it keeps running. Afterwards:
 * every delivery is delivered, failed or dead-lettered (nothing pending, nothing missing); every
 * request carries its delivery's one event id; a request the ledger does not record (a duplicate)
 * comes only from an attempt in flight at the kill, sent again within lease + 10 s of it (never from
 * the database cut: an attempt made then is recorded once the database returns); deliveries resume
 * within 30 s of the database returning, without restarting anything, and no process died of the cut.
 * With FAULTS_WORKERS=2 each of the two services is a primary with two workers, and at the kill one
 * service's primary (its workers go with it) and a worker of the other (its primary starts it again)
 * are killed at the same moment.
 *
 * Embedded PGlite belongs to one process, so there the variant is one in-process service whose
 * database (PGlite on a socket) is cut and restored the same way; no kill.
 */
import { PGlite } from "@electric-sql/pglite"
import { PGLiteSocketServer } from "@electric-sql/pglite-socket"
import { PgClient } from "@effect/sql-pg"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Layer, Redacted, Scope } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import pg from "pg"
import { DispatcherLive } from "../../src/deliveries/Dispatcher.js"
import { leaseMillis } from "../../src/deliveries/Queue.js"
import { Provisioning } from "../../src/identity/Provisioning.js"
import { parseDuration } from "../../src/platform/Config.js"
import { DatabaseKind, migrate, PGLITE_EXTENSIONS } from "../../src/platform/Database.js"
import { DeliveryServicesLive, HttpLive, loggerLayer, PlatformServicesLive } from "../../src/Server.js"
import { freePort, testConfigLayer } from "../support/harness.js"
import { fetchReply } from "../support/http.js"
import {
  baseEnv,
  createOrg,
  faultWorkers,
  kill9,
  kill9Worker,
  localCluster,
  type ReceivedHit,
  scaled,
  scratchDb,
  type ServiceProcess,
  sleep,
  startProxy,
  startReceiver,
  startService,
  workerPids,
  workersBack
} from "./support.js"

const TIMEOUT = "2s"
const LEASE_MS = leaseMillis(parseDuration(TIMEOUT).pipe((e) => (e._tag === "Right" ? e.right : (() => { throw new Error("bad") })())))
const OUTAGE_MS = 5000

type Query = <R>(text: string, params?: Array<unknown>) => Promise<Array<R>>

/** Queues `n` deliveries for the organization's endpoint in one statement. */
const enqueue = (query: Query, orgId: string, endpointId: string, n: number) =>
  query(
    `INSERT INTO deliveries (org_id, endpoint_id, event_id, event_type, payload, email_subject)
     SELECT $1, $2, 'evt_ledger_' || i, 'email.received',
            json_build_object('id', 'evt_ledger_' || i, 'event', 'email.received', 'seq', i)::text, 'ledger ' || i
     FROM generate_series(1, $3::int) AS i`,
    [orgId, endpointId, n]
  )

const waitDrained = async (query: Query, ms: number) => {
  const until = Date.now() + ms
  for (;;) {
    const rows = await query<{ n: number }>(`SELECT count(*)::int AS n FROM deliveries WHERE status = 'pending'`).catch(() => [{ n: -1 }])
    if (rows[0]!.n === 0) return
    if (Date.now() > until) throw new Error(`still ${rows[0]!.n} pending`)
    await sleep(250)
  }
}

const waitHits = async (hits: Array<ReceivedHit>, n: number, ms = 120_000) => {
  const until = Date.now() + ms
  while (hits.length < n) {
    if (Date.now() > until) throw new Error(`only ${hits.length} hits, wanted ${n}`)
    await sleep(20)
  }
}

/** Ledger checks common to both variants; returns figures for the log. */
const checkLedger = async (
  query: Query,
  hits: Array<ReceivedHit>,
  n: number,
  faults: { killAt: number | null; downAt: number; upAt: number }
) => {
  const statuses = await query<{ status: string; code: string | null; n: number }>(
    `SELECT status, last_error_code AS code, count(*)::int AS n FROM deliveries GROUP BY 1, 2`
  )
  const count = (s: string) => statuses.filter((r) => r.status === s).reduce((a, r) => a + r.n, 0)
  const delivered = count("delivered") + count("header_confirmed")
  const deadLettered = statuses.filter((r) => r.code === "queue_dead_letter").reduce((a, r) => a + r.n, 0)
  const failed = count("failed") - deadLettered
  expect(count("pending")).toBe(0)
  expect(delivered + failed + deadLettered).toBe(n)
  // Every delivered row reached the receiver; the receiver saw nothing that is not in the ledger.
  const ids = await query<{ id: string; event_id: string; status: string; attempts: number }>(
    `SELECT id, event_id, status, attempt_count AS attempts FROM deliveries`
  )
  const byId = new Map(ids.map((r) => [r.id, r]))
  const hitsById = new Map<string, Array<ReceivedHit>>()
  for (const h of hits) hitsById.set(h.deliveryId, [...(hitsById.get(h.deliveryId) ?? []), h])
  for (const r of ids) if (r.status === "delivered") expect(hitsById.has(r.id), r.id).toBe(true)
  for (const id of hitsById.keys()) expect(byId.has(id), id).toBe(true)
  // Every request carries the delivery's one event id.
  for (const [id, hs] of hitsById) {
    expect(new Set(hs.map((h) => h.eventId))).toEqual(new Set([byId.get(id)!.event_id]))
    expect(hs.every((h) => h.body.id === byId.get(id)!.event_id)).toBe(true)
  }
  // A request the ledger does not record (more hits than recorded attempts) is a duplicate: allowed
  // only for a delivery in flight in the killed process, sent again within lease + 10 s of the kill.
  const duplicates = [...hitsById.entries()].filter(([id, hs]) => hs.length > byId.get(id)!.attempts)
  for (const [id, hs] of duplicates) {
    expect(hs.length - byId.get(id)!.attempts, `unrecorded requests for ${id}`).toBe(1)
    const first = hs[0]!.at
    // Requests the killed process had already written are read by the receiver a moment later.
    const inFlightAtKill = faults.killAt !== null && first >= faults.killAt - 5000 && first <= faults.killAt + 1000
    expect(inFlightAtKill, `duplicate ${id}: first request at kill${first - (faults.killAt ?? 0)} ms / cut${first - faults.downAt} ms`).toBe(true)
    expect(hs[1]!.at - faults.killAt!).toBeLessThanOrEqual(LEASE_MS + 10_000)
  }
  const retries = [...hitsById.entries()].filter(([id, hs]) => hs.length > 1 && hs.length === byId.get(id)!.attempts).length
  const retriedAfterKill = faults.killAt === null
    ? []
    : duplicates.filter(([, hs]) => hs[0]!.at <= faults.killAt! + 1000).map(([, hs]) => hs[1]!.at - faults.killAt!)
  // Recovery: the first delivery after the database returned, and the rate either side of the outage.
  const firstAfter = hits.find((h) => h.at >= faults.upAt)
  expect(firstAfter, "deliveries resumed after the outage").toBeDefined()
  const recoverMs = firstAfter!.at - faults.upAt
  expect(recoverMs).toBeLessThanOrEqual(30_000)
  const rate = (from: number, to: number) => hits.filter((h) => h.at >= from && h.at < to).length / ((to - from) / 1000)
  return {
    delivered,
    failed,
    deadLettered,
    duplicates: duplicates.length,
    recordedRetries: retries,
    maxRetryAfterKillMs: retriedAfterKill.length ? Math.max(...retriedAfterKill) : null,
    recoverMs,
    rateBefore: rate(faults.downAt - 3000, faults.downAt).toFixed(0),
    rateAfter: rate(firstAfter!.at, firstAfter!.at + 3000).toFixed(0)
  }
}

const realPostgres = (process.env.DATABASE_URL ?? "") !== ""
const WORKERS = faultWorkers()

describe("delivery ledger", () => {
  if (realPostgres) {
    const cluster = localCluster(process.env.DATABASE_URL!)
    const outage = cluster !== undefined ? "PostgreSQL server restart" : "database cut"
    const shape = WORKERS > 1
      ? `two services of ${WORKERS} workers, kill -9 of one's primary and of a worker of the other`
      : "two worker processes, kill -9 of one"
    it(`${scaled(10_000, 2000)} deliveries, ${shape}, a ${outage} (5 s down): every delivery accounted for`, async () => {
      const n = scaled(10_000, 2000)
      const db = await scratchDb()
      const dbUrl = new URL(db.url!)
      const proxy = await startProxy(dbUrl.hostname, Number(dbUrl.port || 5432))
      const viaProxy = new URL(db.url!)
      viaProxy.host = `127.0.0.1:${proxy.port}`
      const serviceUrl = cluster !== undefined ? db.url! : viaProxy.toString()
      const dirs = [mkdtempSync(join(tmpdir(), "mailroom-ledger-a-")), mkdtempSync(join(tmpdir(), "mailroom-ledger-b-"))]
      const receiver = await startReceiver(5)
      // A pool of one reconnects after the server restart (a lost connection is replaced).
      const direct = new pg.Pool({ connectionString: db.url, max: 1 })
      direct.on("error", () => {})
      const query: Query = async (text, params = []) => (await direct.query(text, params)).rows
      let serverDown = false
      const procs: Array<ServiceProcess | undefined> = [undefined, undefined]
      try {
        const env = (i: number) =>
          baseEnv(dirs[i]!, serviceUrl, { DELIVERY_TIMEOUT: TIMEOUT, DELIVERY_RETRY_DELAYS: "1s,2s,5s" })
        const org = await createOrg(baseEnv(dirs[0]!, db.url), "Ledger")
        procs[0] = await startService(env(0))
        procs[1] = await startService(env(1))
        const endpoint = await fetchReply(`${procs[0].baseUrl}/v1/endpoints`, "POST", {
          token: org.apiKey,
          body: { url: receiver.url("/ledger") }
        })
        expect(endpoint.status).toBe(201)
        const started = Date.now()
        await enqueue(query, org.orgId, endpoint.body.data.id, n)
        await query(`SELECT pg_notify('mailroom_deliveries', '')`)

        await waitHits(receiver.hits, Math.floor(n * (0.1 + Math.random() * 0.2)))
        const victim = Math.random() < 0.5 ? 0 : 1
        const killAt = Date.now()
        const survivor = procs[1 - victim]!
        await Promise.all([kill9(procs[victim]!), WORKERS > 1 ? kill9Worker(survivor, Math.floor(Math.random() * WORKERS)) : undefined])
        // Restarted at once, as a supervisor would; a start that meets the database cut exits and is retried.
        const restart = (async () => {
          for (let attempt = 1; ; attempt++) {
            try {
              procs[victim] = await startService(env(victim))
              return attempt
            } catch (e) {
              if (attempt >= 5) throw e
              await sleep(1000)
            }
          }
        })()
        restart.catch(() => {})
        await waitHits(receiver.hits, Math.floor(n * 0.5))
        const downAt = Date.now()
        if (cluster !== undefined) {
          serverDown = true
          cluster.stop()
          await sleep(Math.max(0, OUTAGE_MS - (Date.now() - downAt)))
          cluster.start()
          serverDown = false
        } else {
          proxy.down()
          await sleep(OUTAGE_MS)
          proxy.up()
        }
        const upAt = Date.now()
        const restartAttempts = await restart
        await waitDrained(query, 180_000)
        const seconds = (Date.now() - started) / 1000
        // The cut is survived in place: neither process exited (the victim's restart included).
        for (const p of procs) expect(p?.child.exitCode, p?.stderr()).toBeNull()
        // The survivor's primary started its killed worker again.
        if (WORKERS > 1) expect(await workersBack(survivor, WORKERS, 5000), `${survivor.stderr()} ${workerPids(survivor.pid)}`).toBe(true)
        const figures = await checkLedger(query, receiver.hits, n, { killAt, downAt, upAt })
        console.log(`ledger (PostgreSQL, ${shape}, ${outage}): ${n} deliveries in ${seconds.toFixed(1)} s, ${receiver.hits.length} hits; ` +
          `lease ${LEASE_MS} ms; killed process restarted after ${restartAttempts} start(s); ${JSON.stringify(figures)}`)
      } finally {
        await Promise.all(procs.map((p) => (p === undefined ? undefined : kill9(p))))
        if (serverDown) cluster?.start()
        await direct.end()
        proxy.close()
        await receiver.close()
        await db.drop()
        for (const d of dirs) rmSync(d, { recursive: true, force: true })
      }
    })
  } else {
    it(`single-process variant on PGlite: ${scaled(3000, 600)} deliveries, a 5 s database cut and restore, every delivery accounted for`, async () => {
      const n = scaled(3000, 600)
      const scope = await Effect.runPromise(Scope.make())
      const receiver = await startReceiver(5)
      const dir = mkdtempSync(join(tmpdir(), "mailroom-ledger-"))
      try {
        // The service's own extensions (pg_trgm for search), as the embedded database has them.
        const db = await PGlite.create({ extensions: PGLITE_EXTENSIONS })
        await Effect.runPromise(Scope.addFinalizer(scope, Effect.promise(() => db.close()).pipe(Effect.ignore)))
        const socket = new PGLiteSocketServer({ db, host: "127.0.0.1", port: 0, maxConnections: 1 })
        await socket.start()
        await Effect.runPromise(Scope.addFinalizer(scope, Effect.promise(() => socket.stop()).pipe(Effect.ignore)))
        const [host, port] = socket.getServerConn().split(":")
        const proxy = await startProxy(host!, Number(port))
        await Effect.runPromise(Scope.addFinalizer(scope, Effect.sync(() => proxy.close())))
        const httpPort = await freePort()
        const smtpPort = await freePort()
        const config = testConfigLayer({
          DATA_DIR: dir,
          LOG_LEVEL: "none",
          PORT: String(httpPort),
          SMTP_PORT: String(smtpPort),
          PUBLIC_BASE_URL: `http://127.0.0.1:${httpPort}`,
          DNS_SERVER: "127.0.0.1:9",
          WEBHOOK_ALLOW_PRIVATE_URLS: "true",
          DELIVERY_TIMEOUT: TIMEOUT,
          DELIVERY_RETRY_DELAYS: "1s,2s,5s"
        })
        const client = PgClient.layer({
          host: "127.0.0.1",
          port: proxy.port,
          database: "postgres",
          username: "postgres",
          password: Redacted.make(""),
          maxConnections: 1,
          connectTimeout: "2 seconds"
        })
        const ctx = Layer.merge(client, Layer.succeed(DatabaseKind, { embedded: true }))
        const service = Layer.mergeAll(HttpLive, DispatcherLive({ concurrency: 32, pollMs: 50 }), Provisioning.Default).pipe(
          Layer.provideMerge(DeliveryServicesLive),
          Layer.provideMerge(PlatformServicesLive),
          Layer.provide(loggerLayer),
          Layer.provideMerge(Layer.effectDiscard(migrate()).pipe(Layer.provideMerge(ctx))),
          Layer.provide(config)
        )
        const context = await Effect.runPromise(Layer.buildWithScope(service, scope))
        const run = <A, E>(e: Effect.Effect<A, E, Provisioning>) => Effect.runPromise(Effect.provide(e, context))
        const org = await run(Effect.gen(function*() {
          const p = yield* Provisioning
          const o = yield* p.createOrganization({ name: "Ledger", plan: "developer" })
          const k = yield* p.issueApiKey(o.id)
          return { orgId: o.id, apiKey: k.apiKey }
        }))
        const baseUrl = `http://127.0.0.1:${httpPort}`
        const endpoint = await fetchReply(`${baseUrl}/v1/endpoints`, "POST", { token: org.apiKey, body: { url: receiver.url("/ledger") } })
        expect(endpoint.status).toBe(201)
        // The test reads and writes through PGlite directly (the proxy is the service's only path).
        const query: Query = async (text, params = []) => (await db.query(text, params)).rows as Array<never>
        const started = Date.now()
        await enqueue(query, org.orgId, endpoint.body.data.id, n)
        await waitHits(receiver.hits, Math.floor(n * 0.3))
        const downAt = Date.now()
        proxy.down()
        await sleep(OUTAGE_MS)
        proxy.up()
        const upAt = Date.now()
        await waitDrained(query, 180_000)
        const seconds = (Date.now() - started) / 1000
        const figures = await checkLedger(query, receiver.hits, n, { killAt: null, downAt, upAt })
        console.log(`ledger (PGlite, 1 process): ${n} deliveries in ${seconds.toFixed(1)} s, ${receiver.hits.length} hits; ${JSON.stringify(figures)}`)
      } finally {
        await Effect.runPromise(Scope.close(scope, Exit.void))
        await receiver.close()
        rmSync(dir, { recursive: true, force: true })
      }
    })
  }
})
