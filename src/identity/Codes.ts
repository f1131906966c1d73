/**
 * Short human codes (emailed digits, device user codes) and password hashing.
 * Short codes are stored keyed-hashed (CodeHasher) together with the id of what they unlock;
 * wrong guesses are capped per session (5 wrong codes void it) and per email (Lockout).
 */
import { randomInt, scrypt, timingSafeEqual, randomBytes } from "node:crypto"
import { Effect } from "effect"

export const CODE_LENGTH = 6
export const MAX_WRONG_CODES = 5
export const SIGNUP_TTL_SECONDS = 15 * 60
export const RESEND_AFTER_SECONDS = 60

export const newNumericCode = (length = CODE_LENGTH): string => {
  let out = ""
  for (let i = 0; i < length; i++) out += String(randomInt(10))
  return out
}

/** Digits only: people paste codes with spaces or dashes. */
export const normalizeNumericCode = (raw: string) => raw.replace(/[\s-]/g, "")

/** RFC 8628 user codes: 4 letters, hyphen, 4 letters, from an alphabet without vowels. */
export const USER_CODE_ALPHABET = "BCDFGHJKLMNPQRSTVWXZ"
export const USER_CODE_PATTERN = /^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$/

export const newUserCode = (): string => {
  let out = ""
  for (let i = 0; i < 8; i++) {
    if (i === 4) out += "-"
    out += USER_CODE_ALPHABET[randomInt(USER_CODE_ALPHABET.length)]
  }
  return out
}

/** Accepts `bcdf ghjk`, `BCDFGHJK`, `bcdf-ghjk`; `None`-like empty string when it cannot be one. */
export const normalizeUserCode = (raw: string): string => {
  const letters = raw.toUpperCase().replace(/[^A-Z]/g, "")
  if (letters.length !== 8) return ""
  const code = `${letters.slice(0, 4)}-${letters.slice(4)}`
  return USER_CODE_PATTERN.test(code) ? code : ""
}

// --- passwords: scrypt (memory-hard), parameters stored with the hash -------------------------
const N = 1 << 15
const R = 8
const P = 1
const KEY_LENGTH = 32
const MAXMEM = 64 * 1024 * 1024

const scryptAsync = (password: string, salt: Buffer, n: number, r: number, p: number) =>
  Effect.async<Buffer, Error>((resume) => {
    scrypt(password.normalize("NFKC"), salt, KEY_LENGTH, { N: n, r, p, maxmem: MAXMEM }, (err, key) =>
      resume(err ? Effect.fail(err) : Effect.succeed(key)))
  })

export const hashPassword = (password: string) =>
  Effect.gen(function*() {
    const salt = randomBytes(16)
    const key = yield* scryptAsync(password, salt, N, R, P)
    return `scrypt$${N}$${R}$${P}$${salt.toString("base64")}$${key.toString("base64")}`
  }).pipe(Effect.orDie)

export const verifyPassword = (password: string, stored: string) =>
  Effect.gen(function*() {
    const [scheme, n, r, p, salt, key] = stored.split("$")
    if (scheme !== "scrypt" || !n || !r || !p || !salt || !key) return false
    const expected = Buffer.from(key, "base64")
    const actual = yield* scryptAsync(password, Buffer.from(salt, "base64"), Number(n), Number(r), Number(p))
    return actual.length === expected.length && timingSafeEqual(actual, expected)
  }).pipe(Effect.orDie)

/** Password policy (docs/decisions.md): at least 8 characters, not only whitespace. */
export const passwordProblem = (password: string): string | null =>
  password.trim().length < 8 ? "must be at least 8 characters" : null
