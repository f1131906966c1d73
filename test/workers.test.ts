/**
 * `WORKERS`: the built service as `npm start` runs it, with two worker processes behind one HTTP and
 * one SMTP port, seen from outside. Both workers serve requests; what they share through PostgreSQL
 * stays exact (the rate-limit window, an Idempotency-Key raced from many connections, one webhook
 * per delivered email, a listen poll woken by mail another connection brought in); a killed worker
 * is started again while the other serves; SIGTERM drains both and exits 0.
 *
 * Several processes need a PostgreSQL server: on the embedded database (no DATABASE_URL) the file
 * checks only that `WORKERS=2` runs one process and says why.
 */
import { describe, expect, it } from "@effect/vitest"
import { type ChildProcess, execFileSync, spawn } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import nodemailer from "nodemailer"
import { freePort } from "./support/harness.js"
import { fetchReply } from "./support/http.js"
import { baseEnv, createOrg, scratchDb, sleep, startReceiver } from "./faults/support.js"
import { childEnv } from "./support/childEnv.js"

const ROOT = new URL("../", import.meta.url).pathname
const onPostgres = (process.env.DATABASE_URL ?? "") !== ""

const waitUntil = async (what: string, check: () => boolean | Promise<boolean>, ms: number) => {
  const until = Date.now() + ms
  while (!(await check())) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`)
    await sleep(100)
  }
}

const healthy = async (port: number) => {
  try {
    return (await fetch(`http://127.0.0.1:${port}/v1/health`)).status === 200
  } catch {
    return false
  }
}

/** The pids of a process's children (Linux /proc). */
const childrenOf = (pid: number) => {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").trim().split(/\s+/).filter((s) => s !== "").map(Number)
  } catch {
    return []
  }
}

const runs = (pid: number, what: string) => {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").includes(what)
  } catch {
    return false
  }
}
/** The service processes among a primary's children (the primary also runs the embedding model's process). */
const workersOf = (pid: number) => childrenOf(pid).filter((p) => runs(p, "main.mjs"))
const modelsOf = (pid: number) => childrenOf(pid).filter((p) => runs(p, "ModelWorker"))

const isAlive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

let built = false

/** `node dist/server/main.mjs` (what `npm start` runs) with its log lines kept; once healthy. */
const start = async (env: Record<string, string>) => {
  if (!built) {
    execFileSync(process.execPath, ["scripts/build-server.mjs"], { cwd: ROOT, stdio: "pipe" })
    built = true
  }
  const port = await freePort()
  const smtpPort = await freePort()
  const child: ChildProcess = spawn(process.execPath, ["dist/server/main.mjs"], {
    cwd: ROOT,
    env: childEnv({ ...env, PORT: String(port), SMTP_PORT: String(smtpPort), PUBLIC_BASE_URL: `http://127.0.0.1:${port}` }),
    stdio: ["ignore", "pipe", "pipe"]
  })
  const out = { text: "" }
  child.stdout!.on("data", (c: Buffer) => (out.text += c.toString("utf8")))
  child.stderr!.on("data", (c: Buffer) => (out.text += c.toString("utf8")))
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)))
  let dead = false
  void exited.then(() => (dead = true))
  await waitUntil(`the service to be healthy (${out.text.slice(-2000)})`, () => {
    if (dead) throw new Error(`the service exited while starting: ${out.text.slice(-2000)}`)
    return healthy(port)
  }, 120_000)
  return { child, pid: child.pid!, port, smtpPort, baseUrl: `http://127.0.0.1:${port}`, exited, log: () => out.text }
}

type Service = Awaited<ReturnType<typeof start>>

/** Which workers logged a request line for `path` (`worker=N` annotation). */
const workersServing = (log: string, path: string) =>
  new Set(log.split("\n").filter((l) => l.includes(`message="GET ${path}`)).flatMap((l) => /worker=(\d+)/.exec(l)?.[1] ?? []))

const sendMail = async (smtpPort: number, to: string, subject: string) => {
  // A transport per message: a connection per message, so the primary spreads them over the workers.
  const transport = nodemailer.createTransport({ host: "127.0.0.1", port: smtpPort, secure: false, ignoreTLS: true })
  try {
    const info = await transport.sendMail({ from: "sender@example.com", to, subject, text: `body of ${subject}` })
    expect(info.response).toMatch(/^250 /)
  } finally {
    transport.close()
  }
}

describe.skipIf(!onPostgres)("two workers on PostgreSQL (skipped without DATABASE_URL: the embedded database runs one process)", () => {
  it("serve one port pair with shared limits, idempotency, deliveries and wake-ups; restart a killed worker; drain on SIGTERM", async () => {
    const db = await scratchDb()
    const dir = mkdtempSync(join(tmpdir(), "mailroom-workers-"))
    const receiver = await startReceiver()
    let svc: Service | undefined
    try {
      const env = baseEnv(dir, db.url, { WORKERS: "2", LOG_LEVEL: "info", DELIVERY_TIMEOUT: "5s" })
      const [limited, org] = await Promise.all([createOrg(env, "Limited"), createOrg(env, "Shared")])
      svc = await start(env)
      const s = svc

      // Two worker processes under the primary (the second starts once the first listens).
      await waitUntil("the second worker listening", () => (s.log().match(/Listening on http/g)?.length ?? 0) === 2, 120_000)
      const workers = workersOf(s.pid)
      expect(workers.length).toBe(2)

      // The organization's window (120 per 60 s) counted across both workers: the 121st is refused.
      const replies = await Promise.all(Array.from({ length: 8 }, async () => {
        const statuses: Array<number> = []
        for (let i = 0; i < 15; i++) statuses.push((await fetchReply(`${s.baseUrl}/v1/account`, "GET", { token: limited.apiKey })).status)
        return statuses
      }))
      expect(replies.flat().filter((st) => st === 200).length).toBe(120)
      const over = await fetchReply(`${s.baseUrl}/v1/account`, "GET", { token: limited.apiKey })
      expect(over.status).toBe(429)
      expect(over.body.error.code).toBe("rate_limited")
      await waitUntil("request lines of both workers", () => workersServing(s.log(), "/v1/account").size === 2, 5_000)

      // One Idempotency-Key from 16 connections at once: one filter, every success the same one.
      const headers = { "idempotency-key": `race-${Math.random()}` }
      const body = { type: "blocklist", pattern: `race-${Math.random().toString(36).slice(2)}@example.com` }
      const raced = await Promise.all(Array.from({ length: 16 }, () =>
        fetchReply(`${s.baseUrl}/v1/filters`, "POST", { token: org.apiKey, body, headers })))
      const created = raced.filter((r) => r.status === 201)
      expect(created.length).toBeGreaterThan(0)
      expect(raced.every((r) => r.status === 201 || r.status === 409)).toBe(true)
      expect(new Set(created.map((r) => r.body.data.id)).size).toBe(1)
      const filters = await fetchReply(`${s.baseUrl}/v1/filters`, "GET", { token: org.apiKey })
      expect((filters.body.data as Array<{ pattern: string }>).filter((f) => f.pattern === body.pattern).length).toBe(1)

      // K emails over K SMTP connections: exactly K webhook requests, one per delivery.
      const endpoint = await fetchReply(`${s.baseUrl}/v1/endpoints`, "POST", { token: org.apiKey, body: { url: receiver.url("/hook") } })
      expect(endpoint.status, endpoint.text).toBe(201)
      const K = 12
      await Promise.all(Array.from({ length: K }, (_, i) => sendMail(s.smtpPort, org.address, `each-${i}`)))
      await waitUntil(`${K} webhook requests`, () => receiver.hits.length >= K, 60_000)
      await sleep(3_000)
      expect(receiver.hits.length).toBe(K)
      expect(new Set(receiver.hits.map((h) => h.deliveryId)).size).toBe(K)
      expect(receiver.hits.every((h) => h.attempt === 1)).toBe(true)

      // A listen poll waiting on one connection sees mail brought in on another, in turn: each SMTP
      // session is a new connection, so the mail comes in through both workers.
      const session = await fetchReply(`${s.baseUrl}/v1/listen/sessions`, "POST", { token: org.apiKey, body: {} })
      expect(session.status, session.text).toBe(201)
      const sessionId = session.body.data.id as string
      for (let round = 0; round < 4; round++) {
        const subject = `listen-${round}-${Math.random().toString(36).slice(2)}`
        const began = Date.now()
        const poll = fetchReply(`${s.baseUrl}/v1/listen/sessions/${sessionId}/events?wait=25`, "GET", { token: org.apiKey })
        await sleep(300)
        await sendMail(s.smtpPort, org.address, subject)
        const got = await poll
        expect(got.status).toBe(200)
        const payloads = (got.body.data as Array<{ payload: string }>).map((e) => e.payload)
        expect(payloads.some((p) => p.includes(subject))).toBe(true)
        // Woken by the notification, long before the poll's own 25 s.
        expect(Date.now() - began).toBeLessThan(10_000)
      }

      // A killed worker is started again; the other serves meanwhile.
      const victim = workers[0]!
      process.kill(victim, "SIGKILL")
      // A keep-alive connection the victim held fails; a new one reaches the other worker.
      await waitUntil("the other worker to answer", () => healthy(s.port), 5_000)
      await waitUntil("the worker to be replaced", () => {
        const now = workersOf(s.pid)
        return now.length === 2 && !now.includes(victim)
      }, 30_000)
      expect(s.log()).toMatch(/exited with signal SIGKILL; starting it again/)
      await waitUntil("both workers listening again", async () => {
        const r = await Promise.all(Array.from({ length: 6 }, () => healthy(s.port)))
        return r.every(Boolean) && (s.log().match(/SMTP listening/g)?.length ?? 0) >= 3
      }, 60_000)
      await sendMail(s.smtpPort, org.address, "after-restart")
      await waitUntil("the mail after the restart delivered", () => receiver.hits.some((h) => h.body.email?.subject === "after-restart"), 30_000)

      // The embedding model runs once, in the primary's process for all workers: no worker has its own.
      expect(modelsOf(s.pid).length).toBeLessThanOrEqual(1)
      for (const w of workersOf(s.pid)) expect(modelsOf(w)).toEqual([])

      // SIGTERM: both workers drain, the primary exits 0 after them (and stops the model process).
      const before = childrenOf(s.pid)
      s.child.kill("SIGTERM")
      expect(await s.exited).toBe(0)
      svc = undefined
      expect(before.filter(isAlive)).toEqual([])
      expect(s.log()).toMatch(/SIGTERM: draining 2 workers/)
    } finally {
      if (svc !== undefined) {
        svc.child.kill("SIGKILL")
        for (const pid of childrenOf(svc.pid)) process.kill(pid, "SIGKILL")
        await svc.exited
      }
      await receiver.close()
      await db.drop()
      rmSync(dir, { recursive: true, force: true })
    }
  }, 300_000)
})

describe.skipIf(onPostgres)("WORKERS on the embedded database", () => {
  it("WORKERS=2 runs one process and says why", async () => {
    const dir = mkdtempSync(join(tmpdir(), "mailroom-workers-"))
    try {
      const svc = await start(baseEnv(dir, undefined, { WORKERS: "2", LOG_LEVEL: "info" }))
      expect(workersOf(svc.pid)).toEqual([])
      expect(svc.log()).toMatch(/running one process, not WORKERS=2: the embedded database \(PGlite\) belongs to one process/)
      svc.child.kill("SIGTERM")
      expect(await svc.exited).toBe(0)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  }, 180_000)
})
