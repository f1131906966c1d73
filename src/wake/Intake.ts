/**
 * The port through which a fired wake's email enters the inbound pipeline. Firing composes and signs
 * the email (Firing.ts); storing it as received mail for the function's wake address is the inbound
 * side's work, which sits above this area: the inbound side implements the port
 * (src/inbound/WakeIntake.ts) and the composition root (src/Server.ts) wires it.
 */
import type { Statement } from "@effect/sql"
import { Context, Data, type Effect, type Option } from "effect"
import type { CommandPart } from "../mail/WakeMessage.js"

/** The organization's storage is full: nothing was stored. */
export class WakeStorageFull extends Data.TaggedError("WakeStorageFull")<{}> {}

/** A composed wake email, as the inbound pipeline receives it (its command signed by the firing). */
export interface WakeEmail {
  readonly raw: Buffer
  readonly envelopeFrom: string
  readonly command: CommandPart
  /**
   * The command's use mark (a data-modifying statement of this area), stored by the statement that
   * stores the email: the firing's email and the mark that makes a replay of it refused are one write.
   */
  readonly useMark: Statement.Fragment
}

/** What an address resolves to on the inbound side. */
export interface WakeRecipient {
  readonly orgId: string
  /** Passes the email through the inbound pipeline for this recipient (as if it arrived over SMTP): the stored copy's id. */
  readonly receive: (email: WakeEmail) => Effect.Effect<string, WakeStorageFull>
}

export class WakeIntake extends Context.Tag("mailroom/WakeIntake")<WakeIntake, {
  /** The recipient an address is on the inbound side; none when the service receives nothing there. */
  readonly lookup: (address: string) => Effect.Effect<Option.Option<WakeRecipient>>
}>() {}
