/** Helpers shared by the commands' handlers. */
import { Effect, Option, Schema } from "effect"
import type { ListMeta } from "../Output.js"
import { CliFailure } from "../Failure.js"

export interface PagingArgs {
  readonly limit: Option.Option<number>
  readonly cursor: Option.Option<string>
  readonly all: boolean
}

/** `{ limit?, cursor? }` as the contract's url params want them (absent, not undefined). */
export const pageParams = (limit: Option.Option<number>, cursor: Option.Option<string>) => ({
  ...Option.match(limit, { onNone: () => ({}), onSome: (limit) => ({ limit }) }),
  ...Option.match(cursor, { onNone: () => ({}), onSome: (cursor) => ({ cursor }) })
})

export const opt = <K extends string, A>(key: K, value: Option.Option<A>): { [P in K]?: A } =>
  Option.match(value, { onNone: () => ({}), onSome: (v) => ({ [key]: v }) }) as { [P in K]?: A }

/** One page, or every page when `--all` (following `meta.cursor`). */
export const fetchPages = <A, E, R>(
  p: PagingArgs,
  fetch: (cursor: Option.Option<string>) => Effect.Effect<{ readonly items: ReadonlyArray<A>; readonly meta: ListMeta }, E, R>
) =>
  Effect.gen(function*() {
    const first = yield* fetch(p.cursor)
    if (!p.all) return first
    const items = [...first.items]
    let meta = first.meta
    while (meta.cursor !== null) {
      const next = yield* fetch(Option.some(meta.cursor))
      items.push(...next.items)
      meta = next.meta
    }
    return { items, meta: { ...meta, cursor: null } }
  })

export const parseDate = (name: string, value: Option.Option<string>) =>
  Option.match(value, {
    onNone: () => Effect.succeed(Option.none<Date>()),
    onSome: (v) => {
      const d = new Date(v)
      return Number.isNaN(d.getTime())
        ? Effect.fail(new CliFailure({ message: `--${name}: not a date: ${v} (use ISO 8601, e.g. 2026-01-31T00:00:00Z)`, usage: true }))
        : Effect.succeed(Option.some(d))
    }
  })

export const parseJsonOption = <A, I>(name: string, schema: Schema.Schema<A, I>, value: Option.Option<string>) =>
  Option.match(value, {
    onNone: () => Effect.succeed(Option.none<A>()),
    onSome: (v) =>
      Schema.decodeUnknown(Schema.parseJson(schema))(v).pipe(
        Effect.map(Option.some),
        Effect.mapError((e) => new CliFailure({ message: `--${name}: ${e.message}`, usage: true }))
      )
  })
