/**
 * Firing a wake: the signed command email is composed and passed through the inbound pipeline (stored
 * like received mail, listed by GET /emails, delivered to the function's endpoint with retries) as if
 * it had arrived over SMTP for the function's wake address. Its Message-ID is derived from the wake
 * and the due time, and an email already stored under it is not stored again: a firing retried after
 * a crash (another process takes the lease over) stores its email once.
 */
import { SqlClient } from "@effect/sql"
import { Clock, Data, Effect, Option } from "effect"
import { WebhookSecrets } from "../account/WebhookSecret.js"
import { analyze } from "../inbound/Analyze.js"
import { Recipients } from "../inbound/Recipients.js"
import { EmailStoredHooks, InboundStore } from "../inbound/Store.js"
import { AppConfig } from "../platform/Config.js"
import { DkimKeys } from "../sending/Dkim.js"
import { commandOf, composeWake, useKeyOf, WAKE_SENDER_LOCAL, wakeAddress } from "./Message.js"
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

/** The firing did not store its email (the function is gone, or storage is full): try again later, or give up. */
export class FiringFailed extends Data.TaggedError("FiringFailed")<{ readonly reason: string; readonly retry: boolean }> {}

export class WakeFiring extends Effect.Service<WakeFiring>()("mailroom/WakeFiring", {
  effect: Effect.gen(function*() {
    const config = yield* AppConfig
    const secrets = yield* WebhookSecrets
    const recipients = yield* Recipients
    const store = yield* InboundStore
    const hooks = yield* EmailStoredHooks
    const sql = yield* SqlClient.SqlClient
    const domain = config.managedInboxDomain
    const dkim = yield* DkimKeys

    /** Stores the wake's email for the firing due at `scheduledFor`; answers the email's id. */
    const fire = (wake: WakeRow, scheduledFor: Date) =>
      Effect.gen(function*() {
        const firedAt = new Date(yield* Clock.currentTimeMillis)
        // Reading the secret creates it on first use; the current one signs.
        const secret = yield* secrets.get(wake.org_id)
        if (Option.isNone(secret)) return yield* new FiringFailed({ reason: "the organization no longer exists", retry: false })
        const signing = yield* dkim.managedSigning
        const { raw, messageId } = yield* Effect.promise(() =>
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
        const stored = yield* sql<{ id: string }>`SELECT id FROM emails WHERE org_id = ${wake.org_id} AND message_id = ${messageId} LIMIT 1`
          .pipe(Effect.orDie)
        if (stored[0] !== undefined) return stored[0].id
        const recipient = yield* recipients.lookup(wakeAddress(wake.function_id, domain))
        if (Option.isNone(recipient) || recipient.value.orgId !== wake.org_id) {
          return yield* new FiringFailed({ reason: "the function no longer exists", retry: false })
        }
        const analysis = yield* Effect.promise(() => analyze(raw, null))
        const command = yield* Effect.promise(() => commandOf(raw))
        if ("problem" in command) return yield* Effect.dieMessage(`a composed wake email has no command: ${command.problem}`)
        // Used once: the same signed email mailed in later is a replay (SmtpServer refuses it).
        yield* claimWakeCommand(wake.org_id, useKeyOf(command)!).pipe(Effect.provideService(SqlClient.SqlClient, sql), Effect.orDie)
        const copies = yield* store.store({
          raw,
          envelopeFrom: `${WAKE_SENDER_LOCAL}@${domain}`,
          clientAddress: null,
          helo: null,
          ...analysis,
          command
        }, [recipient.value]).pipe(
          Effect.provideService(EmailStoredHooks, hooks),
          Effect.catchTag("StorageQuotaExceeded", () =>
            Effect.fail(new FiringFailed({ reason: "the organization's storage is full", retry: true }))),
          // The database being away is no reason to give up: the lease expires and the firing is retried.
          Effect.catchTag("SqlError", Effect.die)
        )
        return copies[0]!.id
      })

    return { fire } as const
  }),
  dependencies: [DkimKeys.Default]
}) {}
