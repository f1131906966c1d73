/**
 * Tokens (API keys, request ids, codes) are base62 from the CSPRNG: the length asked, only the
 * alphabet, and every character equally likely (bytes past 247 are skipped, never folded onto the
 * first letters).
 */
import { describe, expect, it } from "vitest"
import { randomToken } from "../src/platform/Secrets.js"

const ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

describe("randomToken", () => {
  it("has the length asked and only base62 characters", () => {
    for (const n of [1, 20, 40, 48, 300]) {
      const t = randomToken(n)
      expect(t).toHaveLength(n)
      expect(t).toMatch(/^[A-Za-z0-9]+$/)
    }
    expect(randomToken()).toHaveLength(40)
  })

  it("draws every character equally often (chi-square over 620,000 characters)", () => {
    const counts = new Map<string, number>()
    for (let i = 0; i < 10_000; i++) for (const c of randomToken(62)) counts.set(c, (counts.get(c) ?? 0) + 1)
    expect([...counts.keys()].sort().join("")).toBe([...ALPHABET].sort().join(""))
    const expected = 620_000 / 62
    const chi = [...counts.values()].reduce((s, o) => s + (o - expected) ** 2 / expected, 0)
    // 61 degrees of freedom: above 110 has odds under 1 in 10,000. A modulo over all 256 byte values
    // would give the first 8 characters 5/4 of the others' share: a chi-square near 4,100.
    expect(chi).toBeLessThan(110)
  })

  it("does not repeat", () => {
    const seen = new Set(Array.from({ length: 10_000 }, () => randomToken(20)))
    expect(seen.size).toBe(10_000)
  })
})
