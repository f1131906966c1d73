/**
 * Idempotency and the organization rate limit across service PROCESSES (test/concurrency.test.ts
 * covers the same in one process with a movable clock, including the window sliding).
 *
 * On PostgreSQL two service processes share the database: 100 identical POSTs with one
 * Idempotency-Key, split between them, create one endpoint; then 100 organizations each send 130
 * requests alternating between the processes and exactly 120 of each are accepted (the other 10 are
 * 429 `rate_limited` with Retry-After), with no bleed between organizations. Embedded PGlite belongs
 * to one process, so there the same checks run against one process.
 *
 * The window is real time (60 s): organizations are driven in groups of 5, interleaved within the
 * group, so each organization's 130 requests fall well inside one window.
 */
import { describe, expect, it } from "@effect/vitest"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { API_RATE_LIMIT } from "../../src/platform/RateLimits.js"
import { fetchReply, type Reply } from "../support/http.js"
import { baseEnv, openDb, provisionOrgs, scratchDb, type ServiceProcess, startService } from "./support.js"

const ORGS = 100
const PER_ORG = API_RATE_LIMIT.limit + 10
const GROUP = 5

/** Runs `jobs` with at most `limit` in flight. */
const pool = async <A, B>(items: ReadonlyArray<A>, limit: number, f: (a: A) => Promise<B>) => {
  const out: Array<B> = new Array(items.length)
  let next = 0
  await Promise.all(Array.from({ length: limit }, async () => {
    while (next < items.length) {
      const i = next++
      out[i] = await f(items[i]!)
    }
  }))
  return out
}

describe("rate limit and idempotency across processes", () => {
  it(`one Idempotency-Key raced from both processes → one side effect; ${ORGS} organizations × ${PER_ORG} requests → exactly ${API_RATE_LIMIT.limit} accepted each`, async () => {
    const db = await scratchDb()
    const dir = mkdtempSync(join(tmpdir(), "mailroom-ratelimit-"))
    const procs: Array<ServiceProcess> = []
    try {
      const env = baseEnv(dir, db.url)
      // Provisioned before the services start (PGlite's files belong to one process at a time).
      const orgs = await provisionOrgs(env, ORGS + 1)
      const [racer, ...limited] = orgs
      procs.push(await startService(env))
      if (db.url !== undefined) procs.push(await startService(baseEnv(mkdtempSync(join(tmpdir(), "mailroom-ratelimit-b-")), db.url)))
      const via = (i: number) => procs[i % procs.length]!.baseUrl

      // 1. One key, 100 concurrent identical POSTs over both processes: one endpoint, one result.
      const headers = { "idempotency-key": `race-${Date.now()}` }
      const body = { url: "http://127.0.0.1:9/race" }
      const replies = await Promise.all(Array.from({ length: 100 }, (_, i) =>
        fetchReply(`${via(i)}/v1/endpoints`, "POST", { token: racer!.apiKey, body, headers })))
      const created = replies.filter((r) => r.status === 201)
      const inProgress = replies.filter((r) => r.status === 409)
      // One organization holds at most a quarter of a process's requests at once: past that, 429 at once.
      const overShare = replies.filter((r) => r.status === 429)
      for (const r of overShare) expect(r.body.error.code).toBe("rate_limited")
      expect(created.length + inProgress.length + overShare.length,
        JSON.stringify(replies.filter((r) => r.status !== 409 && r.status !== 429).map((r) => [r.status, r.text]))).toBe(100)
      expect(created.length).toBeGreaterThanOrEqual(1)
      expect(new Set(created.map((r) => r.body.data.id)).size).toBe(1)
      expect(created.filter((r) => r.headers.get("idempotent-replayed") !== "true").length).toBe(1)
      for (const r of inProgress) expect(r.body.error.code).toBe("conflict")
      if (db.url !== undefined) {
        const store = await openDb(dir, db.url)
        const rows = await store.query<{ n: number }>(`SELECT count(*)::int AS n FROM endpoints WHERE org_id = $1`, [racer!.id])
        expect(rows[0]!.n).toBe(1)
        await store.close()
      }
      const list = await fetchReply(`${via(1)}/v1/endpoints`, "GET", { token: racer!.apiKey })
      expect(list.body.data.filter((e: { url: string }) => e.url === body.url).length).toBe(1)

      // 2. Exactly 120 per organization per window, across processes, no bleed.
      const started = Date.now()
      const results = new Map<number, Array<Reply>>()
      for (let g = 0; g < limited.length; g += GROUP) {
        const group = limited.slice(g, g + GROUP).map((org, k) => ({ org, o: g + k }))
        const jobs = Array.from({ length: PER_ORG }, (_, i) => group.map((m) => ({ ...m, i }))).flat()
        const t0 = Date.now()
        const replies = await pool(jobs, 32, (j) => fetchReply(`${via(j.i)}/v1/account`, "GET", { token: j.org.apiKey }))
        // Every organization's requests must have fallen inside one window for "exactly" to hold.
        expect(Date.now() - t0).toBeLessThan(API_RATE_LIMIT.windowSeconds * 1000)
        jobs.forEach((j, k) => results.set(j.o, [...(results.get(j.o) ?? []), replies[k]!]))
      }
      const seconds = (Date.now() - started) / 1000
      for (const [o, replies] of results) {
        const ok = replies.filter((r) => r.status === 200)
        const refused = replies.filter((r) => r.status !== 200)
        expect(ok.length, `organization ${o}`).toBe(API_RATE_LIMIT.limit)
        expect(refused.length).toBe(PER_ORG - API_RATE_LIMIT.limit)
        for (const r of refused) {
          expect(r.status).toBe(429)
          expect(r.body.error.code).toBe("rate_limited")
          const retryAfter = Number(r.headers.get("retry-after"))
          expect(retryAfter).toBeGreaterThan(0)
          expect(retryAfter).toBeLessThanOrEqual(API_RATE_LIMIT.windowSeconds)
        }
      }
      expect(results.size).toBe(ORGS)
      console.log(`rate limit across ${procs.length} process(es): ${ORGS} organizations × ${PER_ORG} requests in ${seconds.toFixed(1)} s`)
    } finally {
      for (const p of procs) p.child.kill("SIGKILL")
      await Promise.all(procs.map((p) => p.exited))
      await db.drop()
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
