/**
 * Why a webhook signature does not verify, told in words a developer can act on. Works on what the
 * receiver got (headers and raw body) against the organization's secrets and, when the body names
 * a delivered event, the exact bytes that were signed.
 */
import { isDeepStrictEqual } from "node:util"
import { LEGACY_SIGNATURE_HEADER, SIGNATURE_HEADER, signatureHex, TOLERANCE_SECONDS } from "./Signing.js"
import { timingSafeEqual } from "node:crypto"

/** What a diagnosis concludes; the API declares exactly these (src/deliveries/Api.ts). */
export const VERDICTS = [
  "valid",
  "missing_header",
  "malformed_header",
  "timestamp_out_of_tolerance",
  "body_reserialized",
  "body_modified",
  "signed_with_previous_secret",
  "signed_with_unknown_secret"
] as const
export type Verdict = typeof VERDICTS[number]

export interface DiagnosisSecrets {
  readonly current: string
  /** The secret replaced at the last rotation, with the end of its grace period. */
  readonly previous: { readonly secret: string; readonly expiresAt: Date } | null
}

export interface DiagnosisInput {
  readonly headers: Readonly<Record<string, string>>
  readonly body: string
  readonly nowSeconds: number
  readonly secrets: DiagnosisSecrets
  /** The body's event id (from the payload's `id`, else the `Mailroom-Event-Id` header). */
  readonly eventId: string | null
  /** The bytes delivered for that event, when the organization has such a delivery. */
  readonly delivered: string | null
}

export interface Diagnosis {
  readonly valid: boolean
  readonly verdict: Verdict
  readonly message: string
  readonly details: {
    readonly header: string | null
    readonly timestamp: number | null
    readonly age_seconds: number | null
    readonly tolerance_seconds: number
    readonly signatures: number
    readonly matched_secret: "current" | "previous" | null
    readonly event_id: string | null
    readonly delivery_known: boolean
    readonly first_difference_at: number | null
    readonly previous_expires_at: Date | null
    readonly problems: ReadonlyArray<string>
  }
}

/** The event id a body names, if it is a JSON object with an `evt_…` id. */
export const eventIdOf = (body: string): string | null => {
  try {
    const parsed: unknown = JSON.parse(body)
    if (typeof parsed === "object" && parsed !== null && "id" in parsed) {
      const id = (parsed as { id: unknown }).id
      if (typeof id === "string" && /^evt_[A-Za-z0-9]{1,64}$/.test(id)) return id
    }
  } catch {
    // Not JSON: no event to look up.
  }
  return null
}

const headerOf = (headers: Readonly<Record<string, string>>, name: string): string | undefined => {
  const wanted = name.toLowerCase()
  for (const [k, v] of Object.entries(headers)) if (k.trim().toLowerCase() === wanted) return v
  return undefined
}

interface Parsed {
  readonly t: number | null
  readonly v1: ReadonlyArray<string>
  readonly problems: ReadonlyArray<string>
}

/** Reads `t=…,v1=…[,v1=…]` and says what is wrong with each part that does not fit. */
const parse = (value: string): Parsed => {
  let t: number | null = null
  const v1: Array<string> = []
  const problems: Array<string> = []
  const parts = value.split(",").map((p) => p.trim()).filter((p) => p !== "")
  for (const part of parts) {
    const eq = part.indexOf("=")
    if (eq <= 0) {
      problems.push(`"${part.slice(0, 40)}" is not a key=value pair`)
      continue
    }
    const k = part.slice(0, eq).trim()
    const v = part.slice(eq + 1).trim()
    if (k === "t") {
      if (!/^\d{1,12}$/.test(v)) problems.push(`t must be a Unix time in whole seconds, got "${v.slice(0, 40)}"`)
      else if (t !== null) problems.push("t appears more than once")
      else t = Number(v)
    } else if (k === "v1") {
      if (!/^[0-9a-fA-F]{64}$/.test(v)) {
        problems.push(`v1 must be 64 hex characters (an HMAC-SHA256 in hex), got ${v.length} characters`)
      } else v1.push(v.toLowerCase())
    }
    // Other schemes (v0, …) are ignored, as verifiers do.
  }
  if (t === null && !problems.some((p) => p.startsWith("t "))) problems.push("no t=<unix seconds> part")
  if (v1.length === 0 && !problems.some((p) => p.startsWith("v1 "))) problems.push("no v1=<hex signature> part")
  return { t, v1, problems }
}

const matches = (secret: string, body: string, t: number, v1: ReadonlyArray<string>) => {
  const expected = Buffer.from(signatureHex(secret, body, t), "hex")
  let found = false
  for (const candidate of v1) if (timingSafeEqual(expected, Buffer.from(candidate, "hex"))) found = true
  return found
}

const firstDifference = (a: string, b: string): number => {
  const x = Buffer.from(a, "utf8")
  const y = Buffer.from(b, "utf8")
  const n = Math.min(x.length, y.length)
  for (let i = 0; i < n; i++) if (x[i] !== y[i]) return i
  return n
}

const sameJson = (a: string, b: string) => {
  try {
    return isDeepStrictEqual(JSON.parse(a), JSON.parse(b))
  } catch {
    return false
  }
}

const describeAge = (age: number) => (age >= 0 ? `${age} s in the past` : `${-age} s in the future`)

export const diagnose = (input: DiagnosisInput): Diagnosis => {
  const { secrets, body, nowSeconds } = input
  const base = {
    header: null as string | null,
    timestamp: null as number | null,
    age_seconds: null as number | null,
    tolerance_seconds: TOLERANCE_SECONDS,
    signatures: 0,
    matched_secret: null as "current" | "previous" | null,
    event_id: input.eventId,
    delivery_known: input.delivered !== null,
    first_difference_at: null as number | null,
    previous_expires_at: secrets.previous?.expiresAt ?? null,
    problems: [] as ReadonlyArray<string>
  }
  const result = (valid: boolean, verdict: Verdict, message: string, details: Partial<Diagnosis["details"]> = {}): Diagnosis => ({
    valid,
    verdict,
    message,
    details: { ...base, ...details }
  })

  const primary = headerOf(input.headers, SIGNATURE_HEADER)
  const legacy = headerOf(input.headers, LEGACY_SIGNATURE_HEADER)
  const value = primary ?? legacy
  if (value === undefined) {
    return result(false, "missing_header",
      `Neither ${SIGNATURE_HEADER} nor ${LEGACY_SIGNATURE_HEADER} is among the headers given. Pass every header ` +
        "your endpoint received (names in any case); if they are really missing, something between Mailroom and " +
        "your code (a proxy, gateway or framework) drops them.")
  }
  base.header = primary !== undefined ? SIGNATURE_HEADER : LEGACY_SIGNATURE_HEADER
  const parsed = parse(value)
  base.signatures = parsed.v1.length
  if (parsed.t === null || parsed.v1.length === 0) {
    return result(false, "malformed_header",
      `${base.header} must look like t=<unix seconds>,v1=<64 hex characters> (during a secret rotation a second ` +
        `v1 follows): ${parsed.problems.join("; ")}.`,
      { problems: parsed.problems })
  }
  const t = parsed.t
  const age = nowSeconds - t
  base.timestamp = t
  base.age_seconds = age
  base.problems = parsed.problems
  const inTolerance = Math.abs(age) <= TOLERANCE_SECONDS

  const which = (text: string): "current" | "previous" | null =>
    matches(secrets.current, text, t, parsed.v1)
      ? "current"
      : secrets.previous !== null && matches(secrets.previous.secret, text, t, parsed.v1)
      ? "previous"
      : null

  const onBody = which(body)
  if (onBody === "current") {
    if (inTolerance) {
      return result(true, "valid",
        `The signature is valid: a v1 matches HMAC-SHA256("${t}.<body>") with the current secret and t is within ` +
          `${TOLERANCE_SECONDS} s. If your code still rejects it, it probably verifies with another secret or over ` +
          "a body it re-serialized; compare with the secret from GET /v1/account/webhook-secret and the raw bytes.",
        { matched_secret: "current" })
    }
    return result(false, "timestamp_out_of_tolerance",
      `The signature matches the current secret, but t=${t} is ${describeAge(age)}, ${Math.abs(age) - TOLERANCE_SECONDS} s ` +
        `beyond the ${TOLERANCE_SECONDS} s tolerance, so verifiers reject it as a possible replay. Verify when the ` +
        "request arrives (not later from a queue), keep the receiver's clock in sync (NTP), or replay the delivery: " +
        "a replay is signed afresh.",
      { matched_secret: "current" })
  }
  if (onBody === "previous") {
    const expires = secrets.previous!.expiresAt
    const still = expires.getTime() / 1000 > nowSeconds
    return result(false, "signed_with_previous_secret",
      `This request was signed only with the secret replaced at the last rotation (it ${still ? "still signs until" : "stopped signing at"} ` +
        `${expires.toISOString()}). Requests sent since the rotation carry a v1 for the current secret` +
        (still ? " as well" : "") + `; verify with the current secret from GET /v1/account/webhook-secret, and accept a ` +
        "header when any of its v1 values matches.",
      { matched_secret: "previous" })
  }

  if (input.delivered !== null && input.delivered !== body) {
    const signedDelivered = which(input.delivered)
    if (signedDelivered !== null) {
      const at = firstDifference(input.delivered, body)
      if (sameJson(input.delivered, body)) {
        return result(false, "body_reserialized",
          `The body parses to the same JSON as delivery ${input.eventId}, but its bytes differ from the ones that were ` +
            `signed (first difference at byte ${at}): it was re-serialized, typically by a JSON body parser. Compute ` +
            "the HMAC over the raw request body bytes, before any JSON parsing.",
          { matched_secret: signedDelivered, first_difference_at: at })
      }
      return result(false, "body_modified",
        `The body differs from what was delivered for ${input.eventId} (first difference at byte ${at}), and not only ` +
          "in formatting: its content changed after it was received. Verify over the exact raw body Mailroom sent.",
        { matched_secret: signedDelivered, first_difference_at: at })
    }
  }

  const exact = input.delivered !== null && input.delivered === body
  return result(false, "signed_with_unknown_secret",
    exact
      ? `The body is exactly what was delivered for ${input.eventId}, but no v1 matches it under the current or the ` +
        "previous secret: the signature was made with a secret this account does not hold (another account's, or one " +
        "replaced before the last rotation), or t was changed."
      : "No v1 matches this body under the current or the previous secret. Either the body is not byte for byte what " +
        "was signed (verify over the raw request body; include the payload's id so the delivered bytes can be " +
        "compared), or it was signed with another secret (another account's, or one replaced before the last rotation).")
}
