/**
 * The inbound side of the wake port (src/wake/Intake.ts): a fired wake's email is analysed and
 * stored like received mail for its recipient, with the hooks every stored email runs (its
 * deliveries), exactly as for mail that arrives over SMTP.
 */
import { Effect, Layer, Option } from "effect"
import { WakeIntake, WakeStorageFull } from "../wake/Intake.js"
import { MessageAnalysis } from "./AnalyzePool.js"
import { Recipients } from "./Recipients.js"
import { EmailStoredHooks, InboundStore } from "./Store.js"

export const WakeIntakeLive = Layer.effect(
  WakeIntake,
  Effect.gen(function*() {
    const recipients = yield* Recipients
    const store = yield* InboundStore
    const hooks = yield* EmailStoredHooks
    const pool = yield* MessageAnalysis
    return {
      lookup: (address) =>
        Effect.map(recipients.lookup(address), Option.map((recipient) => ({
          orgId: recipient.orgId,
          receive: (email) =>
            Effect.gen(function*() {
              const analysis = yield* Effect.promise(() => pool.analyze(email.raw, null))
              const copies = yield* store.store({
                raw: email.raw,
                envelopeFrom: email.envelopeFrom,
                clientAddress: null,
                helo: null,
                ...analysis,
                command: email.command,
                commandSignedHere: true
              }, [recipient]).pipe(
                // The command's use mark goes with the email, in the statement that stores it.
                Effect.provideService(EmailStoredHooks, {
                  hooks: [...hooks.hooks, () => Effect.succeed(Option.some(email.useMark))]
                }),
                Effect.catchTag("StorageQuotaExceeded", () => Effect.fail(new WakeStorageFull())),
                // The database being away is no reason to give up: the lease expires and the firing is retried.
                Effect.catchTag("SqlError", Effect.die)
              )
              return copies[0]!.id
            })
        })))
    }
  })
).pipe(Layer.provide(MessageAnalysis.Default))
