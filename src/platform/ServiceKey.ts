/**
 * The service's master key, from which every key that protects data at rest is derived.
 *
 * `MAILROOM_SECRET_KEY` (base64 or hex, at least 32 bytes) wins. Without it the key lives in the
 * file `DATA_DIR/secret.key` (created at random on first start, mode 0600), never in the database:
 * a copy of the database alone opens no sealed secret and grinds no code hash. Processes that share
 * one PostgreSQL must share the key (the same variable, or a copy of the file); the database keeps a
 * check value of the key (not the key), so a process started with another key stops at once with a
 * message instead of failing to open what others sealed.
 *
 * Earlier versions kept a generated key in `service_keys` (row `master`); the first start that finds
 * that row and no key of its own moves it into the file and deletes the row.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Option, Redacted } from "effect"
import { createHmac, hkdfSync, randomBytes, timingSafeEqual } from "node:crypto"
import { mkdirSync, readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { AppConfig } from "./Config.js"

export const MASTER_KEY_ENV = "MAILROOM_SECRET_KEY"
export const MASTER_KEY_FILE = "secret.key"
export const MIN_MASTER_KEY_BYTES = 32

/** Hex when the text is only hex digits (an even number of them), base64 or base64url otherwise. */
export const parseMasterKey = (raw: string, source = MASTER_KEY_ENV): Buffer | string => {
  const text = raw.trim()
  let key: Buffer
  if (/^(?:[0-9a-fA-F]{2})+$/.test(text)) key = Buffer.from(text, "hex")
  else if (/^[A-Za-z0-9+/_-]+={0,2}$/.test(text)) key = Buffer.from(text.replace(/-/g, "+").replace(/_/g, "/"), "base64")
  else return `${source} must be base64 or hex`
  if (key.length < MIN_MASTER_KEY_BYTES) {
    return `${source} must hold at least ${MIN_MASTER_KEY_BYTES} bytes, got ${key.length}`
  }
  return key
}

/** HKDF-SHA256 of the master key with `info` = purpose: one independent 32-byte key per use. */
export const deriveKey = (master: Uint8Array, purpose: string): Buffer =>
  Buffer.from(hkdfSync("sha256", master, Buffer.alloc(0), Buffer.from(purpose, "utf8"), 32))

/** What the database keeps to recognise the key: an HMAC of a fixed text, useless for opening anything. */
const checkValue = (master: Uint8Array) => createHmac("sha256", master).update("mailroom master key check v1").digest()

/**
 * The key file's content, creating it with `initial` (or a random key) when absent; two processes
 * starting together agree, because only one exclusive create succeeds and the other reads it.
 */
const keyFromFile = (dataDir: string, initial: Buffer | undefined): Buffer | string => {
  const file = join(dataDir, MASTER_KEY_FILE)
  try {
    mkdirSync(dataDir, { recursive: true })
    writeFileSync(file, (initial ?? randomBytes(32)).toString("hex") + "\n", { flag: "wx", mode: 0o600 })
  } catch (e) {
    if ((e as { code?: string }).code !== "EEXIST") return `cannot create ${file}: ${String(e)}`
  }
  return parseMasterKey(readFileSync(file, "utf8"), file)
}

export class ServiceKey extends Effect.Service<ServiceKey>()("platform/ServiceKey", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const config = yield* AppConfig
    const configured = config.masterKey
    const legacy = yield* sql<{ key: Uint8Array }>`SELECT key FROM service_keys WHERE name = 'master'`
    const fromDatabase = legacy[0] === undefined ? undefined : Buffer.from(legacy[0].key)
    const source = Option.isSome(configured) ? MASTER_KEY_ENV : join(config.dataDir, MASTER_KEY_FILE)
    const master = Option.isSome(configured)
      ? parseMasterKey(Redacted.value(configured.value))
      : keyFromFile(config.dataDir, fromDatabase)
    if (typeof master === "string") return yield* Effect.dieMessage(master)

    const check = checkValue(master)
    yield* sql`INSERT INTO service_keys (name, key) VALUES ('master-check', ${check}) ON CONFLICT (name) DO NOTHING`
    const stored = yield* sql<{ key: Uint8Array }>`SELECT key FROM service_keys WHERE name = 'master-check'`
    const expected = Buffer.from(stored[0]!.key)
    if (expected.length !== check.length || !timingSafeEqual(expected, check)) {
      return yield* Effect.dieMessage(
        `the master key (${source}) is not the one this database's secrets were sealed with: give every ` +
          `process that shares the database the same ${MASTER_KEY_ENV}, or the same ${MASTER_KEY_FILE} in its DATA_DIR`
      )
    }
    // Moved out of the database once the file holds it (with the variable set, the old row is left
    // alone: what it sealed can still be recovered by an operator).
    if (fromDatabase !== undefined && Option.isNone(configured)) yield* sql`DELETE FROM service_keys WHERE name = 'master'`

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
