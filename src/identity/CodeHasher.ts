/**
 * Keyed hashes of the short codes people type (6-digit verification codes, 8-letter user codes)
 * and the signature of /device session cookies. A 6-digit code has a million values, so a bare
 * SHA-256 of it is reversed by enumeration from a leaked row; an HMAC under a service key is not
 * without the key, which is not in the code tables.
 */
import { Effect } from "effect"
import { createHmac } from "node:crypto"
import { ServiceKey } from "../platform/ServiceKey.js"
import { constantTimeEqual, randomToken } from "../platform/Secrets.js"
import { normalizeNumericCode } from "./Codes.js"

export class CodeHasher extends Effect.Service<CodeHasher>()("mailroom/CodeHasher", {
  effect: Effect.gen(function*() {
    const keys = yield* ServiceKey
    const codeKey = yield* keys.derive("identity/codes")
    const cookieKey = yield* keys.derive("identity/device-cookie")
    const mac = (key: Buffer, value: string) => createHmac("sha256", key).update(value).digest("hex")

    /** An emailed code, bound to the session (signup, claim, device) it unlocks. */
    const code = (purpose: string, sessionId: string, value: string) =>
      mac(codeKey, `${purpose}:${sessionId}:${normalizeNumericCode(value)}`)

    /** A normalized RFC 8628 user code. */
    const userCode = (value: string) => mac(codeKey, `user_code:${value}`)

    /** A new /device cookie value: random, signed, so the page accepts only cookies it issued. */
    const newCookie = () => {
      const id = randomToken(32)
      return `${id}.${mac(cookieKey, id).slice(0, 32)}`
    }

    const issuedCookie = (value: string) => {
      const dot = value.indexOf(".")
      if (dot !== 32 || value.length !== 65) return false
      return constantTimeEqual(mac(cookieKey, value.slice(0, dot)).slice(0, 32), value.slice(dot + 1))
    }

    return { code, userCode, newCookie, issuedCookie } as const
  }),
  dependencies: [ServiceKey.Default]
}) {}
