/**
 * The house's floors, checked on every run: `contract/`, `platform/`, `net/` and `mail/` import no
 * area (only each other), nothing imports the composition root but the entry points, no module takes
 * part in an import cycle, and no two folders import each other, directly or around a loop (the
 * areas keep one order, docs/architecture.md). Of the top-level files an area imports only `Api.ts`,
 * the aggregate contract its handlers are built against. No module is over 400 lines.
 */
import { describe, expect, it } from "vitest"
import { readdirSync, readFileSync, statSync } from "node:fs"
import { dirname, join, relative, resolve } from "node:path"

const SRC = resolve(__dirname, "../src")
const FLOOR = new Set(["contract", "platform", "net", "mail"])
const ROOT_MODULES = new Set(["Server.ts"])
const ENTRY_POINTS = new Set(["main.ts", "admin.ts"])
/** The one top-level file a folder may import. */
const AGGREGATE_CONTRACT = "Api.ts"

/** Most lines a module under src/ may have: past that it holds more than one thing. */
const MAX_LINES = 400
/** Modules over the limit until they are split (relative to src/); the list only shrinks. */
const OVERSIZED_PENDING: ReadonlyArray<string> = []

/** Handler modules translate HTTP to a service call: `Http.ts` or `*Http.ts`. */
const isHandlerModule = (file: string) => /(^|\/)([A-Za-z]*Http)\.ts$/.test(file)

/** Handler modules that still hold SQL (relative to src/); the list only shrinks. */
const PENDING_HANDLER_SQL: ReadonlyArray<string> = []

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
/** The folder a module is in under src/; undefined for a top-level file. */
const folderOf = (f: string) => rel(f).includes("/") ? topOf(f) : undefined

/**
 * Strongly connected components of a graph (Tarjan): each component of more than one node, or a
 * node that reaches itself, is a cycle.
 */
const cyclesOf = (nodes: Iterable<string>, next: (v: string) => Iterable<string>): Array<Array<string>> => {
  let index = 0
  const idx = new Map<string, number>()
  const low = new Map<string, number>()
  const stack: Array<string> = []
  const onStack = new Set<string>()
  const known = new Set(nodes)
  const cycles: Array<Array<string>> = []
  const visit = (v: string) => {
    idx.set(v, index)
    low.set(v, index++)
    stack.push(v)
    onStack.add(v)
    for (const w of next(v)) {
      if (!known.has(w)) continue
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
        component.push(w)
      } while (w !== v)
      if (component.length > 1 || [...next(v)].includes(v)) cycles.push(component)
    }
  }
  for (const v of known) if (!idx.has(v)) visit(v)
  return cycles
}

/** Folder → folder edges (top-level files left out), each with the imports that make it. */
const folderEdges = new Map<string, Map<string, Array<string>>>()
for (const [file, targets] of graph) {
  const from = folderOf(file)
  if (from === undefined) continue
  const edges = folderEdges.get(from) ?? new Map<string, Array<string>>()
  folderEdges.set(from, edges)
  for (const t of targets) {
    const to = folderOf(t)
    if (to === undefined || to === from) continue
    edges.set(to, [...(edges.get(to) ?? []), `${rel(file)} -> ${rel(t)}`])
  }
}

describe("architecture", () => {
  it("the floor (contract/, platform/, net/, mail/) imports no area and no top-level file", () => {
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
    const cycles = cyclesOf(graph.keys(), (v) => graph.get(v) ?? []).map((c) => c.map(rel))
    expect(cycles).toEqual([])
  })

  it("has no import cycles between folders (the areas keep one order)", () => {
    // Each cycle is reported as its folder edges, with one import that makes each.
    const cycles = cyclesOf(folderEdges.keys(), (v) => folderEdges.get(v)?.keys() ?? []).map((component) => {
      const inCycle = new Set(component)
      return [...inCycle].sort().flatMap((from) =>
        [...(folderEdges.get(from) ?? new Map<string, Array<string>>())]
          .filter(([to]) => inCycle.has(to))
          .map(([to, imports]) => `${from} -> ${to} (${imports[0]})`)
      ).sort()
    })
    expect(cycles).toEqual([])
  })

  it("a folder imports no top-level file but the aggregate contract (Api.ts)", () => {
    const offending: Array<string> = []
    for (const [file, targets] of graph) {
      if (folderOf(file) === undefined) continue
      for (const t of targets) {
        if (folderOf(t) === undefined && rel(t) !== AGGREGATE_CONTRACT) offending.push(`${rel(file)} -> ${rel(t)}`)
      }
    }
    expect(offending).toEqual([])
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
    expect(folderEdges.size).toBeGreaterThan(20)
  })

  it(`no module under src/ is over ${MAX_LINES} lines`, () => {
    const linesOf = (text: string) => text.split("\n").length - (text.endsWith("\n") ? 1 : 0)
    const sizes = new Map(sources(SRC).map((f) => [rel(f), linesOf(readFileSync(f, "utf8"))]))
    const oversized = [...sizes].filter(([f, n]) => n > MAX_LINES && !OVERSIZED_PENDING.includes(f)).map(([f, n]) => `${f}: ${n}`)
    expect(oversized).toEqual([])
    // An entry that was split (or removed) leaves the list, so the exception does not outlive its reason.
    expect(OVERSIZED_PENDING.filter((f) => (sizes.get(f) ?? 0) <= MAX_LINES)).toEqual([])
  })

  it("row schemas are written once, not where a statement runs (each new schema compiles its decoder again)", () => {
    const inline = sources(SRC).flatMap((file) => {
      const text = readFileSync(file, "utf8")
      return [...text.matchAll(/(?:allRows|firstRow|decodeRows|decodeFirst|pageRows)\(\s*Schema\.|Result:\s*Schema\.(?!Void\b|Schema<)|SqlSchema\.(?:findAll|findOne|single)\(/g)]
        .map((m) => `${rel(file)}:${text.slice(0, m.index).split("\n").length}`)
    })
    expect(inline).toEqual([])
  })
})
