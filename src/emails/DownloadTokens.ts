/**
 * Signed download tokens for the raw message and attachments:
 * `<payload>.<signature>`, base64url, HMAC-SHA256 with a key kept in PostgreSQL (shared by every
 * process), bound to the email id and the download kind, valid 24 hours. The key is stored sealed
 * (platform/Sealed.ts) under a key derived from the service key; a key stored in clear by an earlier
 * version is sealed at start-up.
 */
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Schema } from "effect"
import { createHmac, randomBytes } from "node:crypto"
import { rowsOrDie } from "../platform/Rows.js"
import { constantTimeEqual } from "../platform/Secrets.js"
import { isSealed, open, seal } from "../platform/Sealed.js"
import { ServiceKey } from "../platform/ServiceKey.js"

export const DOWNLOAD_TOKEN_TTL_SECONDS = 24 * 3600
export const SEAL_PURPOSE = "mailroom/download-token-key/v1"
const KEY_NAME = "download_token_key"

/** What a token lets its holder fetch: the raw MIME, the tarball, or one attachment by index. */
export type DownloadKind = "raw" | "attachments" | `attachment:${number}`

export type Verdict = "ok" | "expired" | "invalid"

interface Claims {
  readonly e: string
  readonly k: string
  readonly x: number
}

export class DownloadTokens extends Effect.Service<DownloadTokens>()("mailroom/DownloadTokens", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const sealing = yield* Effect.flatMap(ServiceKey, (k) => k.derive(SEAL_PURPOSE))
    // Created once by whichever process gets there first; every process reads the same key.
    yield* sql`INSERT INTO service_secrets (name, value)
               VALUES (${KEY_NAME}, ${seal(sealing, randomBytes(32).toString("base64url"), KEY_NAME)})
               ON CONFLICT (name) DO NOTHING`.pipe(Effect.orDie)
    const [{ value: stored }] = yield* sql`SELECT value FROM service_secrets WHERE name = ${KEY_NAME}`.pipe(
      Effect.flatMap(Schema.decodeUnknown(Schema.Tuple(Schema.Struct({ value: Schema.String })))),
      rowsOrDie("download-token key")
    )
    if (!isSealed(stored)) {
      // Written in clear by an earlier version: sealed in place (only if still that clear value).
      yield* sql`UPDATE service_secrets SET value = ${seal(sealing, stored, KEY_NAME)}
                 WHERE name = ${KEY_NAME} AND value = ${stored}`.pipe(Effect.orDie)
    }
    const opened = isSealed(stored) ? open(sealing, stored, KEY_NAME) : stored
    if (opened === undefined) {
      return yield* Effect.dieMessage(
        "the download-token key does not decrypt: the service key (MAILROOM_SECRET_KEY, or DATA_DIR/secret.key) " +
          "is not the one it was sealed with"
      )
    }
    const key = Buffer.from(opened, "base64url")
    const mac = (payload: string) => createHmac("sha256", key).update(payload).digest("base64url")

    const issue = (emailId: string, kind: DownloadKind) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        const claims: Claims = { e: emailId, k: kind, x: Math.floor(now / 1000) + DOWNLOAD_TOKEN_TTL_SECONDS }
        const payload = Buffer.from(JSON.stringify(claims)).toString("base64url")
        return `${payload}.${mac(payload)}`
      })

    const verify = (token: string, emailId: string, kind: DownloadKind): Effect.Effect<Verdict> =>
      Effect.map(Clock.currentTimeMillis, (now): Verdict => {
        const dot = token.indexOf(".")
        if (dot <= 0 || token.length > 1024) return "invalid"
        const payload = token.slice(0, dot)
        if (!constantTimeEqual(mac(payload), token.slice(dot + 1))) return "invalid"
        let claims: Claims
        try {
          claims = JSON.parse(Buffer.from(payload, "base64url").toString("utf8")) as Claims
        } catch {
          return "invalid"
        }
        if (claims.e !== emailId || claims.k !== kind || typeof claims.x !== "number") return "invalid"
        return now / 1000 > claims.x ? "expired" : "ok"
      })

    return { issue, verify } as const
  }),
  dependencies: [ServiceKey.Default]
}) {}
