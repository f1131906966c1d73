/**
 * Local delivery, the send path's side: mail for an address this service receives itself (a managed
 * inbox, a verified domain of any organization, a registry entry that resolves to either) never goes
 * to `OUTBOUND_SMTP_URL` or the dev outbox; it is handed to the inbound pipeline through the
 * `LocalDelivery` port, and only the other recipients are relayed. One send with both kinds of
 * recipients is split; its outcome reads like one relay transaction (`localOutcome`).
 *
 * The port is bound late: the receiving side (src/inbound/Local.ts) needs the hooks stored with every
 * inbound email, and one of them (the payments email rail) sends mail itself, so the receiver cannot
 * exist before the send path does. The composition root provides the port empty and registers the
 * receiver once the inbound services are built; a send waits for that (milliseconds, at start-up).
 */
import { Context, Deferred, Duration, Effect, Layer, Option } from "effect"
import { OutboundRelayFailed } from "../contract/Errors.js"
import type { RelayEnvelope, RelayError, RelayResult } from "./Relay.js"

/** A composed, signed message for recipients this service receives. */
export interface LocalMessage {
  readonly raw: Buffer
  readonly envelope: RelayEnvelope
  /** The From address, already checked to be one the sending organization may send from. */
  readonly from: string
  /** Whether the service DKIM-signed the message (a domain's key, or the managed domain's). */
  readonly signed: boolean
}

/** One recipient the inbound side refused, as an SMTP server would have (`550 5.1.1 …`). */
export interface LocalRefusal {
  readonly address: string
  readonly code: number
  readonly response: string
}

export interface LocalOutcome {
  /** Stored email ids, one per copy. */
  readonly stored: ReadonlyArray<string>
  readonly delivered: ReadonlyArray<string>
  readonly refused: ReadonlyArray<LocalRefusal>
}

/**
 * Which domains are verified and active (of any organization), read beforehand with the send's other
 * state (sending/Checks.ts `stateOf`): `asked` the domains it was read for (lower case), `verified`
 * those of them that are. A domain it was not read for is looked up as without it.
 */
export interface DomainsRead {
  readonly asked: ReadonlySet<string>
  readonly verified: ReadonlySet<string>
}

export interface LocalReceiver {
  /** Which of these addresses (lowercased, no display name) this service receives mail for. */
  readonly receives: (addresses: ReadonlyArray<string>, read?: DomainsRead) => Effect.Effect<ReadonlySet<string>>
  /** Stores the message for its (local) envelope recipients through the inbound pipeline. */
  readonly deliver: (message: LocalMessage) => Effect.Effect<LocalOutcome>
}

export interface LocalDeliveryPort {
  readonly register: (receiver: LocalReceiver) => Effect.Effect<void>
  /** The registered receiver; none when the process composes no inbound side (all mail is relayed). */
  readonly receiver: Effect.Effect<Option.Option<LocalReceiver>>
}

/** How long a send waits for the receiver at start-up before relaying everything. */
const REGISTRATION_WAIT = Duration.seconds(10)

export class LocalDelivery extends Context.Tag("mailroom/LocalDelivery")<LocalDelivery, LocalDeliveryPort>() {
  /** The port, empty until the inbound side registers (src/Server.ts). */
  static readonly Live = Layer.effect(
    LocalDelivery,
    Effect.map(Deferred.make<LocalReceiver>(), (slot): LocalDeliveryPort => ({
      register: (receiver) => Effect.asVoid(Deferred.succeed(slot, receiver)),
      receiver: Deferred.await(slot).pipe(Effect.timeoutTo({
        duration: REGISTRATION_WAIT,
        onTimeout: () => Option.none<LocalReceiver>(),
        onSuccess: Option.some
      }))
    }))
  )

  /** No local delivery: every recipient goes to the relay (for tests that model two services joined by one). */
  static readonly Off = Layer.succeed(LocalDelivery, { register: () => Effect.void, receiver: Effect.succeedNone })
}

const refusalText = (r: LocalRefusal) => `${r.address} (${r.code} ${r.response})`

/**
 * Every local recipient refused and nothing relayed fails the send as a relay refusing the whole
 * message would: 502 `outbound_relay_failed` with the first refusal's SMTP code and reply (a
 * 4xx, e.g. a full mailbox, is transient: a scheduled send tries again).
 */
export const localFailure = (refused: ReadonlyArray<LocalRefusal>): RelayError => {
  const first = refused[0]!
  return new OutboundRelayFailed({
    message: `the recipient${refused.length > 1 ? "s" : ""} on this service refused the message: ${refused.map(refusalText).join(", ")}`,
    details: { smtp_code: first.code, smtp_response: first.response, command: "RCPT TO" }
  })
}

/**
 * Sends one composed message: the local recipients through the receiver, the others through
 * `relay`. The relay goes first, so a relay failure leaves nothing delivered and a retry (the same
 * Idempotency-Key, or the scheduled send's next attempt) sends to everyone once. The outcome reads
 * like one relay transaction: delivered locally like a relay's `250`, each local refusal like a
 * relay refusing that recipient (listed in `rejected`, so the sent email says `refused: …`).
 */
export const sendSplit = (
  receiver: Option.Option<LocalReceiver>,
  relay: (envelope: RelayEnvelope, raw: Buffer) => Effect.Effect<RelayResult, RelayError>,
  message: LocalMessage,
  read?: DomainsRead
): Effect.Effect<RelayResult, RelayError> =>
  Effect.gen(function*() {
    if (Option.isNone(receiver)) return yield* relay(message.envelope, message.raw)
    const local = yield* receiver.value.receives(message.envelope.to, read)
    if (local.size === 0) return yield* relay(message.envelope, message.raw)
    const foreign = message.envelope.to.filter((a) => !local.has(a))
    const relayed = foreign.length === 0 ? undefined : yield* relay({ ...message.envelope, to: foreign }, message.raw)
    const o = yield* receiver.value.deliver({ ...message, envelope: { ...message.envelope, to: [...local] } })
    if (o.delivered.length === 0 && relayed === undefined) return yield* localFailure(o.refused)
    const responses = [
      ...(relayed === undefined ? [] : [relayed.response]),
      ...(o.delivered.length === 0 ? [] : [`250 2.0.0 delivered on this service to ${o.delivered.join(", ")}`])
    ]
    return { response: responses.join("; "), rejected: [...(relayed?.rejected ?? []), ...o.refused.map(refusalText)] }
  })
