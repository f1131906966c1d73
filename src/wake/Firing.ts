/**
 * Firing a wake: the signed command email is composed and passed through the inbound pipeline (stored
 * like received mail, listed by GET /emails, delivered to the function's endpoint with retries) as if
 * it had arrived over SMTP for the function's wake address. Its Message-ID is derived from the wake
 * and the due time, and an email already stored under it is not stored again: a firing retried after
 * a crash (another process takes the lease over) stores its email once. Only a firing that may have
 * been tried before looks for that copy (the claim says so: the row's lease had run out, or a retry
 * time was set); a first try cannot find one.
 */
import { SqlClient } from "@effect/sql"
import { Clock, Data, Effect, Option } from "effect"
import { WebhookSecrets } from "../account/WebhookSecret.js"
import { AppConfig } from "../platform/Config.js"
import { DkimKeys } from "../domains/Dkim.js"
import { composeWake, useKeyOf, WAKE_SENDER_LOCAL, wakeAddress } from "../mail/WakeMessage.js"
import { WakeIntake } from "./Intake.js"
import { payloadOf, type WakeRow } from "./Repo.js"

/**
 * Marks a signed command used; answers false when it was already (a replay). Old marks go with it:
 * a signature older than a day no longer verifies anyway.
 */
export const claimWakeCommand = (orgId: string, useKey: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const rows = yield* sql<{ use_key: string }>`
      WITH gone AS (DELETE FROM wake_commands_used WHERE org_id = ${orgId} AND used_at < now() - interval '2 days')
      INSERT INTO wake_commands_used (org_id, use_key) VALUES (${orgId}, ${useKey})
      ON CONFLICT DO NOTHING RETURNING use_key`
    return rows.length > 0
  })

/**
 * The use mark of a command this service signed, stored with its email (WakeEmail.useMark). Old
 * marks are removed as wakes fire (WakesRepo.fired).
 */
export const commandUseMark = (sql: SqlClient.SqlClient, orgId: string, useKey: string) =>
  sql`INSERT INTO wake_commands_used (org_id, use_key) VALUES (${orgId}, ${useKey}) ON CONFLICT DO NOTHING`

/** The firing did not store its email (the function is gone, or storage is full): try again later, or give up. */
export class FiringFailed extends Data.TaggedError("FiringFailed")<{ readonly reason: string; readonly retry: boolean }> {}

export class WakeFiring extends Effect.Service<WakeFiring>()("mailroom/WakeFiring", {
  effect: Effect.gen(function*() {
    const config = yield* AppConfig
    const secrets = yield* WebhookSecrets
    const intake = yield* WakeIntake
    const sql = yield* SqlClient.SqlClient
    const domain = config.managedInboxDomain
    const dkim = yield* DkimKeys

    /**
     * Stores the wake's email for the firing due at `scheduledFor`; answers the email's id.
     * `attempted`: the firing may have been tried before, so its email may already be stored.
     */
    const fire = (wake: WakeRow, scheduledFor: Date, attempted: boolean) =>
      Effect.gen(function*() {
        const firedAt = new Date(yield* Clock.currentTimeMillis)
        // Reading the secret creates it on first use; the current one signs.
        const secret = yield* secrets.get(wake.org_id)
        if (Option.isNone(secret)) return yield* new FiringFailed({ reason: "the organization no longer exists", retry: false })
        const signing = yield* dkim.managedSigning
        const { command, messageId, raw } = yield* Effect.promise(() =>
          composeWake({
            domain,
            functionId: wake.function_id,
            wakeId: wake.id,
            type: wake.command_type,
            payload: payloadOf(wake),
            scheduledFor,
            firedAt,
            secret: secret.value,
            threadId: wake.watch_thread_id,
            dkim: signing
          })
        )
        if (attempted) {
          const stored = yield* sql<{ id: string }>`SELECT id FROM emails WHERE org_id = ${wake.org_id} AND message_id = ${messageId} LIMIT 1`
            .pipe(Effect.orDie)
          if (stored[0] !== undefined) return stored[0].id
        }
        const recipient = yield* intake.lookup(wakeAddress(wake.function_id, domain))
        if (Option.isNone(recipient) || recipient.value.orgId !== wake.org_id) {
          return yield* new FiringFailed({ reason: "the function no longer exists", retry: false })
        }
        if ("problem" in command) return yield* Effect.dieMessage(`a composed wake email has no command: ${command.problem}`)
        // Used once: the same signed email mailed in later is a replay (SmtpServer refuses it). The
        // mark is written by the statement that stores the email.
        const useMark = commandUseMark(sql, wake.org_id, useKeyOf(command)!)
        return yield* recipient.value.receive({ raw, envelopeFrom: `${WAKE_SENDER_LOCAL}@${domain}`, command, useMark }).pipe(
          Effect.catchTag("WakeStorageFull", () =>
            Effect.fail(new FiringFailed({ reason: "the organization's storage is full", retry: true })))
        )
      })

    return { fire } as const
  }),
  dependencies: [DkimKeys.Default]
}) {}
