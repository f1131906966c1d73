/**
 * Plans, entitlements and the service key material, without a server: one table gives both the
 * limits and the entitlements; the version has one source; sealing and key derivation behave.
 */
import { OpenApi } from "@effect/platform"
import { describe, expect, it } from "vitest"
import { createHmac } from "node:crypto"
import pkg from "../package.json" with { type: "json" }
import { MailroomApi } from "../src/Api.js"
import { ENTITLEMENTS, entitlementsOf, LIMITS, OPERATOR_ENTITLEMENTS, PLANS, type Plan } from "../src/contract/Plans.js"
import { VERSION } from "../src/contract/Version.js"
import { isSealed, open, seal } from "../src/platform/Sealed.js"
import { deriveKey, parseMasterKey } from "../src/platform/ServiceKey.js"

const plans: ReadonlyArray<Plan> = ["agent", "developer", "pro"]

describe("plans", () => {
  it("grants the documented entitlements per plan, sorted, payments only by an operator", () => {
    expect(ENTITLEMENTS.agent).toEqual(["send_mail", "send_to_known_addresses"])
    for (const plan of ["developer", "pro"] as const) {
      for (const key of ["functions", "registries", "search", "send_mail"]) expect(ENTITLEMENTS[plan]).toContain(key)
      expect(ENTITLEMENTS[plan]).not.toContain("send_to_known_addresses")
    }
    for (const plan of plans) {
      expect(ENTITLEMENTS[plan]).toEqual([...ENTITLEMENTS[plan]].sort())
      expect(ENTITLEMENTS[plan]).not.toContain("payments")
    }
    expect(OPERATOR_ENTITLEMENTS).toEqual(["payments"])
    expect(entitlementsOf("developer", ["payments"])).toEqual([...ENTITLEMENTS.developer, "payments"].sort())
    expect(entitlementsOf("agent", ["send_mail"])).toEqual(ENTITLEMENTS.agent)
  })

  it("takes limits and entitlements from one table, and no entitlement restates a limit", () => {
    const limitFields = new Set(Object.keys(LIMITS.agent))
    for (const plan of plans) {
      expect(LIMITS[plan]).toBe(PLANS[plan].limits)
      expect(ENTITLEMENTS[plan]).toEqual([...PLANS[plan].entitlements].sort())
      // Webhook slots are said by the limits alone: a `webhooks` key could disagree with them.
      for (const key of ENTITLEMENTS[plan]) {
        expect(limitFields.has(key)).toBe(false)
        expect(key.startsWith("webhooks")).toBe(false)
      }
    }
    // Every plan may create at least its one organization-wide webhook.
    for (const plan of plans) expect(LIMITS[plan].webhooks_max_global === null || LIMITS[plan].webhooks_max_global! >= 1).toBe(true)
  })

  it("has one version: package.json's, in the OpenAPI document and the health probe's source", () => {
    expect(VERSION).toBe(pkg.version)
    expect(OpenApi.fromApi(MailroomApi).info.version).toBe(pkg.version)
  })
})

describe("sealed secrets", () => {
  const key = deriveKey(Buffer.alloc(32, 7), "test/purpose")

  it("round-trips, is randomized, and does not open with another key, other associated data or a changed byte", () => {
    const a = seal(key, "whsec_secret", "org:1")
    const b = seal(key, "whsec_secret", "org:1")
    expect(a).not.toBe(b)
    expect(isSealed(a)).toBe(true)
    expect(a).not.toContain("whsec")
    expect(open(key, a, "org:1")).toBe("whsec_secret")
    expect(open(key, a, "org:2")).toBeUndefined()
    expect(open(deriveKey(Buffer.alloc(32, 7), "other"), a, "org:1")).toBeUndefined()
    const raw = Buffer.from(a.slice(3), "base64")
    raw[raw.length - 1]! ^= 1
    expect(open(key, `v1:${raw.toString("base64")}`, "org:1")).toBeUndefined()
    expect(open(key, "whsec_clear", "org:1")).toBeUndefined()
    expect(open(key, "v1:AAAA", "org:1")).toBeUndefined()
  })

  it("derives HKDF-SHA256 keys per purpose, and reads the master key as hex or base64 of at least 32 bytes", () => {
    const master = Buffer.alloc(32, 1)
    // RFC 5869 with an empty salt: PRK = HMAC(zeros, IKM); OKM = HMAC(PRK, info | 0x01) for 32 bytes.
    const prk = createHmac("sha256", Buffer.alloc(32)).update(master).digest()
    const okm = createHmac("sha256", prk).update(Buffer.concat([Buffer.from("p"), Buffer.from([1])])).digest()
    expect(deriveKey(master, "p").equals(okm)).toBe(true)
    expect(deriveKey(master, "p").equals(deriveKey(master, "q"))).toBe(false)
    expect(parseMasterKey(master.toString("hex"))).toEqual(master)
    expect(parseMasterKey(master.toString("base64"))).toEqual(master)
    expect(parseMasterKey(master.toString("base64url"))).toEqual(master)
    expect(parseMasterKey(Buffer.alloc(16).toString("hex"))).toMatch(/at least 32 bytes, got 16/)
    expect(parseMasterKey("not a key!")).toMatch(/base64 or hex/)
  })
})
