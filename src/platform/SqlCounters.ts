/**
 * Database work counted at the driver, per process and per operation, so that benchmarks can print
 * what each path costs and tests can hold each path to a budget.
 *
 * Every `query` call of the service's node-postgres clients is one round trip (node-postgres sends
 * the next query of a connection only after the previous one answered). Of those, `BEGIN`, `COMMIT`,
 * `ROLLBACK`, `SAVEPOINT` and `RELEASE` are transaction control; the rest are statements. `commits`
 * counts transactions committed as PostgreSQL counts them (`xact_commit`): a `COMMIT`, and a
 * statement sent outside `BEGIN … COMMIT`, which is a transaction of its own. `rollbacks` counts
 * `ROLLBACK`s of whole transactions (a savepoint's rollback is not one).
 *
 * A round trip is charged to the operation of the fiber that issued it: `measure`/`within` set the
 * operation for an effect (forked fibers inherit it), and a batch serving several operations at once
 * (Batching.ts) charges each of them its share. A pooled query leaves its fiber before it reaches
 * the driver (the pool hands out a connection on a later tick), so the pool notes the fiber's
 * operation when the connection is asked for and the connection's next query is charged to it.
 * Work no operation claims (a poll finding nothing, a timer's claim) counts in the totals only,
 * unless its loop charges it to a path of its own.
 */
import { Effect, Fiber, FiberRef, Option } from "effect"
import { globalValue } from "effect/GlobalValue"
import pg from "pg"

export interface Counts {
  roundTrips: number
  statements: number
  commits: number
  rollbacks: number
}

const zero = (): Counts => ({ roundTrips: 0, statements: 0, commits: 0, rollbacks: 0 })

/** One path's figures: operations begun, round trips charged to them (also work that ended after them). */
export interface PathCounts extends Counts {
  operations: number
  /** Operations ended (`end`): `last` is the latest of these. */
  finished: number
  /** The most recent finished operation's own figures, as they were when it finished. */
  last: Counts
}

/** Where a round trip is counted: an operation's own figures and its path, `share` of a batch. */
export interface Charge {
  readonly own: Counts
  readonly path: PathCounts
  readonly share: number
}

/** An operation in progress: the charges its fibers carry. */
export interface Operation {
  readonly charges: ReadonlyArray<Charge>
}

const state = globalValue("mailroom/SqlCounters", () => ({
  totals: zero(),
  paths: new Map<string, PathCounts>()
}))

/** At most this many distinct paths: a label built from input (an unknown URL) cannot grow the map. */
const MAX_PATHS = 256

const pathOf = (label: string): PathCounts => {
  const found = state.paths.get(label)
  if (found !== undefined) return found
  const key = state.paths.size < MAX_PATHS ? label : "other"
  const path = state.paths.get(key) ?? { operations: 0, finished: 0, ...zero(), last: zero() }
  state.paths.set(key, path)
  return path
}

export const currentCharges = globalValue(
  "mailroom/SqlCounters/charges",
  () => FiberRef.unsafeMake<ReadonlyArray<Charge>>([])
)

const CONTROL = /^\s*(BEGIN|START\s+TRANSACTION|COMMIT|END|ROLLBACK|SAVEPOINT|RELEASE)\b(\s+TO\b)?/i

type Kind = "statement" | "autocommit" | "begin" | "commit" | "rollback" | "control"

const add = (counts: Counts, kind: Kind, n: number) => {
  counts.roundTrips += n
  if (kind === "statement" || kind === "autocommit") counts.statements += n
  if (kind === "commit" || kind === "autocommit") counts.commits += n
  else if (kind === "rollback") counts.rollbacks += n
}

/** What a query text is, given whether its connection is inside `BEGIN … COMMIT`. */
export const kindOf = (text: string, inTransaction: boolean): Kind => {
  const m = CONTROL.exec(text.slice(0, 40))
  if (m === null) return inTransaction ? "statement" : "autocommit"
  const word = m[1]!.toUpperCase()
  if (word === "BEGIN" || word.startsWith("START")) return "begin"
  if (word === "COMMIT" || word === "END") return "commit"
  return word === "ROLLBACK" && m[2] === undefined ? "rollback" : "control"
}

/** Counts one round trip of this kind, for the process and for the charges given. */
export const record = (kind: Kind, charges: ReadonlyArray<Charge>) => {
  add(state.totals, kind, 1)
  for (const c of charges) {
    add(c.own, kind, c.share)
    add(c.path, kind, c.share)
  }
}

/** The charges of the fiber running now (none outside any fiber). */
const chargesHere = (): ReadonlyArray<Charge> => {
  const fiber = Fiber.getCurrentFiber()
  return Option.isSome(fiber) ? fiber.value.getFiberRef(currentCharges) : []
}

/** A new operation of `label`; `counted: false` for a loop's own work, which is no operation. */
export const begin = (label: string, counted = true): Operation => {
  const path = pathOf(label)
  if (counted) path.operations++
  return { charges: [{ own: zero(), path, share: 1 }] }
}

/** Records the operation's own figures as its path's `last`. */
export const end = (operation: Operation) => {
  for (const c of operation.charges) {
    c.path.last = { ...c.own }
    c.path.finished++
  }
}

/** Runs `effect` as part of `operation` (replacing whatever operation the fiber had). */
export const within = <A, E, R>(operation: Operation, effect: Effect.Effect<A, E, R>) =>
  Effect.locally(effect, currentCharges, operation.charges)

/**
 * Begins an operation of `label` that the current fiber carries until it ends, without restoring
 * the fiber's previous operation: for a fiber that serves one operation and ends with it (an HTTP
 * request's), where `measure`'s scoped change would be copied in and out for nothing. `end` it.
 */
export const beginForFiber = (label: string): Effect.Effect<Operation> =>
  Effect.suspend(() => {
    const operation = begin(label)
    return Effect.as(FiberRef.set(currentCharges, operation.charges), operation)
  })

/** Runs `effect` as one operation of `label`. */
export const measure = (label: string) => <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.suspend(() => {
    const operation = begin(label)
    return within(operation, effect).pipe(Effect.ensuring(Effect.sync(() => end(operation))))
  })

/** The operation of the current fiber, to be carried into work done on its behalf elsewhere. */
export const current: Effect.Effect<ReadonlyArray<Charge>> = FiberRef.get(currentCharges)

/** Runs one batch on behalf of several operations: each is charged an equal share of its round trips. */
export const shared = <A, E, R>(each: ReadonlyArray<ReadonlyArray<Charge>>, effect: Effect.Effect<A, E, R>) => {
  const n = each.length
  const charges = n === 1 ? each[0]! : each.flatMap((cs) => cs.map((c) => ({ ...c, share: c.share / n })))
  return Effect.locally(effect, currentCharges, charges)
}

const rounded = (c: Counts): Counts => ({
  roundTrips: Math.round(c.roundTrips * 1000) / 1000,
  statements: Math.round(c.statements * 1000) / 1000,
  commits: Math.round(c.commits * 1000) / 1000,
  rollbacks: Math.round(c.rollbacks * 1000) / 1000
})

export interface Snapshot {
  readonly totals: Counts
  readonly paths: Readonly<Record<string, Counts & { readonly operations: number; readonly finished: number; readonly last: Counts }>>
}

/** The figures so far (copies, rounded to thousandths where batches split them). */
export const snapshot = (): Snapshot => ({
  totals: { ...state.totals },
  paths: Object.fromEntries(
    [...state.paths].map(([label, p]) => [label, { operations: p.operations, finished: p.finished, ...rounded(p), last: rounded(p.last) }])
  )
})

// node-postgres clients that count their queries; a pool of them notes the asking fiber's operation.
const pending = new WeakMap<object, ReadonlyArray<Charge>>()

/** The SQL of a query call's first argument: the text itself, or a query config's `text`. */
const textOf = (first: unknown): string =>
  typeof first === "string"
    ? first
    : typeof first === "object" && first !== null && "text" in first && typeof first.text === "string"
    ? first.text
    : ""

type AnyQuery = (this: pg.Client, ...args: Array<unknown>) => unknown
const baseQuery = pg.Client.prototype.query as unknown as AnyQuery

class CountingClient extends pg.Client {
  private inTransaction = false
  constructor(config?: string | pg.ClientConfig) {
    super(config)
    // Every overload of `query` passes through here; node-postgres answers it as before.
    const counted = (...args: Array<unknown>): unknown => {
      const noted = pending.get(this)
      if (noted !== undefined) pending.delete(this)
      const kind = kindOf(textOf(args[0]), this.inTransaction)
      if (kind === "begin") this.inTransaction = true
      else if (kind === "commit" || kind === "rollback") this.inTransaction = false
      record(kind, noted ?? chargesHere())
      return baseQuery.apply(this, args)
    }
    this.query = counted as unknown as pg.Client["query"]
  }
}

type ConnectCallback = Parameters<pg.Pool["connect"]> extends [infer C] ? C : never

/** A node-postgres pool whose clients count every query (see the module comment). */
export class CountingPool extends pg.Pool {
  constructor(config: pg.PoolConfig) {
    super({ ...config, Client: CountingClient } as pg.PoolConfig)
  }
  override connect(): Promise<pg.PoolClient>
  override connect(callback: ConnectCallback): void
  override connect(callback?: ConnectCallback): Promise<pg.PoolClient> | void {
    const charges = chargesHere()
    // Set even when empty: a connection handed out but never queried must not keep an older note.
    const note = (client: object | undefined) => {
      if (client !== undefined) pending.set(client, charges)
    }
    if (callback === undefined) {
      return super.connect().then((client) => {
        note(client)
        return client
      })
    }
    return super.connect((err, client, done) => {
      note(client)
      callback(err, client, done)
    })
  }
}
