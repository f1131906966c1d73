/**
 * What the error middleware needs to know about the declared operations, taken from an HttpApi
 * value the composition root passes in (this floor never imports the contract itself): which
 * methods a path has (for 405 and `Allow`), which operations read a JSON body (for 415) and the
 * names of path parameters (for field names in validation messages).
 */
import { HttpApi } from "@effect/platform"

interface Route {
  readonly method: string
  readonly template: string
  readonly pattern: RegExp
  readonly params: ReadonlyArray<string>
  readonly readsJson: boolean
}

export interface RouteMatch {
  readonly method: string
  readonly template: string
  /** Path parameter name → raw (still percent-encoded) segment. */
  readonly params: Readonly<Record<string, string>>
  readonly readsJson: boolean
}

const BODY_METHODS = new Set(["POST", "PUT", "PATCH"])

const compile = (template: string) => {
  const params: Array<string> = []
  const source = template.split("/").map((segment) => {
    if (segment.startsWith(":")) {
      params.push(segment.slice(1).replace(/\?$/, ""))
      return "([^/]+)"
    }
    return segment.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")
  }).join("/")
  return { pattern: new RegExp(`^${source}/?$`), params }
}

export class RouteTable {
  constructor(private readonly routes: ReadonlyArray<Route>) {}

  /** Every route of an HttpApi; an operation with a body and no declared payload reads optional JSON. */
  static of(api: HttpApi.HttpApi.Any): RouteTable {
    const routes: Array<Route> = []
    HttpApi.reflect(api as HttpApi.HttpApi<string, never, never, never>, {
      onGroup: () => {},
      onEndpoint: ({ endpoint, payloads }) => {
        const method = endpoint.method.toUpperCase()
        const readsJson = BODY_METHODS.has(method) &&
          (payloads.size === 0 || [...payloads.values()].some((p) => p.encoding.kind === "Json"))
        routes.push({ method, template: endpoint.path, readsJson, ...compile(endpoint.path) })
      }
    })
    // A static segment wins over a parameter, as in the router: `/emails/search` before `/emails/:id`.
    return new RouteTable(routes.sort((a, b) => a.params.length - b.params.length))
  }

  match(method: string, path: string): RouteMatch | undefined {
    for (const route of this.routes) {
      if (route.method !== method) continue
      const m = route.pattern.exec(path)
      if (m === null) continue
      const params: Record<string, string> = {}
      route.params.forEach((name, i) => (params[name] = m[i + 1] ?? ""))
      return { method, template: route.template, params, readsJson: route.readsJson }
    }
    return undefined
  }

  /** The methods declared for a path, in a stable order; empty when no route has this path. */
  allowed(path: string): ReadonlyArray<string> {
    const methods = new Set<string>()
    for (const route of this.routes) if (route.pattern.test(path)) methods.add(route.method)
    return [...methods].sort()
  }
}
