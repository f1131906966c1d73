/**
 * Every answer a test gets from `/v1` must be declared by its operation in the OpenAPI document
 * (the one the service serves, derived from the contract): an undeclared status fails the test that
 * saw it, so the suite's whole traffic checks the document. Answers no operation owns (an unknown
 * path's 404, a 405 for a method the path lacks, Node's own 431 for a request head over 16 KB) are
 * left to the document's description.
 */
import { OpenApi } from "@effect/platform"
import { MailroomApi } from "../../src/Api.js"

interface Template {
  readonly method: string
  readonly path: string
  readonly pattern: RegExp
  readonly literals: number
  readonly statuses: ReadonlySet<string>
}

let templates: ReadonlyArray<Template> | undefined

const load = (): ReadonlyArray<Template> => {
  if (templates !== undefined) return templates
  const doc = OpenApi.fromApi(MailroomApi) as { paths: Record<string, Record<string, { responses?: Record<string, unknown> }>> }
  const out: Array<Template> = []
  for (const [path, item] of Object.entries(doc.paths)) {
    const segments = path.split("/")
    const pattern = new RegExp(`^${segments.map((s) => (/^\{.+\}$/.test(s) ? "[^/]+" : s.replace(/[.*+?^$()|[\]\\]/g, "\\$&"))).join("/")}$`)
    const literals = segments.filter((s) => !/^\{.+\}$/.test(s)).length
    for (const [method, op] of Object.entries(item)) {
      out.push({ method: method.toUpperCase(), path, pattern, literals, statuses: new Set(Object.keys(op.responses ?? {})) })
    }
  }
  templates = out
  return out
}

/** The operation a request reaches (the most literal template of that method), if any. */
export const operationOf = (method: string, pathname: string): Template | undefined =>
  load()
    .filter((t) => t.method === method.toUpperCase() && t.pattern.test(pathname))
    .sort((a, b) => b.literals - a.literals)[0]

/** Throws when `/v1` answered a status its operation does not declare. */
export const checkDeclared = (method: string, url: string, status: number) => {
  const { pathname } = new URL(url)
  if (!pathname.startsWith("/v1/")) return
  // Node's HTTP server refuses a request head over 16 KB itself (431) before the service sees it.
  if (status === 431) return
  const op = operationOf(method === "HEAD" ? "GET" : method, pathname)
  if (op === undefined) return
  if (op.statuses.has(String(status))) return
  throw new Error(
    `${method} ${pathname} answered ${status}, which the OpenAPI document does not declare for ${op.method} ${op.path} ` +
      `(declared: ${[...op.statuses].sort().join(", ")}); declare it on the operation (or in src/Api.ts for pipeline statuses)`
  )
}
