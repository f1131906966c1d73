/** The error table: one tag ↔ one code ↔ one status, and every wire schema encodes the envelope. */
import { HttpApiSchema } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Schema } from "effect"
import { envelopeOf, ErrorTable, type ErrorTag, statusOf, Wire } from "../src/contract/Errors.js"

const tags = Object.keys(ErrorTable) as Array<ErrorTag>

describe("error table", () => {
  it("has no two errors sharing a code", () => {
    const codes = tags.map((t) => ErrorTable[t].code)
    expect(new Set(codes).size).toBe(codes.length)
  })

  it("covers every documented error code with its status", () => {
    const expected: Record<string, number> = {
      unauthorized: 401, download_token_expired: 401, download_token_invalid: 401, forbidden: 403,
      not_found: 404, validation_error: 400, mx_conflict: 409, conflict: 409, rate_limited: 429,
      rate_limit_exceeded: 429, outbound_capacity_exhausted: 503, internal_error: 500,
      recipient_not_allowed: 403, cannot_send_from_domain: 403, inbound_not_repliable: 422, not_scheduled: 409,
      discard_not_enabled: 403, loop_detected: 429, recipient_suppressed: 422, search_timeout: 504, outbound_unreachable: 502, outbound_relay_timeout: 504,
      outbound_relay_failed: 502, outbound_response_malformed: 502, outbound_key_invalid: 500,
      feature_disabled: 403, no_payout_address: 422, payment_declined: 422, payment_verification_failed: 422,
      settlement_failed: 502, challenge_expired: 422, authorization_pending: 400, slow_down: 400,
      expired_token: 400, invalid_grant: 400, access_denied: 403, claim_expired: 410, service_unavailable: 503,
      method_not_allowed: 405, unsupported_media_type: 415, payload_too_large: 413
    }
    const actual = Object.fromEntries(tags.map((t) => [ErrorTable[t].code, ErrorTable[t].status]))
    expect(actual).toEqual(expected)
  })

  for (const tag of tags) {
    const row = ErrorTable[tag]
    it(`${tag} encodes to the ${row.code} envelope with status ${row.status} and decodes back`, () => {
      const Cls = row.error as unknown as new(p: { message: string; details?: Record<string, unknown> }) => {
        _tag: string
        message: string
      }
      const error = new Cls({ message: `boom ${tag}`, details: { hint: "x" } })
      expect(error._tag).toBe(tag)
      const wire = Wire[tag] as unknown as Schema.Schema<unknown, unknown>
      const encoded = Schema.encodeSync(wire)(error)
      expect(encoded).toEqual({ success: false, error: { code: row.code, message: `boom ${tag}`, details: { hint: "x" } } })
      expect(envelopeOf(error as never)).toEqual(encoded)
      expect(statusOf(error as never)).toBe(row.status)
      expect(HttpApiSchema.getStatusError(wire)).toBe(row.status)
      const decoded = Schema.decodeUnknownSync(wire)(encoded) as { _tag: string; message: string }
      expect(decoded).toBeInstanceOf(row.error)
      expect(decoded.message).toBe(`boom ${tag}`)
      // Another code never decodes as this error.
      expect(() =>
        Schema.decodeUnknownSync(wire)({ success: false, error: { code: `${row.code}_x`, message: "m" } })
      ).toThrow()
    })
  }
})
