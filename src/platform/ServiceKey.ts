/**
 * The service's master key, from which every key that protects data at rest is derived.
 *
 * `MAILROOM_SECRET_KEY` (base64 or hex, at least 32 bytes) wins; without it the key is made once at
 * random and kept in `service_keys` (row `master`), so every process sharing the database derives
 * the same keys. A key kept next to the data it protects guards against leaks of column values
 * (logs, exports, a careless SELECT), not against a copy of the whole database: that is what the
 * environment variable is for.
 */
import { SqlClient } from "@effect/sql"
import { Config, Effect, Option, Redacted } from "effect"
import { hkdfSync, randomBytes } from "node:crypto"

export const MASTER_KEY_ENV = "MAILROOM_SECRET_KEY"
export const MIN_MASTER_KEY_BYTES = 32

/** Hex when the text is only hex digits (an even number of them), base64 or base64url otherwise. */
export const parseMasterKey = (raw: string): Buffer | string => {
  const text = raw.trim()
  let key: Buffer
  if (/^(?:[0-9a-fA-F]{2})+$/.test(text)) key = Buffer.from(text, "hex")
  else if (/^[A-Za-z0-9+/_-]+={0,2}$/.test(text)) key = Buffer.from(text.replace(/-/g, "+").replace(/_/g, "/"), "base64")
  else return `${MASTER_KEY_ENV} must be base64 or hex`
  if (key.length < MIN_MASTER_KEY_BYTES) {
    return `${MASTER_KEY_ENV} must hold at least ${MIN_MASTER_KEY_BYTES} bytes, got ${key.length}`
  }
  return key
}

/** HKDF-SHA256 of the master key with `info` = purpose: one independent 32-byte key per use. */
export const deriveKey = (master: Uint8Array, purpose: string): Buffer =>
  Buffer.from(hkdfSync("sha256", master, Buffer.alloc(0), Buffer.from(purpose, "utf8"), 32))

export class ServiceKey extends Effect.Service<ServiceKey>()("platform/ServiceKey", {
  effect: Effect.gen(function*() {
    const configured = yield* Config.option(Config.redacted(MASTER_KEY_ENV))
    let master: Buffer
    if (Option.isSome(configured)) {
      const parsed = parseMasterKey(Redacted.value(configured.value))
      if (typeof parsed === "string") return yield* Effect.dieMessage(parsed)
      master = parsed
    } else {
      const sql = yield* SqlClient.SqlClient
      // Whichever process inserts first wins; everyone then reads the same row.
      yield* sql`INSERT INTO service_keys (name, key) VALUES ('master', ${randomBytes(32)}) ON CONFLICT (name) DO NOTHING`
      const rows = yield* sql<{ key: Uint8Array }>`SELECT key FROM service_keys WHERE name = 'master'`
      master = Buffer.from(rows[0]!.key)
    }
    const derived = new Map<string, Buffer>()
    const derive = (purpose: string): Effect.Effect<Buffer> =>
      Effect.sync(() => {
        let key = derived.get(purpose)
        if (key === undefined) {
          key = deriveKey(master, purpose)
          derived.set(purpose, key)
        }
        return key
      })
    return { derive } as const
  }).pipe(Effect.orDie)
}) {}
