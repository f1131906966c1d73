/**
 * The house's floors, checked on every run: `contract/`, `platform/` and `net/` import no area (only
 * each other), nothing imports the composition root but the entry points, and no module takes part
 * in an import cycle.
 */
import { describe, expect, it } from "vitest"
import { readdirSync, readFileSync, statSync } from "node:fs"
import { dirname, join, relative, resolve } from "node:path"

const SRC = resolve(__dirname, "../src")
const FLOOR = new Set(["contract", "platform", "net"])
const ROOT_MODULES = new Set(["Server.ts"])
const ENTRY_POINTS = new Set(["main.ts", "admin.ts"])
/** Handler modules translate HTTP to a service call: `Http.ts` or `*Http.ts`. */
const isHandlerModule = (file: string) => /(^|\/)([A-Za-z]*Http)\.ts$/.test(file)

/**
 * Handler modules that still hold SQL, being moved into their areas' repositories and services.
 * Temporary: this list only shrinks, and is empty once every area is done.
 */
const PENDING_HANDLER_SQL: ReadonlyArray<string> = [
  "payments/Http.ts",
  "registries/Http.ts",
  "search/Http.ts",
  "sending/Http.ts",
  "service/Http.ts",
  "templates/Http.ts",
  "wake/Http.ts"
]

const sources = (dir: string): Array<string> =>
  readdirSync(dir).flatMap((name) => {
    const path = join(dir, name)
    if (statSync(path).isDirectory()) return sources(path)
    return /\.ts$/.test(name) ? [path] : []
  })

/** Relative imports of a module (static and dynamic), resolved to files under src/. */
const importsOf = (file: string): Array<string> => {
  const text = readFileSync(file, "utf8")
  const specs = [...text.matchAll(/(?:from\s+|import\s*\(\s*|import\s+)"(\.{1,2}\/[^"]+)"/g)].map((m) => m[1]!)
  return specs.map((s) => resolve(dirname(file), s.replace(/\.js$/, ".ts")))
}

const graph = new Map(sources(SRC).map((f) => [f, importsOf(f).filter((t) => t.startsWith(SRC))]))
const rel = (f: string) => relative(SRC, f)
const topOf = (f: string) => rel(f).split("/")[0]!

describe("architecture", () => {
  it("the floor (contract/, platform/, net/) imports no area and not the composition root", () => {
    const offending: Array<string> = []
    for (const [file, targets] of graph) {
      if (!FLOOR.has(topOf(file))) continue
      for (const t of targets) {
        if (!FLOOR.has(topOf(t))) offending.push(`${rel(file)} -> ${rel(t)}`)
      }
    }
    expect(offending).toEqual([])
  })

  it("only the entry points import the composition root", () => {
    const offending: Array<string> = []
    for (const [file, targets] of graph) {
      if (ENTRY_POINTS.has(rel(file))) continue
      for (const t of targets) if (ROOT_MODULES.has(rel(t))) offending.push(`${rel(file)} -> ${rel(t)}`)
    }
    expect(offending).toEqual([])
  })

  it("has no import cycles", () => {
    // Tarjan's strongly connected components: a component of more than one module is a cycle.
    let index = 0
    const idx = new Map<string, number>()
    const low = new Map<string, number>()
    const stack: Array<string> = []
    const onStack = new Set<string>()
    const cycles: Array<Array<string>> = []
    const visit = (v: string) => {
      idx.set(v, index)
      low.set(v, index++)
      stack.push(v)
      onStack.add(v)
      for (const w of graph.get(v) ?? []) {
        if (!graph.has(w)) continue
        if (!idx.has(w)) {
          visit(w)
          low.set(v, Math.min(low.get(v)!, low.get(w)!))
        } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, idx.get(w)!))
      }
      if (low.get(v) === idx.get(v)) {
        const component: Array<string> = []
        let w: string
        do {
          w = stack.pop()!
          onStack.delete(w)
          component.push(rel(w))
        } while (w !== v)
        if (component.length > 1 || (graph.get(v) ?? []).includes(v)) cycles.push(component)
      }
    }
    for (const v of graph.keys()) if (!idx.has(v)) visit(v)
    expect(cycles).toEqual([])
  })

  it("handler modules hold no SQL (it lives in repositories)", () => {
    const offending: Array<string> = []
    for (const file of graph.keys()) {
      if (!isHandlerModule(rel(file)) || PENDING_HANDLER_SQL.includes(rel(file))) continue
      const text = readFileSync(file, "utf8")
      if (text.includes("sql`") || text.includes("SqlClient")) offending.push(rel(file))
    }
    expect(offending).toEqual([])
  })

  it("no module but the composition root imports a handler module", () => {
    const offending: Array<string> = []
    for (const [file, targets] of graph) {
      if (ROOT_MODULES.has(rel(file))) continue
      for (const t of targets) if (isHandlerModule(rel(t))) offending.push(`${rel(file)} -> ${rel(t)}`)
    }
    expect(offending).toEqual([])
  })

  it("sees the whole tree (the checks above read real imports)", () => {
    expect(graph.size).toBeGreaterThan(50)
    expect(graph.get(join(SRC, "Server.ts"))?.length).toBeGreaterThan(20)
  })
})
