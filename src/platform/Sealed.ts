/**
 * Secrets the service must be able to use again (HMAC keys it signs with) are kept sealed:
 * AES-256-GCM under a derived key, as text `v1:<base64 of iv | tag | ciphertext>`. The optional
 * associated data binds a value to where it belongs (e.g. its organization), so a sealed value
 * copied to another row does not open there.
 */
import { createCipheriv, createDecipheriv, randomBytes } from "node:crypto"

export const SEALED_PREFIX = "v1:"
const IV_BYTES = 12
const TAG_BYTES = 16

export const isSealed = (value: string): boolean => value.startsWith(SEALED_PREFIX)

export const seal = (key: Uint8Array, plaintext: string, aad = ""): string => {
  const iv = randomBytes(IV_BYTES)
  const cipher = createCipheriv("aes-256-gcm", key, iv)
  cipher.setAAD(Buffer.from(aad, "utf8"))
  const ct = Buffer.concat([cipher.update(plaintext, "utf8"), cipher.final()])
  return SEALED_PREFIX + Buffer.concat([iv, cipher.getAuthTag(), ct]).toString("base64")
}

/** The plaintext, or undefined when the value is not sealed text or does not open under this key. */
export const open = (key: Uint8Array, sealed: string, aad = ""): string | undefined => {
  if (!isSealed(sealed)) return undefined
  const raw = Buffer.from(sealed.slice(SEALED_PREFIX.length), "base64")
  if (raw.length < IV_BYTES + TAG_BYTES) return undefined
  try {
    const decipher = createDecipheriv("aes-256-gcm", key, raw.subarray(0, IV_BYTES))
    decipher.setAAD(Buffer.from(aad, "utf8"))
    decipher.setAuthTag(raw.subarray(IV_BYTES, IV_BYTES + TAG_BYTES))
    return Buffer.concat([decipher.update(raw.subarray(IV_BYTES + TAG_BYTES)), decipher.final()]).toString("utf8")
  } catch {
    return undefined
  }
}
