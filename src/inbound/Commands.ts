/**
 * Wake commands in inbound mail, for every way mail arrives (SMTP and local delivery): a message
 * for a function's wake address must carry a command, and a command signed with a recipient
 * organization's secret must be for that function, name its wake id and be used once.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Option } from "effect"
import { WebhookSecrets } from "../account/WebhookSecret.js"
import { claimWakeCommand } from "../wake/Firing.js"
import { commandOf, type CommandPart, useKeyOf, verifyCommand } from "../mail/WakeMessage.js"
import type { Recipient } from "./Recipients.js"

export type CommandCheck =
  | { readonly _tag: "Command"; readonly command: CommandPart | null }
  | { readonly _tag: "NoCommand"; readonly problem: string }
  | { readonly _tag: "Refused"; readonly reason: string }

/**
 * Why a command signed with a recipient organization's secret is refused, if it is: signed for
 * another function (or for none), naming no wake id, or used already (a replay). A command whose
 * signature does not verify is not refused here: it is delivered unverified, as an unsigned one.
 */
const signedCommandRefusal = (command: CommandPart, rcpts: ReadonlyArray<Recipient>) =>
  Effect.gen(function*() {
    if (command.signature === null) return undefined
    const secrets = yield* WebhookSecrets
    for (const r of rcpts) {
      if (r.wake === null) continue
      const keys = Option.getOrElse(yield* secrets.signing(r.orgId), () => [])
      if (!verifyCommand(command.signature, command.json, keys, Date.now())) continue
      if (command.functionId !== r.wake.functionId) {
        return `5.7.1 <${r.address}>: this signed command is for ${command.functionId === null ? "no named function" : "another function"}`
      }
      const key = useKeyOf(command)
      if (key === null) return `5.7.1 <${r.address}>: a signed command must name its wake_id`
      if (!(yield* claimWakeCommand(r.orgId, key))) return `5.7.1 <${r.address}>: this signed command was already used`
    }
    return undefined
  })

/** The command a message carries for its wake recipients (null when it has none of them), or why it is refused whole. */
export const checkCommand = (raw: Buffer, rcpts: ReadonlyArray<Recipient>): Effect.Effect<CommandCheck, never, WebhookSecrets | SqlClient.SqlClient> =>
  Effect.gen(function*() {
    if (!rcpts.some((r) => r.wake !== null)) return { _tag: "Command", command: null } as const
    const found = yield* Effect.promise(() => commandOf(raw).catch((e: unknown) => ({ problem: `the message cannot be read (${String(e)})` })))
    if ("problem" in found) return { _tag: "NoCommand", problem: found.problem } as const
    const refusal = yield* signedCommandRefusal(found, rcpts).pipe(Effect.orDie)
    if (refusal !== undefined) return { _tag: "Refused", reason: refusal } as const
    return { _tag: "Command", command: found } as const
  })
