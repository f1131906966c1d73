/**
 * VERP return paths: every relayed send goes out with the envelope sender
 * `bounces+<token>@<managed domain>`, where the token is the sent email's id and an HMAC of it under
 * a key derived from the service's master key. A DSN or ARF report mailed back to that address names
 * the sent email it is about, and nobody can forge one for a message they did not receive: a token
 * that does not verify matches nothing.
 *
 * Hex only, lower case: some MTAs fold the local part's case, and the whole local part stays under 64.
 */
import { Effect } from "effect"
import { createHmac, timingSafeEqual } from "node:crypto"
import { AppConfig } from "../platform/Config.js"
import { ServiceKey } from "../platform/ServiceKey.js"

export const VERP_LOCAL = "bounces"
const MAC_HEX = 16
const PATTERN = /^bounces\+([0-9a-f]{32})([0-9a-f]{16})@(.+)$/

const macOf = (key: Uint8Array, idHex: string) => createHmac("sha256", key).update(`verp:${idHex}`).digest("hex").slice(0, MAC_HEX)

const uuidOf = (hex: string) => `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`

export class Verp extends Effect.Service<Verp>()("mailroom/Verp", {
  effect: Effect.gen(function*() {
    const config = yield* AppConfig
    const keys = yield* ServiceKey
    const key = yield* keys.derive("verp return path v1")
    const domain = config.managedInboxDomain.toLowerCase()

    /** The envelope sender of one sent email. */
    const returnPath = (sentEmailId: string) => {
      const hex = sentEmailId.replace(/-/g, "").toLowerCase()
      return `${VERP_LOCAL}+${hex}${macOf(key, hex)}@${domain}`
    }

    /** Whether the address has the VERP form (at the managed domain), whatever its token. */
    const isVerpAddress = (address: string) => {
      const a = address.trim().toLowerCase()
      return a.startsWith(`${VERP_LOCAL}+`) && a.endsWith(`@${domain}`)
    }

    /** The sent email id a VERP address names, when its token verifies. */
    const sentEmailOf = (address: string): string | undefined => {
      const m = PATTERN.exec(address.trim().toLowerCase())
      if (m === null || m[3] !== domain) return undefined
      const expected = Buffer.from(macOf(key, m[1]!))
      const given = Buffer.from(m[2]!)
      return expected.length === given.length && timingSafeEqual(expected, given) ? uuidOf(m[1]!) : undefined
    }

    return { returnPath, isVerpAddress, sentEmailOf } as const
  }),
  dependencies: [ServiceKey.Default]
}) {}
