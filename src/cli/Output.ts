/** Rendering: JSON for scripts (`--json`), aligned tables and key/value blocks for people. */
import { Console, Effect } from "effect"

const jsonReplacer = (_k: string, v: unknown) => (v instanceof Uint8Array ? `<${v.length} bytes>` : v)

export const printJson = (value: unknown) => Console.log(JSON.stringify(value, jsonReplacer, 2))

const cell = (v: unknown): string => {
  if (v === null || v === undefined) return "-"
  if (v instanceof Date) return v.toISOString()
  if (typeof v === "object") return JSON.stringify(v)
  return String(v)
}

export interface Column<A> {
  readonly header: string
  readonly value: (a: A) => unknown
}

export const col = <A>(header: string, value: (a: A) => unknown): Column<A> => ({ header, value })

export const renderTable = <A>(items: ReadonlyArray<A>, columns: ReadonlyArray<Column<A>>): string => {
  const rows = items.map((item) => columns.map((c) => cell(c.value(item)).replace(/\s+/g, " ")))
  const headers = columns.map((c) => c.header.toUpperCase())
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)))
  const line = (r: ReadonlyArray<string>) => r.map((v, i) => (i === r.length - 1 ? v : v.padEnd(widths[i]!))).join("  ")
  return [line(headers), ...rows.map(line)].join("\n")
}

export const renderDetail = (obj: Readonly<Record<string, unknown>>): string => {
  const keys = Object.keys(obj)
  const width = Math.max(0, ...keys.map((k) => k.length))
  return keys.map((k) => `${k.padEnd(width)}  ${cell(obj[k])}`).join("\n")
}

/** One object: JSON, or a key/value block. */
export const showOne = (json: boolean, value: object) =>
  json ? printJson(value) : Console.log(renderDetail(value as Record<string, unknown>))

export interface ListMeta {
  readonly total: number
  readonly limit: number
  readonly cursor: string | null
}

/** A page (or all pages): `{data, meta}` as the API sends it, or a table and a footer. */
export const showList = <A>(
  json: boolean,
  page: { readonly items: ReadonlyArray<A>; readonly meta: ListMeta },
  columns: ReadonlyArray<Column<A>>
) =>
  Effect.gen(function*() {
    if (json) return yield* printJson({ data: page.items, meta: page.meta })
    if (page.items.length === 0) return yield* Console.log(`no results (total ${page.meta.total})`)
    yield* Console.log(renderTable(page.items, columns))
    const more = page.meta.cursor !== null ? `; more: --cursor ${page.meta.cursor} (or --all)` : ""
    yield* Console.error(`${page.items.length} of ${page.meta.total}${more}`)
  })

/** A message for people; in JSON mode the data is printed instead. */
export const done = (json: boolean, message: string, data: object) => (json ? printJson(data) : Console.log(message))
