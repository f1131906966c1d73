/** Plain HTTP calls to a test server, as an outside client makes them. */
import { expect } from "@effect/vitest"
import { Effect } from "effect"
import { checkDeclared } from "./declaredStatuses.js"
import { TestServer } from "./harness.js"

export type JsonBody = ReturnType<typeof JSON.parse>

export interface Reply {
  readonly status: number
  readonly headers: Headers
  readonly text: string
  /** Parsed JSON body (undefined when the body is not JSON); untyped on purpose: tests assert its shape. */
  readonly body: JsonBody
}

export interface CallOptions {
  readonly body?: unknown
  /** Sent verbatim instead of JSON-encoding `body`. */
  readonly raw?: string
  readonly token?: string
  readonly headers?: Record<string, string>
}

export const fetchReply = async (url: string, method: string, options: CallOptions = {}): Promise<Reply> => {
  const headers: Record<string, string> = { ...options.headers }
  let body: string | undefined
  if (options.raw !== undefined) body = options.raw
  else if (options.body !== undefined) body = JSON.stringify(options.body)
  if (body !== undefined && headers["content-type"] === undefined) headers["content-type"] = "application/json"
  if (options.token !== undefined) headers["authorization"] = `Bearer ${options.token}`
  const res = await fetch(url, { method, headers, ...(body !== undefined ? { body } : {}), redirect: "manual" })
  const text = await res.text()
  checkDeclared(method, url, res.status)
  let parsed: unknown = undefined
  try {
    parsed = text.length > 0 ? JSON.parse(text) : undefined
  } catch {
    parsed = undefined
  }
  return { status: res.status, headers: res.headers, text, body: parsed }
}

/** Calls the test server: `call("POST", "/v1/…", { body, token })`. */
export const call = (method: string, path: string, options: CallOptions = {}) =>
  Effect.flatMap(TestServer, (server) => Effect.promise(() => fetchReply(`${server.baseUrl}${path}`, method, options)))

/** The answer is the spec's error envelope with this status and code (the body is shown when it is not). */
export const expectError = (r: Pick<Reply, "status" | "body" | "text">, status: number, code: string) => {
  expect([r.status, r.body?.success, r.body?.error?.code], r.text).toEqual([status, false, code])
}
