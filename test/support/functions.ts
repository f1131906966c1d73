/** Functions in real workerd through the test server: deploy, invoke, and the workerd processes still running. */
import { expect } from "@effect/vitest"
import { Effect } from "effect"
import { readdirSync, readFileSync } from "node:fs"
import { Provisioning } from "../../src/identity/Provisioning.js"
import { call } from "./http.js"

/** A developer-plan organization with an API key. */
export const functionsOrg = () =>
  Effect.gen(function*() {
    const p = yield* Provisioning
    const org = yield* p.createOrganization({ name: "Iso", plan: "developer" })
    const key = yield* p.issueApiKey(org.id)
    return { orgId: org.id, token: key.apiKey, inbox: org.managedInboxAddress }
  })

let seq = 0
export const deploy = (token: string, code: string, secrets?: Record<string, string>) =>
  Effect.gen(function*() {
    const r = yield* call("POST", "/v1/functions", {
      token,
      body: { name: `iso-${++seq}-${Math.random().toString(36).slice(2, 7)}`, code, ...(secrets ? { secrets } : {}) }
    })
    expect(r.status, r.text).toBe(201)
    return r.body.data as { id: string }
  })

export const invoke = (token: string, id: string) =>
  Effect.gen(function*() {
    const started = Date.now()
    // Concurrent identical invokes are distinct requests, not retries of one.
    const r = yield* call("POST", `/v1/functions/${id}/invoke`, { token, body: {}, headers: { "idempotency-key": crypto.randomUUID() } })
    expect(r.status, r.text).toBe(200)
    return { ...(r.body.data as { status: string; status_code: number | null; response_body: string; duration_ms: number; logs: string; error: string | null }), elapsed: Date.now() - started }
  })

/** workerd processes this test process started (directly or through the service) that still run. */
export const workerdChildren = () => {
  const out: Array<number> = []
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8")
      const comm = /\((.*)\)/.exec(stat)?.[1]
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1])
      if (comm === "workerd" && ppid === process.pid) out.push(Number(entry))
    } catch { /* gone meanwhile */ }
  }
  return out
}

/**
 * The workerd processes still running that were started with this secret value: a function
 * version's warm process, recognised by a marker secret only it was given.
 */
export const workerdWithSecret = (value: string) =>
  workerdChildren().filter((pid) => {
    try {
      return readFileSync(`/proc/${pid}/environ`, "utf8").split("\0").some((kv) => kv.endsWith(`=${value}`))
    } catch {
      return false
    }
  })

/** A secret value no other process holds. */
export const marker = () => `mark-${crypto.randomUUID()}`
