/**
 * Credential material: generation, hashing and display prefixes.
 * High-entropy secrets (keys, tokens, codes) are looked up by SHA-256; nothing stores them in clear.
 */
import { createHash, randomBytes, timingSafeEqual } from "node:crypto"

export const PREFIX = { apiKey: "mr_live_", accessToken: "mr_at_", refreshToken: "mr_rt_", functionToken: "mr_fn_" } as const

const ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

/** Bytes below this map onto the alphabet without bias (four times 62); the rest are skipped. */
const UNBIASED_BELOW = 4 * ALPHABET.length

/**
 * Bytes from the CSPRNG, drawn 4 KB at a time: one `randomBytes` call per request id was 3% of a
 * health probe's CPU, most of it the call itself (Node's own `randomUUID` keeps a cache the same
 * way). Each byte is read once and overwritten with zero as it is taken, so what a token was made
 * of does not stay in memory after it is handed out. Every process (each worker is one) fills its own.
 */
const POOL_BYTES = 4096
let pool = Buffer.alloc(0)
let taken = 0
const randomByte = (): number => {
  if (taken >= pool.length) {
    pool = randomBytes(POOL_BYTES)
    taken = 0
  }
  const b = pool[taken]!
  pool[taken++] = 0
  return b
}

/**
 * `n` characters of base62 from the CSPRNG: each byte under 248 picks `byte % 62`, uniformly; the
 * few others are drawn again.
 */
export const randomToken = (n = 40): string => {
  let out = ""
  while (out.length < n) {
    const b = randomByte()
    if (b < UNBIASED_BELOW) out += ALPHABET[b % ALPHABET.length]
  }
  return out
}

export const newApiKey = () => `${PREFIX.apiKey}${randomToken(40)}`
export const newAccessToken = () => `${PREFIX.accessToken}${randomToken(40)}`
export const newRefreshToken = () => `${PREFIX.refreshToken}${randomToken(48)}`

export const sha256Hex = (value: string | Uint8Array): string => createHash("sha256").update(value).digest("hex")

/** What a person may see of a credential later: the prefix and the first characters. */
export const displayPrefix = (secret: string): string => secret.slice(0, secret.indexOf("_", 3) + 1 + 6)

export const constantTimeEqual = (a: string, b: string): boolean => {
  const x = Buffer.from(a)
  const y = Buffer.from(b)
  return x.length === y.length && timingSafeEqual(x, y)
}

export const randomBase64Url = (bytes = 32) => randomBytes(bytes).toString("base64url")
