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
 * `n` characters of base62 from the CSPRNG: each byte under 248 picks `byte % 62`, uniformly; the
 * few others are drawn again. One `randomBytes` call for the whole token (a request id is one per
 * request; `randomInt` per character was twenty calls).
 */
export const randomToken = (n = 40): string => {
  let out = ""
  while (out.length < n) {
    const bytes = randomBytes(n - out.length + 8)
    for (let i = 0; i < bytes.length && out.length < n; i++) {
      const b = bytes[i]!
      if (b < UNBIASED_BELOW) out += ALPHABET[b % ALPHABET.length]
    }
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
